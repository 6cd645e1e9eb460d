"""The Airflow fixtures (migrated session DB, dag_files, k8s_conn) from tests/airflow."""

from tests.airflow.conftest import airflow_db, dag_files, k8s_conn  # noqa: F401
