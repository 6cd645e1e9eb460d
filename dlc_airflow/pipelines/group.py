"""training_pipeline(): a TaskGroup chaining preprocess -> train -> inference DLC jobs.

    lineage ──────────────┐ (depends_on_past, wait_for_downstream)
    preprocess ──> train ──> commit ──> [promote] ──> inference
                   (depends_on_past)  (all_done)   (the gate)

Data and model locations travel as URIs in each job's env (dlc_airflow.runtime.pipeline
reads them), templated from the run's data interval and the lineage tasks' XComs:

    preprocess  DLC_OUTPUT_URI = <root>/<lineage>/data/<interval>
    train       DLC_DATA_URI   = that data; checkpoint.uri = <root>/<lineage>/checkpoints/<interval>,
                checkpoint.resume_from = the predecessor's checkpoint (lineage XCom)
    inference   DLC_DATA_URI, DLC_MODEL_URI = the model to run (commit or promote XCom),
                DLC_OUTPUT_URI = <root>/<lineage>/predictions/<interval>

With `approval=` a person approves the promotion (dlc_airflow.pipelines.approval):

    commit ──> gate ──> approve ──> promote ──> inference

One lineage never trains twice at once: the lineage task of interval k waits (Airflow's
depends_on_past + wait_for_downstream) until interval k-1's lineage, train, commit and
promote tasks succeeded, so training runs in interval order, one at a time, while the
preprocessing and inference of different intervals may overlap.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pipelines.approval import Approval
from dlc_airflow.pipelines.layout import INTERVAL_KEY_TEMPLATE, Layout
from dlc_airflow.pipelines.lineage import Gate
from dlc_airflow.spec import DLCJob, load_job, parse_job

__all__ = ["PIPELINE_ENV", "training_pipeline"]

# Env names the pipeline sets; a job spec that sets one itself is refused.
PIPELINE_ENV = (
    "DLC_LINEAGE", "DLC_INTERVAL_START", "DLC_INTERVAL_END", "DLC_INTERVAL_KEY", "DLC_STORAGE_URI",
    "DLC_STORAGE_DIR", "DLC_DATA_URI", "DLC_OUTPUT_URI", "DLC_MODEL_URI",
)
_START = "{{ data_interval_start.in_timezone('UTC').isoformat() }}"
_END = "{{ data_interval_end.in_timezone('UTC').isoformat() }}"


def _xcom(task_id: str, key: str) -> str:
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['" + key + "'] }}"


def _job(job: DLCJob | JSONObject | str | os.PathLike[str], what: str) -> DLCJob:
    if isinstance(job, (str, os.PathLike)):
        path = Path(job)
        if not path.is_absolute():
            from airflow.sdk.definitions._internal.contextmanager import DagContext

            dag = DagContext.get_current()
            base = Path(dag.fileloc).parent if dag is not None and getattr(dag, "fileloc", None) else Path.cwd()
            path = base / path
        return load_job(path)
    return parse_job(job, source=f"{what} job")


def _with_env(job: DLCJob, what: str, env: dict[str, str]) -> JSONObject:
    taken = sorted(set(env) & (set(job.env) | {k for r in job.roles.values() for k in r.env}))
    if taken:
        raise ValueError(f"the {what} job sets {', '.join(taken)} in its env, which the pipeline sets: remove them")
    data = job.to_dict()
    data["env"] = {**job.env, **env}
    return data


# what the pipeline passes to each operator itself; operator_kwargs may not set them again
_PIPELINE_SETS = ("task_id", "job", "backend", "conn_id", "namespace", "local_root", "depends_on_past", "outlets",
                  "notify")


def _check_arguments(gate: Any, keep_last: Any, operator_kwargs: Any, train_kwargs: Any,
                     approval: Any = None) -> None:
    """At DAG parse time, one line each: these would otherwise fail with a TypeError deep
    inside the pipeline, or only when the first model is gated."""
    if gate is not None and not isinstance(gate, Gate):
        raise ValueError(f"gate must be a Gate(metric, threshold, mode) or None, not {gate!r}")
    if approval is not None and not isinstance(approval, Approval):
        raise ValueError(f"approval must be an Approval(timeout=..., assigned_users=...) or None, not {approval!r}")
    if approval is not None and gate is None:
        raise ValueError("approval needs a gate: the approver sees what the metric gate compared "
                         "(e.g. gate=Gate('accuracy', 0.0) to approve every model by hand)")
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
        raise ValueError(f"keep_last must be a whole number >= 1 (checkpoints kept per interval), not {keep_last!r}")
    for what, extra in (("operator_kwargs", operator_kwargs), ("train_kwargs", train_kwargs)):
        if extra is None:
            continue
        if not isinstance(extra, dict):
            raise ValueError(f"{what} must be a dict of DLCJobOperator arguments, not {extra!r}")
        taken = sorted(set(extra) & set(_PIPELINE_SETS))
        if taken:
            raise ValueError(f"{what} sets {', '.join(taken)}, which the pipeline sets itself: "
                             "pass them as training_pipeline arguments, or drop them")


def training_pipeline(
    *,
    preprocess: DLCJob | JSONObject | str,
    train: DLCJob | JSONObject | str,
    inference: DLCJob | JSONObject | str,
    storage_root: str,
    lineage: str,
    group_id: str = "pipeline",
    gate: Gate | None = None,
    mount_path: str | None = None,
    storage_conn_id: str | None = None,
    on_unfinished: str = "block",
    backend: str | None = None,
    conn_id: str | None = None,
    namespace: str | None = None,
    local_root: str | None = None,
    operator_kwargs: JSONObject | None = None,
    train_kwargs: JSONObject | None = None,
    keep_last: int | None = None,
    notify: Any = None,
    approval: Approval | None = None,
) -> Any:
    """Add the pipeline to the current DAG as a TaskGroup `group_id` and return the group.

    :param preprocess, train, inference: the three DLC jobs (DLCJob, dict or spec path).
        The pipeline adds its env (PIPELINE_ENV) and the training job's checkpoint section.
    :param storage_root: where the lineage lives (file:///..., s3://, gs://, oss://; a plain
        absolute path is file://). The manifest is read and written through ObjectStoragePath.
    :param lineage: the lineage's name (a folder under storage_root).
    :param gate: promote a model only when its metric passes (Gate(metric, threshold, mode)).
        Inference runs the model of this interval if it passed, else the newest model
        promoted from data up to this interval, and is skipped when there is none. Without a
        gate every trained model is used.
    :param mount_path: where the jobs see storage_root (a storage mount); needed when the
        root is not a local path (s3://...) and the jobs read it through a mount.
    :param storage_conn_id: the Airflow connection ObjectStoragePath uses for storage_root.
    :param on_unfinished: "block" (default): an earlier interval that failed stops this one
        from resuming past it; "skip": resume from the newest successful interval anyway.
    :param backend, conn_id, namespace, local_root: passed to every DLCJobOperator.
    :param operator_kwargs: more DLCJobOperator arguments for all three jobs (e.g. timeout).
    :param train_kwargs: more arguments for the training operator only.
    :param keep_last: checkpoints kept per interval (default: the training job's, else 2).
    :param notify: Airflow notifiers told of every job's state changes (DLCJobOperator's notify).
    :param approval: a person approves each promotion the gate would make, in the Airflow UI's
        Required Actions (Approval(timeout, on_timeout, assigned_users, notify); needs `gate`).
        Reject, or no answer in time, skips promote and inference.
    """
    from airflow.sdk import TaskGroup

    from dlc_airflow.operators import DLCJobOperator
    from dlc_airflow.pipelines.assets import data_asset
    from dlc_airflow.pipelines.store import check_openable
    from dlc_airflow.pipelines.tasks import CommitOperator, GateOperator, LineageOperator, PromoteOperator

    layout = Layout(storage_root, lineage, mount_path)
    if layout.job_root is None:
        raise ValueError(
            f"storage_root {layout.root!r} is not a local path: give mount_path=, where the jobs see it "
            "(and mount it into them with a storage entry, e.g. a CSI volume for the object store)"
        )
    check_openable(layout.root)
    _check_arguments(gate, keep_last, operator_kwargs, train_kwargs, approval)
    if approval is not None:
        from dlc_airflow.pipelines.hitl import check_support

        check_support()  # at parse time: an Airflow or standard provider without HITL says so here
    pre_job, train_job, infer_job = _job(preprocess, "preprocess"), _job(train, "train"), _job(inference, "inference")

    common_env = {
        "DLC_LINEAGE": lineage,
        "DLC_INTERVAL_START": _START,
        "DLC_INTERVAL_END": _END,
        "DLC_INTERVAL_KEY": INTERVAL_KEY_TEMPLATE,
        "DLC_STORAGE_URI": layout.root,
        "DLC_STORAGE_DIR": layout.job_root,
    }
    gid = group_id
    ids = {name: f"{gid}.{name}"
           for name in ("lineage", "preprocess", "train", "commit", "gate", "approve", "promote", "inference")}
    model_source = ids["promote"] if gate is not None else ids["commit"]

    pre_spec = _with_env(pre_job, "preprocess", {**common_env, "DLC_OUTPUT_URI": layout.data_template()})
    train_spec = _with_env(train_job, "train", {**common_env, "DLC_DATA_URI": layout.data_template()})
    checkpoints = layout.checkpoints_template()
    train_spec["checkpoint"] = {
        "uri": checkpoints,
        "path": layout.local_for_jobs(checkpoints),
        "resume_from": _xcom(ids["lineage"], "resume_from"),
        "keep_last": keep_last or (train_job.checkpoint.keep_last if train_job.checkpoint else 2),
    }
    infer_spec = _with_env(infer_job, "inference", {
        **common_env,
        "DLC_DATA_URI": layout.data_template(),
        "DLC_MODEL_URI": _xcom(model_source, "model_uri"),
        "DLC_OUTPUT_URI": layout.predictions_template(),
    })

    store_kwargs = dict(storage_root=layout.root, lineage=lineage, mount_path=mount_path,
                        storage_conn_id=storage_conn_id)
    job_kwargs = dict(backend=backend, conn_id=conn_id, namespace=namespace, local_root=local_root,
                      notify=notify, **(operator_kwargs or {}))
    with TaskGroup(group_id=gid, tooltip=f"preprocess -> train -> inference ({lineage})") as group:
        resolve = LineageOperator(task_id="lineage", on_unfinished=on_unfinished, depends_on_past=True,
                                  wait_for_downstream=True, **store_kwargs)
        pre = DLCJobOperator(task_id="preprocess", job=pre_spec, outlets=[data_asset(layout.root, lineage)],
                             **job_kwargs)
        trainer = DLCJobOperator(task_id="train", job=train_spec, depends_on_past=True,
                                 **{**job_kwargs, **(train_kwargs or {})})
        commit = CommitOperator(task_id="commit", lineage_task_id=ids["lineage"], train_task_id=ids["train"],
                                promotes=gate is None, **store_kwargs)
        infer = DLCJobOperator(task_id="inference", job=infer_spec, **job_kwargs)
        resolve >> trainer
        pre >> trainer >> commit
        # commit (and promote) are immediate downstreams of lineage, so the next interval's
        # lineage task (wait_for_downstream) waits until they succeeded.
        resolve >> commit
        if gate is not None:
            gate_kwargs: dict[str, Any] = dict(commit_task_id=ids["commit"], metric=gate.metric, threshold=gate.threshold,
                               mode=gate.mode, **store_kwargs)
            # with an approval, promote also runs when approve skipped itself (nothing to approve);
            # a rejection skips promote itself (the ApprovalOperator's own rule)
            promote = PromoteOperator(task_id="promote", trigger_rule="none_failed" if approval else "all_success",
                                      approve_task_id=ids["approve"] if approval else None, **gate_kwargs)
            if approval is not None:
                from dlc_airflow.pipelines.hitl import approval_operator

                verdict = GateOperator(task_id="gate", **gate_kwargs)
                approve = approval_operator(approval, task_id="approve", gate_task_id=ids["gate"])
                commit >> verdict >> approve >> promote
            commit >> promote >> infer
            resolve >> promote
        else:
            commit >> infer
    return group
