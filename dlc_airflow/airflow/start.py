"""Starting a task in the triggerer (start_from_trigger): the submit a worker would do, done by
the trigger, so a task that needs nothing only a worker can do never holds a worker slot.

`start_job` is the worker path's `DLCJobOperator.execute` up to the wait: the same
`lifecycle.start` (which backend, the admin's policy, the secrets masker, submit-or-adopt:
the idempotent path, so a triggerer that restarts adopts the job it made) and the same
`lifecycle.publication` (the XCom `dlc_job`, the extra links), which a trigger can only hand
over when the task ends. It runs in a thread of the triggerer
(blocking I/O, as the runners are).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from dlc_airflow.airflow.lifecycle import TaskInstanceIds
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.runner import JobRunner, Log


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
    secrets: JSONObject | None  # what the trigger masks (dlc_airflow.secrets.TriggerSecrets)
    xcoms: JSONObject  # what the task publishes about its job, handed over at its end
    where: JSONObject  # where the job is, for the notifiers
    began: float  # when the job was made (an adopted one's creation): the timeouts count from there


BACKSTOP = 300.0  # seconds past a task's timeout after which Airflow ends a wedged trigger


def backstop(timeout: float | None) -> timedelta | None:
    """The timeout of a task's deferral: Airflow does not enforce execution_timeout while a task
    is deferred, so the trigger enforces the task's `timeout` itself (stopping the job); this
    only ends a trigger that is wedged."""
    return timedelta(seconds=timeout + BACKSTOP) if timeout else None


def start_job(spec: JSONObject, ti: TaskInstanceIds, namespace: str | None, local_root: str | None,
              log: Log) -> Started:
    """See the module docstring; raises StartError."""
    from dlc_airflow.airflow.lifecycle import StartRequest, base_url, identity_of, publication, start
    from dlc_airflow.airflow.runners import shared_runner
    from dlc_airflow.spec import parse_job
    from dlc_airflow.submission import Action

    # its RuntimeTaskInstance, whose template context has the run (and its clear count)
    dag_run = ti.get_template_context().get("dag_run") if hasattr(ti, "get_template_context") else None
    identity = identity_of(ti, dag_run)
    try:
        job = parse_job(spec["job"], source=f"job of task {identity.task_id}")
        request = StartRequest(job=job, identity=identity, backend=spec.get("backend"), conn_id=spec.get("conn_id"),
                               namespace=namespace, local_root=local_root, base_name=spec["base_name"],
                               reuse_succeeded=spec.get("reuse_succeeded", True))
        started = start(request, log, make=shared_runner, place="started in the triggerer: no worker slot")
    except Exception as exc:
        raise StartError(" ".join(str(exc).split()) or type(exc).__name__,
                         permanent=bool(getattr(exc, "permanent", False))) from exc
    submission = started.submission
    if submission.action is Action.RECORDED or submission.ref is None:  # no task state store here
        raise StartError("the task state store holds this task's result: run it on a worker", permanent=True)
    ref = submission.ref
    published = publication(ref, identity, started.conn_id, local_root, started.extras, base_url())
    created = submission.status.created if submission.status is not None else None
    return Started(ref=ref, runner=started.runner, identity=identity, conn_id=started.conn_id,
                   secrets=started.secrets, xcoms=published.xcoms, where=published.where,
                   began=created.timestamp() if created else time.time())
