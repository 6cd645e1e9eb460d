"""Preemption for real on the local Slurm (scripts/slurm-local, PreemptMode=REQUEUE): by QOS on
22.05 (preempt/qos, the QOS in its slurmdbd: `urgent` preempts `spot`), by partition on 24.11
(preempt/partition_prio: the `spot` partition is below `debug`).

A task's job runs on spot (scheduling.spot='require': the connection's spot_qos, or its
spot_partition) and saves a checkpoint every half second. A job of the urgent QOS
(scheduling.priority_class), or of the debug partition, then needs the node's room: slurmctld
preempts the spot job.
- restart_on_preemption (the default): Slurm requeues it; the task reports the restart, the
  job runs again from its checkpoint, and the task succeeds;
- restart_on_preemption=False: the job may not be requeued, so Slurm cancels it (PREEMPTED)
  and the task fails with reason Preempted, as on Kueue. (22.05's slurmrestd ignores
  requeue=false: there the batch script refuses the requeued run, with the same reason.)
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

from tests.airflow.test_operator_dagtest import xcom
from tests.support.slurm import wait_for

pytestmark = pytest.mark.airflow

NODE = "dlc4"
NODE_CPUS = 8  # scripts/slurm-local's DLC_SLURM_CPUS

STEPS = textwrap.dedent("""
    import os, pathlib, time
    from dlc_airflow.runtime import report_output
    checkpoint = pathlib.Path(os.environ["CHECKPOINT"])
    start = int(checkpoint.read_text()) if checkpoint.exists() else 0
    print(f"starting at step {start}", flush=True)
    for step in range(start, 30):
        time.sleep(0.5)
        checkpoint.write_text(str(step + 1))
    report_output("resumed_from", start)
""")


def spot_job(checkpoint: Path, **fault_tolerance) -> dict:
    return {"type": "custom", "image": "registry.example.com/unused:1", "roles": {"main": 1},
            "command": [sys.executable, "-c", STEPS], "env": {"CHECKPOINT": str(checkpoint)},
            "resources": {"cpu": "2"},
            "scheduling": {"spot": "require", "include_nodes": [NODE]},
            "fault_tolerance": fault_tolerance}


def preempt_when_checkpointed(runner, by_qos: bool, checkpoint: Path, submitted: list,
                              errors: list) -> threading.Thread:
    """Once the spot job has saved a few steps, a debug job (of the urgent QOS, `by_qos`) that
    needs all but one CPU of its node: only the spot job's room makes it fit."""
    from dlc_airflow.naming import TaskIdentity, job_name
    from dlc_airflow.spec import DLCJob

    def run() -> None:
        try:
            wait_for(lambda: checkpoint.exists() and int(checkpoint.read_text() or 0) >= 4, 120,
                     "the spot job's first checkpoints")
            scheduling = {"include_nodes": [NODE], **({"priority_class": "urgent"} if by_qos else {})}
            urgent = DLCJob(type="custom", image="unused", roles={"main": 1}, shell="echo urgent; sleep 3",
                            resources={"cpu": str(NODE_CPUS - 1)}, scheduling=scheduling)
            identity = TaskIdentity("slurm_preemption", "urgent", f"run-{uuid.uuid4().hex[:6]}")
            ref, _ = runner.submit(urgent, job_name("urgent", identity, 1), identity, 1)
            submitted.append(ref)
        except Exception as exc:  # noqa: BLE001 - handed to the test: a thread's failure is not seen
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def connection(slurm, job_root, monkeypatch) -> str:
    """A connection whose spot jobs go where this cluster preempts them."""
    conn_id = f"slurm_spot_{uuid.uuid4().hex[:6]}"
    spot = {"spot_qos": "spot"} if slurm.preempt_by == "qos" else {"spot_partition": "spot"}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", slurm.connection(job_root, **spot))
    return conn_id


def run_while_preempting(dag, runner, slurm, checkpoint: Path, capfd):
    """dag.test() of the spot job's DAG while the preempting job is submitted beside it:
    (the task instance, the task's log, [the preempting job's ref])."""
    submitted: list = []
    errors: list = []
    preempter = preempt_when_checkpointed(runner, slurm.preempt_by == "qos", checkpoint, submitted, errors)
    ti = dag.test().get_task_instance("train")
    preempter.join(30)
    assert not errors, errors
    return ti, "".join(capfd.readouterr()), submitted


def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(
        dag_files, slurm, runner, job_root, monkeypatch, tmp_path, capfd):
    checkpoint = tmp_path / "checkpoint"
    dag = dag_files.operator_dag(backend="slurm", conn_id=connection(slurm, job_root, monkeypatch),
                                 deferrable=True, job=spot_job(checkpoint))
    ti, text, submitted = run_while_preempting(dag, runner, slurm, checkpoint, capfd)
    assert ti.state == "success", text[-3000:]
    result = xcom(ti)
    spot_partition = "debug" if slurm.preempt_by == "qos" else "spot"  # (by QOS: the default partition)
    assert result["restarts"] == 1 and result["namespace"] == spot_partition, json.dumps(result)[:2000]
    resumed_from = result["outputs"]["resumed_from"]
    assert 4 <= resumed_from < 30  # the second run began where the first one's checkpoint was
    assert "requeued by Slurm (restart 1)" in text, text[-3000:]
    assert "[main-0] starting at step 0" in text and f"[main-0] starting at step {resumed_from}" in text
    (urgent,) = submitted
    record = runner.rest.job(urgent.uid)
    assert record.state == "COMPLETED" and record.partition == "debug"
    spot = runner.rest.job(result["uid"])
    assert spot.restarts == 1 and spot.state == "COMPLETED" and spot.partition == spot_partition
    if slurm.preempt_by == "qos":  # each job ran in the QOS it was given
        assert re.search(r"\bQOS=spot\s", slurm.scontrol("show", "job", result["uid"]).stdout)
        assert re.search(r"\bQOS=urgent\s", slurm.scontrol("show", "job", urgent.uid).stdout)


def test_a_preempted_job_that_may_not_restart_fails_the_task_as_preempted(
        dag_files, slurm, runner, job_root, monkeypatch, tmp_path, capfd):
    checkpoint = tmp_path / "checkpoint"
    dag = dag_files.operator_dag(backend="slurm", conn_id=connection(slurm, job_root, monkeypatch),
                                 deferrable=False, job=spot_job(checkpoint, restart_on_preemption=False))
    ti, text, _ = run_while_preempting(dag, runner, slurm, checkpoint, capfd)
    assert ti.state == "failed", text[-3000:]
    assert "FAILED (Preempted)" in text and "restart_on_preemption" in text, text[-3000:]
    (spot,) = [r for r in slurm.jobs() if f'"dag-id":"{dag.dag_id}"' in r.comment]
    # 24.11 cancels it (PREEMPTED); 22.05's slurmrestd cannot turn requeue off, so Slurm requeues
    # it and its batch script ends the second run before anything starts
    assert (spot.state, spot.restarts) in (("PREEMPTED", 0), ("FAILED", 1)), spot
    assert int(checkpoint.read_text()) < 30  # it did not run to its end
    assert "[main-0] starting at step" in text and text.count("[main-0] starting at step") == 1
