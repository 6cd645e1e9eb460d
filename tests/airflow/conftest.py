"""Real Airflow for the end-to-end tests: a migrated SQLite metadata DB in the session's
AIRFLOW_HOME, and connections to the test cluster as the restricted identity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def airflow_db():
    home = Path(os.environ["AIRFLOW_HOME"])
    (home / "dags").mkdir(parents=True, exist_ok=True)
    subprocess.run([str(VENV_BIN / "airflow"), "db", "migrate"], check=True, capture_output=True, timeout=600)
    return home


def restricted_kubeconfig(cluster, namespace: str, path: Path, server: str | None = None,
                          ca_file: str | None = None) -> Path:
    """A kubeconfig for the ServiceAccount with dlc-airflow's Role, defaulting to `namespace`."""
    cfg = cluster.admin().api.configuration
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server or cfg.host,
                                                  "certificate-authority": ca_file or cfg.ssl_ca_cert}}],
        "users": [{"name": "dlc", "user": {"token": cluster.token()}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "dlc", "namespace": namespace}}],
        "current-context": "test",
    }))
    return path


@pytest.fixture
def k8s_conn(cluster, namespace, tmp_path, monkeypatch, airflow_db):
    """An Airflow connection (from the environment) to the test namespace, as the restricted identity."""
    conn_id = f"dlc_{uuid.uuid4().hex[:8]}"
    kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / "kubeconfig.json")
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig), "namespace": namespace}}))
    return conn_id


OPERATOR_DAG = '''
import json
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    DLCJobOperator(task_id="train", **json.loads({kwargs!r}))
'''


@pytest.fixture
def policed_conn(cluster, namespace, tmp_path, monkeypatch, airflow_db):
    """A connection to the test namespace (restricted identity) whose admin set a policy
    (the Airflow config delegates to the connection: its policy may widen the defaults)."""
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"allow_connection_override": True}))

    def make(policy: dict) -> str:
        conn_id = f"dlc_{uuid.uuid4().hex[:8]}"
        kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / f"{conn_id}.json")
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(kubeconfig), "namespace": namespace, "dlc_policy": policy}}))
        return conn_id
    return make


@pytest.fixture
def dag_files(airflow_db):
    """Write DAG files into the dags folder (dag.test needs a DAG the bundle can parse) and
    import them; removed after the test."""
    import importlib.util

    written: list[Path] = []

    def write(dag_id: str, source: str):
        path = airflow_db / "dags" / f"{dag_id}.py"
        path.write_text(source)
        written.append(path)
        spec = importlib.util.spec_from_file_location(dag_id, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.dag

    def operator_dag(**op_kwargs):
        """A DAG with one DLCJobOperator task `train` built from JSON-able kwargs."""
        dag_id = f"t_{uuid.uuid4().hex[:8]}"
        return write(dag_id, OPERATOR_DAG.format(dag_id=dag_id, kwargs=json.dumps(op_kwargs)))

    write.operator_dag = operator_dag
    yield write
    for path in written:
        path.unlink(missing_ok=True)
