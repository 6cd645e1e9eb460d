"""dlc-airflow: DLC-style distributed jobs on Kubernetes, scheduled by Airflow."""

__version__ = "0.1.0"
