"""retraining_dag(): a whole DAG that retrains on a cadence, one data interval per run.

    dag = retraining_dag("digits", cadence="0 0 * * *", start_date=datetime(2026, 1, 1, tzinfo=UTC),
                         storage_root="file:///data/lineage", preprocess=..., train=..., inference=...)

The cadence becomes a data-interval timetable (cron -> CronDataIntervalTimetable, timedelta
-> DeltaDataIntervalTimetable): each run processes [data_interval_start, data_interval_end).
A bare cron string would give CronTriggerTimetable, whose intervals are empty in Airflow 3.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pipelines.approval import Approval
from dlc_airflow.pipelines.lineage import Gate

__all__ = ["cadence_timetable", "retraining_dag"]


def cadence_timetable(cadence: str | timedelta, timezone: str = "UTC") -> Any:
    """A data-interval timetable for `cadence`: a cron expression (or @daily, @hourly...)
    or a timedelta."""
    from dlc_airflow.airflow.compat import data_interval_timetables

    CronDataIntervalTimetable, DeltaDataIntervalTimetable = data_interval_timetables()

    if isinstance(cadence, timedelta):
        if cadence <= timedelta(0):
            raise ValueError(f"cadence {cadence} must be positive")
        return DeltaDataIntervalTimetable(cadence)
    if isinstance(cadence, str) and cadence.strip():
        from croniter import croniter

        expression = cadence.strip()
        if not expression.startswith("@") and not croniter.is_valid(expression):
            raise ValueError(f"cadence {cadence!r} is not a cron expression (e.g. '0 3 * * *') nor a timedelta")
        if expression in ("@once", "@continuous"):
            raise ValueError(f"cadence {cadence!r} has no data intervals: use a cron expression or a timedelta")
        return CronDataIntervalTimetable(expression, timezone=timezone)
    raise ValueError(f"cadence must be a cron string or a timedelta, not {cadence!r}")


def retraining_dag(
    dag_id: str,
    *,
    cadence: str | timedelta,
    start_date: datetime,
    preprocess: Any,
    train: Any,
    inference: Any,
    storage_root: str,
    lineage: str | None = None,
    gate: Gate | None = None,
    approval: Approval | None = None,
    end_date: datetime | None = None,
    timezone: str = "UTC",
    catchup: bool = False,
    max_active_runs: int | None = None,
    default_args: JSONObject | None = None,
    tags: list[str] | None = None,
    description: str | None = None,
    group_id: str = "retrain",
    **pipeline_kwargs: Any,
) -> Any:
    """A DAG with one training_pipeline TaskGroup, scheduled on data intervals of `cadence`.

    `lineage` defaults to `dag_id`. Runs of one lineage never train concurrently (see
    dlc_airflow.pipelines.group); max_active_runs is left to Airflow unless given, since
    the lineage task, not the run count, keeps training in order, and a cleared old run
    must still be able to start while later runs wait for it. Other keyword arguments go
    to training_pipeline (backend, conn_id, mount_path, storage_conn_id, operator_kwargs,
    notify...). The lineage's promoted model is an Airflow Asset (`model_asset(storage_root,
    lineage)`): a DAG scheduled on it runs after each promotion. With `approval`
    (Approval(...), needs `gate`) a person approves each promotion in the Airflow UI first.
    """
    from airflow.sdk import DAG

    if start_date.tzinfo is None:
        raise ValueError(f"{dag_id}: start_date {start_date} needs a timezone (e.g. tzinfo=timezone.utc)")
    from dlc_airflow.pipelines.group import training_pipeline

    dag_kwargs: JSONObject = dict(
        schedule=cadence_timetable(cadence, timezone), start_date=start_date, end_date=end_date,
        catchup=catchup, default_args=default_args or {}, tags=tags or ["dlc-airflow", "retraining"],
        description=description or f"incremental retraining of {lineage or dag_id} every {cadence}",
    )
    if max_active_runs is not None:
        dag_kwargs["max_active_runs"] = max_active_runs
    with DAG(dag_id, **dag_kwargs) as dag:
        training_pipeline(preprocess=preprocess, train=train, inference=inference, storage_root=storage_root,
                          lineage=lineage or dag_id, gate=gate, approval=approval, group_id=group_id,
                          **pipeline_kwargs)
    return dag
