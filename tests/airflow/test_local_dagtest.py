"""DLCJobOperator on the local backend, end to end with real Airflow (dag.test).

No cluster: each replica is a local process started by a detached supervisor. Both the
sync and the deferrable path run (dag.test runs the trigger inline, then resumes).
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from dlc_airflow.airflow.compat import DEGRADED, OFFERS
from tests.airflow.test_operator_dagtest import xcom

REPORT = textwrap.dedent("""
    import os
    from dlc_airflow.runtime import log_metrics, report_output, shard
    index, count = shard()
    print(f"shard {index} of {count}", flush=True)
    log_metrics(step=1, loss=0.5 - index / 10)
    report_output("where", os.environ["DLC_ROLE"] + "-" + str(index))
""")


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_local_job_runs_and_reports_into_xcom(dag_files, deferrable, tmp_path, capfd):
    job = {"type": "batch", "image": "local", "roles": {"worker": 2},
           "command": [sys.executable, "-c", REPORT]}
    dag = dag_files.operator_dag(backend="local", job=job, deferrable=deferrable,
                                 local_root=str(tmp_path / "jobs"))
    dag_run = dag.test()
    ti = dag_run.get_task_instance("train")
    assert ti.state == "success", ti.state
    result = xcom(ti)
    assert result["backend"] == "local" and result["state"] == "SUCCEEDED" and result["uid"]
    assert result["roles"]["worker"]["succeeded"] == 2
    # the coordinator (worker-0) wins on conflicts
    assert result["metrics"] == {"step": 1, "loss": 0.5}
    assert result["outputs"] == {"where": "worker-0"}
    text = "".join(capfd.readouterr())
    assert "[worker-1] shard 1 of 2" in text
    # what this Airflow lacks is said once, with the path taken instead (dlc_airflow.airflow.compat)
    expected = {"task_state_store": not OFFERS.task_state_store,
                "start_from_trigger": deferrable and not OFFERS.start_from_trigger}
    assert {feature: text.count(DEGRADED[feature]) for feature in expected} == \
        {feature: int(said) for feature, said in expected.items()}, text[-3000:]


@pytest.mark.airflow
def test_local_job_failure_fails_the_task(dag_files, tmp_path, capfd):
    job = {"type": "custom", "image": "local", "roles": {"main": 1},
           "command": [sys.executable, "-c", "import sys; print('boom'); sys.exit(7)"]}
    dag = dag_files.operator_dag(backend="local", job=job, deferrable=False, local_root=str(tmp_path / "jobs"))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "code 7" in text and "boom" in text
