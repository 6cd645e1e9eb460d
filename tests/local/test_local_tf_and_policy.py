"""The local backend's success and failure rules with real processes: TensorFlow's chief
decides, parameter servers that never exit are stopped, the restart budget's reason, and
the hostfile slots every backend agrees on."""

from __future__ import annotations

import json
import time

from dlc_airflow import reasons
from dlc_airflow.local import procs
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.local.test_local_backend import PY, dump_env_job, labels, script, wait

# Each replica records its pid; ps and evaluator serve until killed (as server.join() does),
# `SLOW` replicas sleep until killed too, the others finish at once.
TF_REPLICA = """
    import json, os, signal, sys, time
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    key = f"{task['type']}-{task['index']}"
    forever = sys.argv[2].split(",")
    if key in forever and os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.path.join(sys.argv[1], key + ".tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(sys.argv[1], key + ".tmp"), os.path.join(sys.argv[1], key))
    if key in forever:
        while True:
            time.sleep(1)
    # the others finish once the servers are up, as a chief would after its training steps
    deadline = time.monotonic() + 30
    while not all(os.path.exists(os.path.join(sys.argv[1], k)) for k in forever):
        assert time.monotonic() < deadline, "the servers never started"
        time.sleep(0.02)
    print(key, "done", flush=True)
"""


def tf_job(pids, forever: str, roles: dict, **fields) -> DLCJob:
    return DLCJob(image="local", type="tensorflow", roles=roles,
                  command=[*script(TF_REPLICA), str(pids), forever], **fields)


def replica_states(runner, name: str) -> dict:
    return json.loads((runner.root / name / "state.json").read_text())["replicas"]


def test_tensorflow_succeeds_with_its_chief_and_stops_a_ps_that_never_exits(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_LOCAL_GRACE_SECONDS", "2")
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tf_job(pids, "ps-0,ps-1,evaluator-0", {"chief": 1, "ps": 2, "worker": 2, "evaluator": 1})
    start = time.monotonic()
    runner.submit(job, "tf-ps", labels())
    status = wait(runner, "tf-ps", timeout=20)
    assert (status.state, status.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), status.summary()
    assert time.monotonic() - start < 15
    assert status.roles["chief"].succeeded == 1
    for role in ("ps", "evaluator"):  # stopped: neither succeeded nor failed, and gone
        counts = status.roles[role]
        assert (counts.active, counts.succeeded, counts.failed) == (0, 0, 0), status.summary()
    replicas = replica_states(runner, "tf-ps")
    for key in ("ps-0", "ps-1", "evaluator-0"):
        assert replicas[key]["phase"] == "stopped"
        assert not procs.alive(int((pids / key).read_text()))
    assert replicas["chief-0"]["phase"] == "succeeded"
    lines, _ = runner.read_logs("tf-ps")
    assert ("ps-0", "[dlc-airflow] stopping: the job succeeded (chief-0 succeeded)") in lines


def test_tensorflow_chief_decides_while_workers_still_run(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_LOCAL_GRACE_SECONDS", "2")
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tf_job(pids, "ps-0,worker-0,worker-1", {"chief": 1, "ps": 1, "worker": 2})
    runner.submit(job, "tf-chief", labels())
    status = wait(runner, "tf-chief", timeout=20)
    assert status.state is JobState.SUCCEEDED, status.summary()
    assert status.roles["worker"].failed == 0 and status.roles["worker"].active == 0
    assert {k: v["phase"] for k, v in replica_states(runner, "tf-chief").items()} == {
        "chief-0": "succeeded", "ps-0": "stopped", "worker-0": "stopped", "worker-1": "stopped"}


def test_tensorflow_without_a_chief_succeeds_with_worker_0(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_LOCAL_GRACE_SECONDS", "2")
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tf_job(pids, "ps-0,worker-1", {"ps": 1, "worker": 2})
    runner.submit(job, "tf-worker0", labels())
    status = wait(runner, "tf-worker0", timeout=20)
    assert status.state is JobState.SUCCEEDED, status.summary()
    assert status.roles["worker"].succeeded == 1
    phases = {k: v["phase"] for k, v in replica_states(runner, "tf-worker0").items()}
    assert phases == {"ps-0": "stopped", "worker-0": "succeeded", "worker-1": "stopped"}
    lines, _ = runner.read_logs("tf-worker0")
    assert ("worker-1", "[dlc-airflow] stopping: the job succeeded (worker-0 succeeded)") in lines


def test_a_ps_that_ignores_sigterm_is_killed_after_the_grace_period(runner, tmp_path, monkeypatch):
    monkeypatch.setenv("DLC_LOCAL_GRACE_SECONDS", "0.5")
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tf_job(pids, "ps-0", {"chief": 1, "ps": 1}, env={"IGNORE_TERM": "1"})
    runner.submit(job, "tf-stubborn", labels())
    status = wait(runner, "tf-stubborn", timeout=20)
    assert status.state is JobState.SUCCEEDED, status.summary()
    assert not procs.alive(int((pids / "ps-0").read_text()))
    assert replica_states(runner, "tf-stubborn")["ps-0"]["exit_code"] == 137  # SIGKILL


def test_tensorflow_worker_failure_before_the_chief_still_fails_the_job(runner, tmp_path):
    job = DLCJob(image="local", type="tensorflow", roles={"chief": 1, "worker": 1},
                 command=script("""
                     import json, os, sys, time
                     task = json.loads(os.environ["TF_CONFIG"])["task"]
                     if task["type"] == "worker":
                         sys.exit(5)
                     time.sleep(300)
                 """))
    runner.submit(job, "tf-worker-fails", labels())
    status = wait(runner, "tf-worker-fails", timeout=20)
    assert (status.state, status.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED)
    assert "worker-0 main command exited with code 5" in status.message


def test_restart_limit_reason(runner):
    job = DLCJob(image="local", command=[PY, "-c", "raise SystemExit(9)"], fault_tolerance={"max_restarts": 1})
    runner.submit(job, "budget", labels())
    status = wait(runner, "budget")
    assert (status.state, status.reason, status.restarts) == (JobState.FAILED, "RestartLimitExceeded", 1)
    assert "(restarted 1 of max_restarts 1 times)" in status.message


def test_deepspeed_mpi_launcher_hostfile_has_nproc_per_node_slots(runner, tmp_path):
    """As on native: DeepSpeed's MPI launcher runs one process per GPU (it was slots=1 here)."""
    out = tmp_path / "env"
    out.mkdir()
    job = dump_env_job(out, type="deepspeed", roles={"worker": 2}, launcher="mpi", nproc_per_node=8)
    runner.submit(job, "ds-mpi", labels())
    assert wait(runner, "ds-mpi").state is JobState.SUCCEEDED
    hostfile = runner.root / "ds-mpi" / "hostfile"
    assert hostfile.read_text() == "127.0.0.1 slots=8\n127.0.0.1 slots=8\n"
    worker = json.loads((out / "worker-0.json").read_text())
    assert worker["DLC_HOSTFILE"] == str(hostfile)
