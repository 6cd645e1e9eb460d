"""An OOM kill through the real scheduler, triggerer and Airflow 3.3's retry policy, on the real
node (the kernel kills the container at its memory limit): with retries=3, a job whose spec
allows fault_tolerance.oom_retry_memory succeeds at try 2 with that memory (the container
reports the cgroup limit it ran under), and one that allows none fails at try 1 with the hint."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.airflow.conftest import restricted_kubeconfig
from tests.support.airflow_stack import AirflowStack
from tests.support.realnode import on_real_node

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

DAG = '''
import json
from datetime import datetime, timedelta, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 3, "retry_delay": timedelta(seconds=1)}}):
    DLCJobOperator(task_id="allowed", conn_id="dlc", backend="native", deferrable=True, queue_timeout=240,
                   job=json.loads({allowed!r}))
    DLCJobOperator(task_id="hint", conn_id="dlc", backend="native", queue_timeout=240, job=json.loads({hint!r}))
'''

# needs ~160Mi (written, so resident): OOM-killed under 96Mi, fine under 384Mi; reports its limit
HOG = '''
import os
from dlc_airflow.runtime import report_output
for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
    if os.path.exists(path):
        report_output("memory_limit", open(path).read().strip())
        break
chunks = [b"x" * (16 * 1024 * 1024) for _ in range(10)]
print("held", len(chunks) * 16, "MiB", flush=True)
'''


def hog_job(**fault_tolerance) -> dict:
    return on_real_node(type="batch", command=["python3", "-c", HOG], resources={"cpu": "250m", "memory": "96Mi"},
                        fault_tolerance=fault_tolerance)


def test_an_oom_kill_retries_with_the_allowed_memory_or_fails_with_the_hint(cluster, namespace, real_node, tmp_path):
    dag_id = f"oom_{uuid.uuid4().hex[:6]}"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / f"{dag_id}.py").write_text(DAG.format(dag_id=dag_id, allowed=json.dumps(hog_job(oom_retry_memory="384Mi")),
                                                  hint=json.dumps(hog_job())))
    kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / "kubeconfig.json")
    conn = json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})
    components = ("api-server", "scheduler", "dag-processor", "triggerer")
    with AirflowStack(tmp_path / "home", dags, components=components, env={"AIRFLOW_CONN_DLC": conn}) as stack:
        stack.wait_for_dag(dag_id)
        stack.airflow("dags", "unpause", dag_id)
        run_id = f"manual__{uuid.uuid4().hex[:8]}"
        stack.airflow("dags", "trigger", dag_id, "--run-id", run_id)
        stack.wait_for_runs(dag_id, 1, {"failed"}, timeout=600)
        hint = stack.task_instance(dag_id, run_id, "hint")
        assert (hint["state"], hint["try_number"]) == ("failed", 1), hint
        log = stack.task_log(dag_id, run_id, "hint")
        assert "OOMKilled" in log and "raise resources.memory" in log, log[-3000:]
        assert "no retry runs with more memory" in log, log[-3000:]  # the policy's decision
        allowed = stack.task_instance(dag_id, run_id, "allowed")
        assert (allowed["state"], allowed["try_number"]) == ("success", 2), allowed
        rows = stack.query("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = 'allowed' "
                           "AND key = 'return_value'", dag_id, run_id)
        result = rows[0]["value"]
        while isinstance(result, (str, bytes)):
            result = json.loads(result)
        assert result["attempt"] == 2 and result["state"] == "SUCCEEDED", result
        assert int(result["outputs"]["memory_limit"]) == 384 * 1024 * 1024, result  # the kernel's limit
        second_log = stack.task_log(dag_id, run_id, "allowed", try_number=2)
        assert "runs every replica with 384Mi" in second_log, second_log[-3000:]
