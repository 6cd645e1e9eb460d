"""What the tests read of Airflow's internals that moved between 3.1, 3.2 and 3.3 (the
library's own differences are dlc_airflow.airflow.compat's)."""

from __future__ import annotations

from typing import Any


def dagbag_class() -> Any:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag
    return DagBag


def dag_serialization() -> Any:
    try:
        from airflow.serialization.serialized_objects import DagSerialization
    except ImportError:  # Airflow 3.1
        from airflow.serialization.serialized_objects import SerializedDAG as DagSerialization
    return DagSerialization


def core_timetable(timetable: Any) -> Any:
    """The scheduler's face of a DAG's timetable (3.1's DAG holds that one already)."""
    try:
        from airflow.serialization.encoders import coerce_to_core_timetable
    except ImportError:  # Airflow 3.1
        return timetable
    return coerce_to_core_timetable(timetable)
