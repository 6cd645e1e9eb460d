"""The pipeline's own small tasks: resolve the lineage, record the result, gate the model.

Each reads and writes the lineage manifest (dlc_airflow.pipelines.store) and returns a
small dict (its XCom) that later tasks template into job specs:

- LineageOperator: the predecessor this interval resumes from; marks the interval running.
- CommitOperator (trigger rule all_done): the training task's result -> succeeded (with
  its checkpoint and metrics) or failed in the manifest; fails itself when training did.
- PromoteOperator: the evaluation gate; moves the `promoted` pointer when the metric passes
  and says which model inference runs.
- GateOperator: the same verdict without moving anything, and the serving model it compared
  with: what a person approves before PromoteOperator runs (dlc_airflow.pipelines.approval).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from dlc_airflow.airflow.compat import AirflowFailException, AirflowSkipException
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pipelines import lineage as lin
from dlc_airflow.pipelines.assets import model_asset, promotions
from dlc_airflow.pipelines.layout import Layout
from dlc_airflow.pipelines.store import ManifestStore

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["CommitOperator", "GateOperator", "LineageOperator", "PromoteOperator", "context_interval"]


def context_interval(context: Context) -> lin.Interval:
    start, end = context.get("data_interval_start"), context.get("data_interval_end")
    if start is None or end is None:
        raise AirflowFailException(
            "this run has no data interval: a retraining pipeline needs a data-interval schedule "
            "(dlc_airflow.pipelines.retraining_dag, or CronDataIntervalTimetable / DeltaDataIntervalTimetable) "
            "and a logical date for manual runs"
        )
    try:
        return lin.Interval(start, end)
    except lin.LineageError as exc:
        raise AirflowFailException(str(exc)) from None


def announce_model(context: Context, storage_root: str, lineage: str, **extra: Any) -> None:
    """A model_asset event through the lineage's promotions alias (downstream DAGs scheduled on
    the model run after it)."""
    events = context.get("outlet_events")
    if events is not None:
        events[promotions(lineage)].add(model_asset(storage_root, lineage), extra=extra)


class _LineageTask(BaseOperator):
    ui_color = "#e8f2e1"

    def __init__(self, *, storage_root: str, lineage: str, mount_path: str | None = None,
                 storage_conn_id: str | None = None, **kwargs: Any) -> None:
        from dlc_airflow.pipelines.store import check_openable

        super().__init__(**kwargs)
        self.storage_root = storage_root
        self.lineage = lineage
        self.mount_path = mount_path
        self.storage_conn_id = storage_conn_id
        # at DAG parse time: a root no store opens would fail only when this task runs
        try:
            check_openable(self.layout.root)
        except ValueError as exc:
            raise ValueError(f"{self.task_id}: {exc}") from None

    @property
    def layout(self) -> Layout:
        return Layout(self.storage_root, self.lineage, self.mount_path)

    @property
    def store(self) -> ManifestStore:
        return ManifestStore(self.layout.manifest, self.lineage, conn_id=self.storage_conn_id)


class LineageOperator(_LineageTask):
    """Resolve what this interval resumes from and mark it running (a new attempt)."""

    def __init__(self, *, on_unfinished: str = "block", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if on_unfinished not in ("block", "skip"):
            raise ValueError(f"{self.task_id}: on_unfinished must be 'block' or 'skip', not {on_unfinished!r}")
        self.on_unfinished = on_unfinished

    def execute(self, context: Context) -> JSONObject:
        interval = context_interval(context)
        layout, run_id = self.layout, context["run_id"]
        found: JSONObject = {}

        def begin(manifest: JSONObject) -> JSONObject:
            predecessor = lin.resolve_predecessor(manifest, interval, on_unfinished=self.on_unfinished)
            found["predecessor"] = predecessor
            return lin.begin_attempt(manifest, interval, run_id=run_id, predecessor=predecessor)

        try:
            manifest = self.store.update(begin)
        except lin.LineageBlocked as exc:
            raise AirflowFailException(str(exc)) from None
        except lin.LineageError as exc:
            raise AirflowFailException(str(exc)) from None
        entry = manifest["intervals"][interval.key]
        predecessor = found["predecessor"]
        if predecessor:
            self.log.info("interval %s (attempt %d) resumes from interval %s: %s", interval.key, entry["attempt"],
                          predecessor[0], predecessor[1]["checkpoint"])
        else:
            self.log.info("interval %s (attempt %d) starts from scratch: no successful interval before it",
                          interval.key, entry["attempt"])
        return {
            "interval": interval.key,
            "start": interval.start.isoformat(),
            "end": interval.end.isoformat(),
            "attempt": entry["attempt"],
            "resumed_from": predecessor[0] if predecessor else None,
            "resume_from": predecessor[1]["checkpoint"] if predecessor else "",
            "data_uri": layout.data(interval),
            "checkpoint_uri": layout.checkpoints(interval),
            "predictions_uri": layout.predictions(interval),
            "manifest": layout.manifest,
            "lineage": self.lineage,  # with the manifest: where the UI's lineage view reads it
            "storage_conn_id": self.storage_conn_id,
        }


class CommitOperator(_LineageTask):
    """Record the training task's result in the manifest (runs whatever training did)."""

    template_fields: Sequence[str] = ()

    def __init__(self, *, lineage_task_id: str, train_task_id: str, promotes: bool = False, **kwargs: Any) -> None:
        """`promotes`: there is no gate, so every committed model is the one to use (a model
        asset event, as PromoteOperator's on a promotion)."""
        kwargs.setdefault("trigger_rule", "all_done")
        if promotes:
            kwargs.setdefault("outlets", [promotions(kwargs["lineage"])])
        super().__init__(**kwargs)
        self.lineage_task_id = lineage_task_id
        self.train_task_id = train_task_id
        self.promotes = promotes

    def execute(self, context: Context) -> JSONObject:
        interval = context_interval(context)
        ti = context["ti"]
        begun = ti.xcom_pull(task_ids=self.lineage_task_id)
        if not begun or begun.get("interval") != interval.key:
            # The lineage step did not run (blocked, failed): this run never began an
            # attempt, so there is nothing of ours to record.
            raise AirflowFailException(
                f"interval {interval.key}: the lineage step {self.lineage_task_id} did not succeed, so "
                "training did not run; see that task's log"
            )
        result = ti.xcom_pull(task_ids=self.train_task_id) or {}
        ok = result.get("state") == "SUCCEEDED"
        checkpoint = (result.get("outputs") or {}).get("checkpoint")
        metrics = result.get("metrics") or {}
        error = None
        if not ok:
            error = (f"training task {self.train_task_id} did not succeed"
                     + (f": job {result.get('job_name')} {result.get('state')} {result.get('reason') or ''}".rstrip()
                        if result else ""))
        elif not checkpoint:
            ok = False
            error = (f"training job {result.get('job_name')} succeeded but reported no 'checkpoint' output: save "
                     "the model with dlc_airflow.runtime.save_checkpoint (it reports one) or report_output('checkpoint', uri)")
        attempt = begun.get("attempt")

        def finish(manifest: JSONObject) -> JSONObject:
            entry = manifest["intervals"].get(interval.key)
            if entry is None or entry.get("attempt") != attempt:
                raise lin.LineageError(
                    f"interval {interval.key}: the manifest holds attempt "
                    f"{entry.get('attempt') if entry else None}, not this run's attempt {attempt}; "
                    "another run of this interval wrote it since: clear this run to try again"
                )
            return lin.finish_attempt(manifest, interval, status=lin.SUCCEEDED if ok else lin.FAILED,
                                      checkpoint=checkpoint if ok else None, metrics=metrics, error=error)

        try:
            self.store.update(finish)
        except lin.LineageError as exc:
            raise AirflowFailException(str(exc)) from None
        if not ok:
            raise AirflowFailException(
                f"interval {interval.key} recorded as failed in {self.layout.manifest}: {error}. Later intervals "
                f"wait for it: fix the cause and clear this run"
            )
        self.log.info("interval %s succeeded: checkpoint %s, metrics %s", interval.key, checkpoint, metrics)
        if self.promotes:
            announce_model(context, self.storage_root, self.lineage, interval=interval.key, checkpoint=checkpoint,
                           metric=None, value=None, job=result.get("job_name"))
        return {"interval": interval.key, "checkpoint": checkpoint, "model_uri": checkpoint, "metrics": metrics,
                "resumed_from": begun.get("resumed_from"), "attempt": attempt, "job": result.get("job_name")}


