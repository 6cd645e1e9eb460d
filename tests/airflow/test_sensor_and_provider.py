"""DLCJobSensor (poke, reschedule, deferrable) with dag.test on the real control plane; the
provider registration and the hook's namespace handling with real Airflow."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.airflow.conftest import VENV_BIN

SENSOR_DAG = '''
import json
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator
from dlc_airflow.sensors import DLCJobSensor

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    submit = DLCJobOperator(task_id="submit", wait_for_completion=False, **json.loads({op!r}))
    wait = DLCJobSensor(task_id="wait", task_id_of_job="submit", **json.loads({sensor!r}))
    submit >> wait
'''


def job(run_for="3s", fail=False) -> dict:
    spec = {"type": "batch", "image": "registry.local/prep:1", "command": ["prep"], "roles": {"worker": 2},
            "annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": run_for}}
    if fail:
        chaos = "pod-container-running-failed.stage.kwok.x-k8s.io"
        spec["labels"] = {chaos: "true"}
        spec["annotations"][f"{chaos}/exit-code"] = "7"
    return spec


def run_sensor_dag(dag_files, conn_id, *, fail=False, **sensor_kwargs):
    dag_id = f"s_{uuid.uuid4().hex[:8]}"
    op = {"conn_id": conn_id, "backend": "native", "job": job(fail=fail)}
    sensor = {"conn_id": conn_id, "poke_interval": 1, "timeout": 120, **sensor_kwargs}
    dag = dag_files(dag_id, SENSOR_DAG.format(dag_id=dag_id, op=json.dumps(op), sensor=json.dumps(sensor)))
    run = dag.test()
    return run.get_task_instance("submit"), run.get_task_instance("wait")


@pytest.mark.parametrize("mode", [{"mode": "poke"}, {"mode": "reschedule"}, {"deferrable": True}],
                         ids=["poke", "reschedule", "deferrable"])
def test_sensor_waits_for_success(kube, k8s_conn, dag_files, mode):
    submit, wait = run_sensor_dag(dag_files, k8s_conn, **mode)
    assert submit.state == "success" and wait.state == "success"


@pytest.mark.parametrize("mode", [{"mode": "poke"}, {"deferrable": True}], ids=["poke", "deferrable"])
def test_sensor_fails_as_soon_as_the_job_fails(kube, k8s_conn, dag_files, mode, capfd):
    submit, wait = run_sensor_dag(dag_files, k8s_conn, fail=True, **mode)
    assert submit.state == "success" and wait.state == "failed"
    assert "exited with code 7" in "".join(capfd.readouterr())


def test_sensor_arguments_are_checked_at_parse_time():
    from dlc_airflow.sensors import DLCJobSensor

    with pytest.raises(ValueError, match="exactly one of job_name or task_id_of_job"):
        DLCJobSensor(task_id="s")
    with pytest.raises(ValueError, match="exactly one of job_name or task_id_of_job"):
        DLCJobSensor(task_id="s", job_name="a", task_id_of_job="b")


def test_provider_is_registered(airflow_db):
    providers = subprocess.run([str(VENV_BIN / "airflow"), "providers", "list", "-o", "json"],
                               check=True, capture_output=True, text=True).stdout
    assert any(p["package_name"] == "dlc-airflow" for p in json.loads(providers))
    hooks = subprocess.run([str(VENV_BIN / "airflow"), "providers", "hooks", "-o", "json"],
                           check=True, capture_output=True, text=True).stdout
    ours = [h for h in json.loads(hooks) if h.get("connection_type") == "dlc_kubernetes"]
    assert ours and ours[0]["class"] == "dlc_airflow.airflow.hook.DLCHook"


def test_hook_namespace_allow_list_and_resolution(cluster, namespace, tmp_path, monkeypatch, airflow_db):
    from dlc_airflow.airflow.hook import DLCHook, NamespaceNotAllowed
    from tests.airflow.conftest import restricted_kubeconfig

    kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / "kc.json")
    extras = {"kube_config_path": str(kubeconfig), "dlc_namespaces": f"{namespace}, other"}
    monkeypatch.setenv("AIRFLOW_CONN_DLC_ALLOW", json.dumps({"conn_type": "dlc_kubernetes", "extra": extras}))
    # the kubeconfig context's namespace is the default, and it is allowed
    assert DLCHook("dlc_allow").get_client().namespace == namespace
    with pytest.raises(NamespaceNotAllowed, match="not allowed by connection 'dlc_allow'"):
        DLCHook("dlc_allow", namespace="kube-system").get_client()
    # a working client on the connection: the restricted identity lists its namespace
    client = DLCHook("dlc_allow").get_client()
    from dlc_airflow.k8s.kinds import JOB

    assert client.list(JOB)[0] == []
