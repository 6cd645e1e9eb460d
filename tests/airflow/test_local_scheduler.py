"""The local backend through the real scheduler and triggerer (AirflowStack): a deferrable
DLCJobOperator hands its wait to the triggerer, which ends the task when the local job is done;
and the stack's kill/restart of a component. Nothing is mocked."""

from __future__ import annotations

import signal
import sys

import pytest

from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

DAG_FILE = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

JOB = {{"type": "batch", "image": "local", "roles": {{"worker": 2}},
        "command": [{python!r}, "-c", "import time; from dlc_airflow.runtime import log_metrics, shard; "
                    "time.sleep(3); log_metrics(shard=shard()[0])"]}}

with DAG("deferred_local", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
    DLCJobOperator(task_id="job", job=JOB, backend="local", deferrable=True, local_root={local!r})
'''


def test_deferred_local_job_is_finished_by_the_real_triggerer_and_components_restart(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "deferred_local.py").write_text(DAG_FILE.format(python=sys.executable, local=str(tmp_path / "jobs")))
    components = ("api-server", "scheduler", "dag-processor", "triggerer")
    with AirflowStack(tmp_path / "home", dags, components=components) as stack:
        assert all(stack.running(c) for c in components)
        before = stack.pid("triggerer")
        stack.kill("triggerer", signal.SIGKILL)
        assert not stack.running("triggerer")
        stack.start("triggerer")
        assert stack.running("triggerer") and stack.pid("triggerer") != before

        stack.wait_for_dag("deferred_local")
        stack.airflow("dags", "unpause", "deferred_local")
        stack.airflow("dags", "trigger", "deferred_local")
        (run,) = stack.wait_for_runs("deferred_local", 1, states={"success"}, timeout=300)
        ti = stack.task_instance("deferred_local", run["run_id"], "job")
        assert ti["state"] == "success"
        # the wait happened in the triggerer: its log of this task says so, and it ended the task
        folder = stack.home / "logs" / "dag_id=deferred_local" / f"run_id={run['run_id']}" / "task_id=job"
        trigger_logs = [p.read_text() for p in folder.glob("attempt=1.log.trigger.*")]
        assert trigger_logs, sorted(p.name for p in folder.iterdir())
        assert "waiting on job" in trigger_logs[0] and "succeeded" in trigger_logs[0], trigger_logs[0][-3000:]
        assert "waiting on job" not in stack.task_log("deferred_local", run["run_id"], "job").replace(
            trigger_logs[0], "")
