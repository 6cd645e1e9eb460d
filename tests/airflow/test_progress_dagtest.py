"""Progress and ETA end to end: a local job reports progress over a few seconds, through real
Airflow (dag.test), on the sync and the deferred path (dag.test runs the trigger inline)."""

from __future__ import annotations

import re
import sys
import textwrap

import pytest

from tests.airflow.test_operator_dagtest import xcom

STEPS = 40
TRAIN = textwrap.dedent(f"""
    import time
    from dlc_airflow.runtime import log_progress
    for step in range({STEPS} + 1):
        log_progress(step, {STEPS}, loss=1.0 / (step + 1))
        time.sleep(0.2)
""")
PROGRESS = re.compile(r"job \S+: progress (\d+)/40 steps \((\d+)%\), ETA (\S+)")


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_progress_and_eta_reach_the_task_log_and_the_xcom(dag_files, deferrable, tmp_path, capfd):
    job = {"type": "pytorch", "image": "local", "roles": {"worker": 2}, "command": [sys.executable, "-c", TRAIN]}
    dag = dag_files.operator_dag(backend="local", job=job, deferrable=deferrable, local_root=str(tmp_path / "jobs"))
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success", ti.state
    result = xcom(ti)
    assert result["progress"] == {"current": STEPS, "total": STEPS, "unit": "steps", "percent": 100.0,
                                  "eta_seconds": 0}
    text = "".join(capfd.readouterr())
    said = [(int(m[1]), int(m[2]), m[3]) for m in PROGRESS.finditer(text)]
    printed = text.count("DLC_METRICS")  # the job's lines copied into the task log (2 replicas)
    assert printed >= STEPS + 1, text[-3000:]
    # on change only: a few lines, never one per metric line; in order; the end said
    assert 2 <= len(said) <= 12, said
    assert [s[0] for s in said] == sorted(s[0] for s in said)
    assert said[-1] == (STEPS, 100, "0s")
    # a rate was measured from the job's clock before the end: an ETA in seconds
    assert any(re.fullmatch(r"\d+s", eta) and current < STEPS for current, _, eta in said), said
