"""Airflow integration: the hook, the trigger, runner selection. Operators and sensors are in
dlc_airflow.operators / dlc_airflow.sensors."""
