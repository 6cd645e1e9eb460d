"""Airflow operators DAG authors import: `from dlc_airflow.operators import DLCJobOperator`."""

from dlc_airflow.operators.job import DLCJobOperator

__all__ = ["DLCJobOperator"]
