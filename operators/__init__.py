"""Airflow operators DAG authors import: `from dlc_airflow.operators import DLCJobOperator`."""
