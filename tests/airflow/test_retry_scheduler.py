"""Retries that know the failure, through the real scheduler, triggerer and Airflow 3.3's retry
policies (AIP-105), on the local backend (real processes): with retries=3, a non-retryable exit
fails at try 1 - waited on a worker and in the triggerer alike -, and a retryable failure is
retried and succeeds. The OOM kill, which only a real kernel limit makes: tests/node/test_node_retry.py."""

from __future__ import annotations

import sys

import pytest

from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

DAG_FILE = '''
from datetime import datetime, timedelta, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

def job(source):
    return {{"type": "batch", "image": "local", "command": [{python!r}, "-c", source],
            "fault_tolerance": {{"retryable_exit_codes": [1]}}}}

NON_RETRYABLE = "import sys; print('bad hyperparameter', flush=True); sys.exit(3)"
# the first attempt fails with a retryable code (1) and leaves a mark; the next one succeeds
FLAKY = ("import os, sys\\nmark = {mark!r}\\nif not os.path.exists(mark):\\n"
         "    open(mark, 'w').close(); sys.exit(1)\\nprint('second try ok', flush=True)\\n")

with DAG("retry_policy", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 3, "retry_delay": timedelta(seconds=1)}}):
    DLCJobOperator(task_id="exit_sync", job=job(NON_RETRYABLE), backend="local", local_root={local!r})
    DLCJobOperator(task_id="exit_deferred", job=job(NON_RETRYABLE), backend="local", deferrable=True,
                   local_root={local!r})
    DLCJobOperator(task_id="flaky_deferred", job=job(FLAKY), backend="local", deferrable=True,
                   local_root={local!r})
'''


def test_the_job_reason_decides_the_retry(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "retry_policy.py").write_text(DAG_FILE.format(python=sys.executable, local=str(tmp_path / "jobs"),
                                                          mark=str(tmp_path / "first-try-done")))
    with AirflowStack(tmp_path / "home", dags, components=("api-server", "scheduler", "dag-processor",
                                                           "triggerer")) as stack:
        stack.wait_for_dag("retry_policy")
        stack.airflow("dags", "unpause", "retry_policy")
        stack.airflow("dags", "trigger", "retry_policy")
        (run,) = stack.wait_for_runs("retry_policy", 1, states={"failed"}, timeout=400)
        ti = {t: stack.task_instance("retry_policy", run["run_id"], t)
              for t in ("exit_sync", "exit_deferred", "flaky_deferred")}
        # a non-retryable exit: failed at its first try, whatever the task's retries
        for task_id in ("exit_sync", "exit_deferred"):
            assert (ti[task_id]["state"], ti[task_id]["try_number"]) == ("failed", 1), ti[task_id]
            log = stack.task_log("retry_policy", run["run_id"], task_id)
            assert "bad hyperparameter" in log or "PodFailurePolicy" in log, log[-3000:]
            assert "no retry helps" in log, log[-3000:]  # the policy's decision, in the task's log
        # a retryable failure: Airflow's retries, and the second try succeeds
        flaky = ti["flaky_deferred"]
        assert (flaky["state"], flaky["try_number"]) == ("success", 2), flaky
