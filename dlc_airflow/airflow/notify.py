"""Notifications on a job's state changes (DLC's message notifications), through Airflow's
notifiers: `DLCJobOperator(notify=[SmtpNotifier(...), ...])`.

A notifier is told when the job starts running after it was queued, when it restarts (with
the reason), and when it succeeds or fails (with the reason: a failed replica, a timeout, a
preemption). It is called with a context of the job's own (below), in the process that
watches the job: the worker, or the triggerer for a deferred task - so a notifier travels
into the trigger's kwargs as its class and constructor arguments (`carry`), and is rebuilt
for every notification (Airflow's notifiers render their templates in place, once).

The context: dag_id, task_id, run_id, map_index, try_number, job, backend, namespace, event
(running, restarting, succeeded, failed), state, previous_state, reason, message, restarts,
summary (one line), link (the job's report page).
"""

from __future__ import annotations

import inspect
import json
import logging
from importlib import import_module
from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.status import JobState, JobStatus

log = logging.getLogger(__name__)

RUNNING, RESTARTING, SUCCEEDED, FAILED = "running", "restarting", "succeeded", "failed"


class NotifierError(ValueError):
    """A notifier dlc-airflow cannot carry into the triggerer (at DAG parse time)."""

    permanent = True


def job_event(previous: JobStatus | None, status: JobStatus) -> str | None:
    """The notification a status change while waiting makes, if any (pure). The end of the
    wait (succeeded, or failed: by the job, a timeout, a preemption) is notified by the step
    after the verdict, which knows why (`final_event`)."""
    before = previous.state if previous is not None else None
    if status.state is JobState.RUNNING and before in (None, JobState.PENDING, JobState.QUEUED):
        return RUNNING
    if status.state is JobState.RESTARTING and (before is not JobState.RESTARTING or
                                               status.restarts > (previous.restarts if previous else 0)):
        return RESTARTING
    return None


def final_event(ok: bool) -> str:
    return SUCCEEDED if ok else FAILED


def carry(notifier: Any, where: str) -> JSONObject:
    """{"class", "kwargs"} of a notifier: its constructor arguments, read back from the
    attributes of the same name (as Airflow's notifiers keep them), JSON-able."""
    from airflow.sdk import BaseNotifier

    if not isinstance(notifier, BaseNotifier):
        raise NotifierError(f"{where}: {notifier!r} is not an Airflow notifier (airflow.sdk.BaseNotifier)")
    cls = type(notifier)
    kwargs: JSONObject = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "context") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if hasattr(notifier, name):
            kwargs[name] = getattr(notifier, name)
        elif param.default is param.empty:
            raise NotifierError(f"{where}: {cls.__name__} keeps no attribute {name!r} for its argument of that "
                                "name, so it cannot be rebuilt where the job is watched; wrap it in a notifier "
                                "that does")
    spec = {"class": f"{cls.__module__}.{cls.__qualname__}", "kwargs": kwargs}
    try:
        json.dumps(spec)
    except TypeError as exc:
        raise NotifierError(f"{where}: {cls.__name__}'s arguments are not plain values ({exc}): give strings, "
                            "numbers, lists or dicts") from None
    try:  # the triggerer rebuilds it from its module: a class defined in a DAG file is not importable
        rebuild(spec)
    except Exception as exc:  # noqa: BLE001 - any failure means it cannot travel
        raise NotifierError(f"{where}: {spec['class']} cannot be rebuilt from its arguments ({exc}): define the "
                            "notifier in a module the workers and the triggerer can import") from None
    return spec


def carry_all(notify: object, task_id: str) -> list[JSONObject]:
    """A task's `notify=` (one notifier or a list), as carried into the triggerer; checked at
    DAG parse time (ArgumentError naming the task and the notifier)."""
    from dlc_airflow.arguments import ArgumentError

    if notify is None:
        return []
    listed = list(notify) if isinstance(notify, (list, tuple)) else [notify]
    try:
        return [carry(n, f"{task_id}: notify[{i}]") for i, n in enumerate(listed)]
    except ValueError as exc:
        raise ArgumentError(str(exc)) from None


def rebuild(spec: JSONObject) -> Any:
    module, _, name = spec["class"].rpartition(".")
    return getattr(import_module(module), name)(**spec["kwargs"])


def send(specs: list[JSONObject], context: JSONObject) -> None:
    """Call every notifier with the context; a notifier that fails is logged, never fails the task."""
    for spec in specs:
        try:
            rebuild(spec)(dict(context))
        except Exception as exc:  # noqa: BLE001 - a mail server down must not fail a training job
            log.warning("notifier %s failed (%s): %s", spec.get("class"), context.get("event"), exc)


def context_for(event: str, status: JobStatus, previous: JobStatus | None, where: JSONObject,
                message: str | None = None) -> JSONObject:
    """The notifiers' context (pure): `where` has dag_id, task_id, run_id, map_index,
    try_number, job, backend, namespace and link."""
    return {**where, "event": event, "state": status.state.value,
            "previous_state": previous.state.value if previous is not None else None,
            "reason": status.reason, "message": message or status.message, "restarts": status.restarts,
            "summary": f"job {where.get('job')} {event}: {status.summary()}"}


class Notifications:
    """A wait's notifications: the notifiers (carried) and where the job is. Its `to_dict`
    travels in the trigger's kwargs."""

    def __init__(self, specs: list[JSONObject], where: JSONObject) -> None:
        self.specs, self.where = specs, where

    def to_dict(self) -> JSONObject:
        return {"specs": self.specs, "where": self.where}

    @classmethod
    def from_dict(cls, data: JSONObject | None) -> Notifications | None:
        return cls(data["specs"], data["where"]) if data and data.get("specs") else None

    def on_change(self, previous: JobStatus | None, status: JobStatus) -> None:
        event = job_event(previous, status)
        if event is not None:
            send(self.specs, context_for(event, status, previous, self.where))

    def final(self, ok: bool, status: JobStatus, message: str | None) -> None:
        send(self.specs, context_for(final_event(ok), status, None, self.where, message))
