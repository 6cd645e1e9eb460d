"""Airflow sensors: `from dlc_airflow.sensors import DLCJobSensor`."""

from dlc_airflow.sensors.job import DLCJobSensor

__all__ = ["DLCJobSensor"]
