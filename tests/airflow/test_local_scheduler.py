"""The local backend through the real scheduler and triggerer (AirflowStack): a deferrable
DLCJobOperator hands its wait to the triggerer, which ends the task when the local job is done;
and the stack's kill/restart of a component. Nothing is mocked."""

from __future__ import annotations

import json
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
    DLCJobOperator(task_id="sync", job=JOB, backend="local", deferrable=False, local_root={local!r})
    DLCJobOperator(task_id="deferred", job=JOB, backend="local", deferrable=True, start_in_triggerer=False,
                   local_root={local!r})
'''


def error_lines(log: str) -> list[str]:
    """The error-level lines of a task log (JSON lines, as Airflow 3 writes them)."""
    found = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and str(entry.get("level", "")).lower() in ("error", "critical"):
            found.append(line)
    return found


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
        for task_id in ("job", "sync", "deferred"):  # started in the triggerer, sync, deferred by a worker
            ti = stack.task_instance("deferred_local", run["run_id"], task_id)
            assert ti["state"] == "success", (task_id, ti)
            log = stack.task_log("deferred_local", run["run_id"], task_id)
            assert "succeeded" in log, (task_id, log[-3000:])
            # a successful task's log has no error-level line
            assert error_lines(log) == [], (task_id, error_lines(log))
        # nor has what the task processes print (the executor's workers write into the scheduler's
        # log, the triggerer into its own): once Airflow logged "[error] XCom not found" there for
        # each extra link that was never pushed
        for component in ("scheduler", "triggerer"):
            errors = [line for line in stack.log(component).splitlines() if "[error" in line]
            assert errors == [], (component, errors)
        # the wait happened in the triggerer: its log of this task says so, and it ended the task
        folder = stack.home / "logs" / "dag_id=deferred_local" / f"run_id={run['run_id']}" / "task_id=job"
        trigger_logs = [p.read_text() for p in folder.glob("attempt=1.log.trigger.*")]
        assert trigger_logs, sorted(p.name for p in folder.iterdir())
        assert "waiting on job" in trigger_logs[0] and "succeeded" in trigger_logs[0], trigger_logs[0][-3000:]
        assert "waiting on job" not in stack.task_log("deferred_local", run["run_id"], "job").replace(
            trigger_logs[0], "")
