"""Airflow sensors: `from dlc_airflow.sensors import DLCJobSensor`."""