class GateOperator(_LineageTask):
    """The metric gate's verdict on this interval's model, compared with the serving one; moves
    nothing (the XCom an approval's request is rendered from)."""

    def __init__(self, *, commit_task_id: str, metric: str, threshold: float, mode: str = "max",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commit_task_id = commit_task_id
        self.gate = lin.Gate(metric, threshold, mode)  # validates
        self.metric, self.threshold, self.mode = metric, threshold, mode

    def committed(self, context: Context, interval: lin.Interval) -> JSONObject:
        committed: JSONObject | None = context["ti"].xcom_pull(task_ids=self.commit_task_id)
        if not committed:
            raise AirflowFailException(f"interval {interval.key}: no result from {self.commit_task_id}")
        return committed

    def execute(self, context: Context) -> JSONObject:
        interval = context_interval(context)
        committed = self.committed(context, interval)
        metrics = committed.get("metrics") or {}
        try:
            manifest = self.store.load()
            passes, move, why = lin.decide_promotion(manifest, interval, metrics, self.gate)
        except lin.LineageError as exc:
            raise AirflowFailException(str(exc)) from None
        serving = manifest.get("promoted")
        self.log.info("interval %s: %s; serving model: %s", interval.key, why,
                      f"interval {serving['interval']}" if serving else "none")
        return {"lineage": self.lineage, "interval": interval.key, "checkpoint": committed["checkpoint"],
                "job": committed.get("job"), "metrics": metrics, "metric": self.metric,
                "value": metrics.get(self.metric), "threshold": self.threshold, "mode": self.mode,
                "passes": passes, "promotes": move, "reason": why,
                "serving": {k: serving.get(k) for k in ("interval", "checkpoint", "metric", "value")}
                if serving else None}


def _approved(answer: Any) -> bool:
    """Whether the approve task's result (the HITL answer; None when it skipped) approves."""
    return isinstance(answer, dict) and "Approve" in (answer.get("chosen_options") or [])


class PromoteOperator(GateOperator):
    """The evaluation gate: promote this interval's model when its metric passes.

    Inference then runs on this interval's model if it passed, else on the newest model
    promoted from data up to this interval; with no such model it is skipped.
    """

    def __init__(self, approve_task_id: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [promotions(kwargs["lineage"])])
        super().__init__(**kwargs)
        self.approve_task_id = approve_task_id  # with an approval: only what a person approved moves

    def execute(self, context: Context) -> JSONObject:
        interval = context_interval(context)
        committed = self.committed(context, interval)
        metrics = committed.get("metrics") or {}
        decided: JSONObject = {}
        approved = self.approve_task_id is None or _approved(context["ti"].xcom_pull(task_ids=self.approve_task_id))

        def gate(manifest: JSONObject) -> JSONObject:
            passes, move, why = lin.decide_promotion(manifest, interval, metrics, self.gate)
            if move and not approved:  # the gate said no when asked (approve skipped): no one approved this
                move, why = False, f"{why}, but no one approved it (the gate task found nothing to promote)"
            decided.update(passes=passes, move=move, why=why)
            if move:
                return lin.promote(manifest, interval, metric=self.metric, value=metrics.get(self.metric),
                                   run_id=context["run_id"])
            decided["fallback"] = lin.promoted_as_of(manifest, interval)
            return manifest

        try:
            self.store.update(gate)
        except lin.LineageError as exc:
            raise AirflowFailException(str(exc)) from None
        value = metrics.get(self.metric)
        if decided["move"]:
            announce_model(context, self.storage_root, self.lineage, interval=interval.key,
                           checkpoint=committed["checkpoint"], metric=self.metric, value=value, job=committed.get("job"))
        if decided["passes"]:
            self.log.info("interval %s: %s%s", interval.key, decided["why"],
                          "; promoted" if decided["move"] else "")
            return {"promoted": decided["move"], "passed": True, "model_uri": committed["checkpoint"],
                    "model_interval": interval.key, "metric": self.metric, "value": value, "reason": decided["why"]}
        fallback = decided.get("fallback")
        if fallback is None:
            raise AirflowSkipException(
                f"interval {interval.key}: not promoted ({decided['why']}) and no earlier model was promoted: "
                "inference is skipped"
            )
        self.log.warning("interval %s: not promoted (%s); inference runs the model of interval %s",
                         interval.key, decided["why"], fallback["interval"])
        return {"promoted": False, "passed": False, "model_uri": fallback["checkpoint"],
                "model_interval": fallback["interval"], "metric": self.metric, "value": value,
                "reason": decided["why"]}
