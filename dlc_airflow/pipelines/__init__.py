"""Pipelines: preprocess -> train -> inference TaskGroups, incremental retraining DAGs and
checkpoint lineage keyed by data interval.

    from dlc_airflow.pipelines import Approval, Gate, retraining_dag, training_pipeline

Airflow is imported lazily (DAG parse time matters): dlc_airflow.pipelines.lineage,
.approval and .layout are pure and import nothing of Airflow.
"""

from __future__ import annotations

from typing import Any

from dlc_airflow.pipelines.approval import Approval
from dlc_airflow.pipelines.layout import Layout
from dlc_airflow.pipelines.lineage import Gate, Interval, LineageBlocked, LineageError

__all__ = [
    "Approval",
    "Gate",
    "Interval",
    "Layout",
    "LineageBlocked",
    "LineageError",
    "ManifestStore",
    "cadence_timetable",
    "data_asset",
    "model_asset",
    "retraining_dag",
    "training_pipeline",
]

_LAZY = {
    "training_pipeline": "dlc_airflow.pipelines.group",
    "retraining_dag": "dlc_airflow.pipelines.retraining",
    "cadence_timetable": "dlc_airflow.pipelines.retraining",
    "ManifestStore": "dlc_airflow.pipelines.store",
    "model_asset": "dlc_airflow.pipelines.assets",
    "data_asset": "dlc_airflow.pipelines.assets",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dlc_airflow.pipelines' has no attribute {name!r}")
