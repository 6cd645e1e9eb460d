"""What the running Airflow offers, decided once, at import: the one place that knows which
Airflow 3 minor this is (3.1, 3.2, 3.3 are supported; README "Install into your Airflow" has
the table). Everything else asks `OFFERS` or calls the helpers below; nothing else compares
versions. The names that moved between minors are imported from here too (the task
exceptions, `config`, `data_interval_timetables`).

Each 3.3-only feature has a path that works without it, and the task says which it took,
once, in its log (`say_degraded`):

- `start_from_trigger`: Airflow 3.0-3.2 ship it disabled (the scheduler never starts a task
  in the triggerer), so a plain deferrable task starts on a worker and then defers;
- the task state store (durable execution): without it a retry finds its job by its labels
  alone, as it always can;
- retry policies (AIP-105): without them every failure uses the task's retries
  (dlc_airflow.airflow.retry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# The task exceptions live in airflow.sdk.exceptions from 3.2 (airflow.exceptions warns there)
try:
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTimeout,
    )
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSkipException,
        AirflowTaskTimeout,
    )

if TYPE_CHECKING:
    from dlc_airflow.runner import Log


@dataclass(frozen=True)
class Offers:
    version: str  # apache-airflow-core's, e.g. "3.1.8"
    start_from_trigger: bool  # the scheduler hands start_from_trigger tasks to the triggerer
    task_state_store: bool  # the task context's task_state_store (durable execution)
    retry_policy: bool = False  # BaseOperator(retry_policy=...) (AIP-105)


#: what a task does instead, when this Airflow lacks the feature (said once in its log)
DEGRADED = {
    "start_from_trigger": "a deferrable task starts on a worker and then defers "
                          "(Airflow 3.0-3.2 do not start tasks in the triggerer; 3.3 does)",
    "task_state_store": "a retry finds its job by its labels alone "
                        "(the task state store, durable execution, is Airflow 3.3's)",
    "retry_policy": "every failure uses the task's retries, whatever the job's reason "
                    "(retry policies are Airflow 3.3's)",
}


def _minor(version: str) -> tuple[int, int]:
    major, minor, *_ = (version.split("+")[0].split(".") + ["0", "0"])
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _has_task_state_store() -> bool:
    try:
        from airflow.sdk.execution_time.context import TaskStateStoreAccessor  # noqa: F401
    except ImportError:
        return False
    return True


def _has_retry_policy() -> bool:
    try:
        from airflow.sdk import RetryPolicy  # noqa: F401
    except ImportError:
        return False
    return True


def detect() -> Offers:
    from airflow import __version__

    return Offers(
        version=__version__,
        # no attribute tells it: 3.0-3.2 keep StartTriggerArgs but their scheduler skips the
        # branch (apache/airflow #53744 disabled it, #55068 re-enabled it for 3.3)
        start_from_trigger=_minor(__version__) >= (3, 3),
        task_state_store=_has_task_state_store(),
        retry_policy=_has_retry_policy(),
    )


OFFERS = detect()


def say_degraded(log: Log, *features: str, offers: Offers = OFFERS) -> None:
    """One line per feature of `features` this Airflow lacks: what the task does instead."""
    for feature in features:
        if not getattr(offers, feature):
            log.info("Airflow %s: %s", offers.version, DEGRADED[feature])


def config() -> Any:
    """Airflow's configuration as a task and the triggerer read it (the Task SDK's from 3.2)."""
    try:
        from airflow.sdk.configuration import conf
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf
    return conf


def data_interval_timetables() -> tuple[type[Any], type[Any]]:
    """(CronDataIntervalTimetable, DeltaDataIntervalTimetable): in airflow.sdk from 3.2."""
    try:
        from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable
    except ImportError:  # Airflow 3.1
        from airflow.timetables.interval import (  # type: ignore[assignment]
            CronDataIntervalTimetable,
            DeltaDataIntervalTimetable,
        )
    return CronDataIntervalTimetable, DeltaDataIntervalTimetable


__all__ = ["DEGRADED", "OFFERS", "AirflowFailException", "AirflowNotFoundException", "AirflowSkipException",
           "AirflowTaskTimeout", "Offers", "config", "data_interval_timetables", "detect", "say_degraded"]
