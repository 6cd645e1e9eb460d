"""Starting a task in the triggerer (start_from_trigger): the submit a worker would do, done by
the trigger, so a task that needs nothing only a worker can do never holds a worker slot.

`start_job` is the worker path's `DLCJobOperator.execute` up to the wait, in the same order
and through the same functions: which backend, the admin's policy, the secrets masker,
submit-or-adopt (the idempotent path: a triggerer that restarts adopts the job it made),
and what the task publishes about its job (the XCom `dlc_job`, the extra links), which a
trigger can only hand over when the task ends. It runs in a thread of the triggerer
(blocking I/O, as the runners are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dlc_airflow.jobref import JobRef
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.runner import JobRunner, Log

XCOM_REF = "dlc_job"  # as operators/job.py names it


class StartError(Exception):
    """The job could not be started; `permanent` when no retry can help (a refused spec or
    policy, a missing connection)."""

    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass
class Started:
    ref: JobRef
    runner: JobRunner
    identity: TaskIdentity
    conn_id: str
    secrets: dict | None  # what the trigger masks (dlc_airflow.secrets.TriggerSecrets)
    xcoms: dict[str, Any]  # what the task publishes about its job, handed over at its end
    where: dict[str, Any]  # where the job is, for the notifiers
    began: float  # when the job was made (an adopted one's creation): the timeouts count from there


def identity_of(ti: Any) -> TaskIdentity:
    """The task instance the trigger starts (its RuntimeTaskInstance, with the run's clear count)."""
    dag_run = ti.get_template_context().get("dag_run") if hasattr(ti, "get_template_context") else None
    return TaskIdentity(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                        map_index=ti.map_index if ti.map_index is not None else -1, try_number=ti.try_number,
                        clear_number=getattr(dag_run, "clear_number", 0) or 0)


def start_job(spec: dict[str, Any], ti: Any, namespace: str | None, local_root: str | None, log: Log) -> Started:
    """See the module docstring; raises StartError."""
    from dlc_airflow.airflow.links import link_urls, push_links_xcoms
    from dlc_airflow.airflow.policy_source import load_policy
    from dlc_airflow.airflow.runners import choose_backend, connection_for, shared_runner
    from dlc_airflow.policy import enforce
    from dlc_airflow.secrets import register_job
    from dlc_airflow.spec import parse_job
    from dlc_airflow.submission import Action, submit_or_adopt

    identity = identity_of(ti)
    try:
        job = parse_job(spec["job"], source=f"job of task {identity.task_id}")
        backend, conn_id, why = choose_backend(spec.get("backend"), spec.get("conn_id"))
        log.info("DLC %s job on the %s backend (%s), started in the triggerer: no worker slot", job.type.value,
                 backend, why)
        connection, extras = connection_for(backend, conn_id)
        policy, source = load_policy(None if backend == "local" else conn_id, connection)
        enforce(policy, job, source)
        runner = shared_runner(backend, conn_id, namespace, extras=extras, local_root=local_root,
                               connection=connection)
        found = register_job(job, runner, log)
        submission = submit_or_adopt(runner, job, identity, base_name=spec["base_name"],
                                     reuse_succeeded=spec.get("reuse_succeeded", True), log=log)
    except Exception as exc:
        raise StartError(" ".join(str(exc).split()) or type(exc).__name__,
                         permanent=bool(getattr(exc, "permanent", False))) from exc
    if submission.action is Action.RECORDED or submission.ref is None:  # no task state store here
        raise StartError("the task state store holds this task's result: run it on a worker", permanent=True)
    ref = submission.ref
    urls = link_urls(ref, identity.dag_id, identity.run_id, identity.task_id, identity.map_index, extras,
                     _base_url())
    xcoms = {XCOM_REF: {**ref.to_dict(), "conn_id": conn_id, "local_root": local_root,
                        "try_number": identity.try_number}, **push_links_xcoms(urls)}
    where = {"dag_id": identity.dag_id, "task_id": identity.task_id, "run_id": identity.run_id,
             "map_index": identity.map_index, "try_number": identity.try_number, "job": ref.name,
             "backend": ref.backend, "namespace": ref.namespace, "link": urls.get("DLC job report", "")}
    created = submission.status.created if submission.status is not None else None
    return Started(ref=ref, runner=runner, identity=identity, conn_id=conn_id,
                   secrets=found.to_dict() if found else None, xcoms=xcoms, where=where,
                   began=created.timestamp() if created else time.time())


def _base_url() -> str:
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or "http://localhost:8080"
