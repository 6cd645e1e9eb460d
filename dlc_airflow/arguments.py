"""Checks of the operator's and the sensor's own arguments, at DAG parse time (pure).

Python would take `deferrable="no"` as true and `timeout=-5` as a number, and Airflow would
find out when the task runs (or never): each check here raises one line naming the task,
the argument and what to give instead. Job spec fields are checked by dlc_airflow.spec.
"""

from __future__ import annotations

import re
from datetime import timedelta

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.spec.fields import check_dns_label, is_templated, positive_seconds


class ArgumentError(ValueError):
    """An operator or sensor argument that cannot work; the message names it."""


def flag(value: object, what: str, task_id: str) -> bool:
    """A bool argument; "no", 0 or 1 are refused (Python would read "no" as true)."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{task_id}: {what} must be True or False, not {value!r}")
    return value


def optional_flag(value: object, what: str, task_id: str) -> bool | None:
    return None if value is None else flag(value, what, task_id)


def seconds(value: object, what: str, task_id: str) -> float | None:
    """A time limit in seconds (number, timedelta or '30m'); positive, or None for none."""
    try:
        return positive_seconds(value, what)
    except ValueError as exc:
        raise ArgumentError(f"{task_id}: {exc}") from None


def namespace(value: object, task_id: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"{task_id}: namespace must be a string, not {value!r}")
    try:
        return check_dns_label(value, "namespace")
    except ValueError as exc:
        raise ArgumentError(f"{task_id}: {exc}") from None


def conn_id(value: object, task_id: str) -> str | None:
    """An Airflow connection id: a name, not a URI or an empty string."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or any(ch.isspace() for ch in value) or "://" in value:
        raise ArgumentError(f"{task_id}: conn_id must be the id of an Airflow connection "
                            f"(e.g. kubernetes_default), not {value!r}")
    return value


def local_root(value: object, task_id: str) -> str | None:
    """The local backend's job folder root: absolute, since the supervisor and every later try
    (in another working directory) must find the same folders."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise ArgumentError(f"{task_id}: local_root must be an absolute folder path, not {value!r}")
    return value


def backend(value: object, task_id: str) -> str | None:
    """None (the task chooses at run time), or a backend as backend_name checks it."""
    return None if value is None else backend_name(value, task_id)


def backend_name(value: object, task_id: str) -> str:
    """A backend name exactly as the registry spells it; the error lists every backend."""
    from dlc_airflow.errors import BackendError
    from dlc_airflow.registry import ALL_BACKENDS, check_backend_name

    if not isinstance(value, str):
        raise BackendError(f"{task_id}: backend must be one of {', '.join(ALL_BACKENDS)}, not {value!r}")
    try:
        return check_backend_name(value)
    except BackendError as exc:  # unknown backend ...: choose one of <every backend, local included>
        raise BackendError(f"{task_id}: {exc}") from None


def job_name(value: object, task_id: str) -> str | None:
    """The name of a job made elsewhere (a Kubernetes name, or the local job's folder)."""
    if value is None or is_templated(value):
        return value if value is None else str(value)
    if not isinstance(value, str):
        raise ArgumentError(f"{task_id}: job_name must be a string, not {value!r}")
    try:
        return check_dns_label(value, "job_name")
    except ValueError as exc:
        raise ArgumentError(f"{task_id}: {exc} (the job's name as the operator made it)") from None


_TASK_ID = re.compile(r"^[\w.-]+$")  # Airflow's own rule for task ids (KEY_REGEX)


def task_id(value: object, what: str, task_id: str) -> str | None:
    if value is None or is_templated(value):
        return value if value is None else str(value)
    if not isinstance(value, str) or not _TASK_ID.match(value):
        raise ArgumentError(f"{task_id}: {what} must be the id of a task (letters, digits, '_', '.', '-'), "
                            f"not {value!r}")
    return value


def consistent(task_id: str, *, wait_for_completion: bool, deferrable: bool | None, on_finish_delete: bool,
               timeout: float | None, queue_timeout: float | None) -> None:
    """Operator options that contradict each other: each would be silently ignored at run time."""
    if not wait_for_completion:
        # the task returns once the job is submitted: nothing is left to delete it or time it out
        ignored = [name for name, set_ in (("on_finish='delete'", on_finish_delete), ("timeout", timeout is not None),
                                            ("queue_timeout", queue_timeout is not None),
                                            ("deferrable=True", deferrable is True)) if set_]
        if ignored:
            raise ArgumentError(f"{task_id}: {', '.join(ignored)} needs wait_for_completion=True (the task does not "
                                "wait for the job, so nothing would apply it); drop one of them")
    if queue_timeout is not None and timeout is not None and queue_timeout > timeout:
        raise ArgumentError(f"{task_id}: queue_timeout ({queue_timeout:g}s) is longer than timeout "
                            f"({timeout:g}s), which counts from the submit too: make it shorter or drop it")


def sensor_timing(kwargs: JSONObject, task_id: str) -> None:
    """A sensor's timeout and poke_interval: seconds or a timedelta, not negative, not a bool;
    and job_type, an argument the sensor no longer has (Airflow's own error spans lines)."""
    if "job_type" in kwargs:
        raise ArgumentError(f"{task_id}: DLCJobSensor has no job_type argument: it finds the job by its name "
                            "on every backend; drop job_type")
    for what in ("timeout", "poke_interval"):
        value = kwargs.get(what)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
            raise ArgumentError(f"{task_id}: {what} must be seconds or a timedelta, not {value!r}")
        number = value.total_seconds() if isinstance(value, timedelta) else value
        if not number >= 0:  # also NaN
            given = f"{number:g} seconds" if isinstance(value, timedelta) else repr(value)
            raise ArgumentError(f"{task_id}: {what} must not be negative (got {given})")
