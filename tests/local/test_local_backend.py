"""The local backend with real processes: supervisor, replicas, signals, files. No mocks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlc_airflow import reasons
from dlc_airflow.local import procs
from dlc_airflow.local.jobs import JobFolders, LocalJobError
from dlc_airflow.local.volumes import LocalMounts
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

PY = sys.executable
KEY = "dlc-airflow/task-key"


def labels(key: str = "task-a", **extra: str) -> dict[str, str]:
    return {KEY: key, "app.kubernetes.io/managed-by": "dlc-airflow", **extra}


def script(body: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(body)]


def wait(runner: JobFolders, name: str, timeout: float = 30.0, states=None):
    deadline = time.monotonic() + timeout
    while True:
        status = runner.status(name)
        if (status.state in states) if states else status.terminal:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} still {status.summary()} after {timeout}s")
        time.sleep(0.02)


def wait_for(predicate, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def supervisor_pid(runner: JobFolders, name: str) -> int:
    return json.loads((runner.root / name / "supervisor.json").read_text())["pid"]


def supervisors_of(jobdir: Path) -> list[int]:
    """Live processes running the supervisor of `jobdir` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = b"dlc_airflow.local.supervisor" in argv and str(jobdir).encode() in argv
        if ours and procs.alive(int(entry)):
            found.append(int(entry))
    return found


DUMP_ENV = """
    import json, os, sys
    key = os.environ["DLC_ROLE"] + "-" + os.environ["DLC_ROLE_INDEX"]
    with open(os.path.join(sys.argv[1], key + ".json"), "w") as f:
        json.dump(dict(os.environ), f)
"""


def dump_env_job(out: Path, **fields) -> DLCJob:
    return DLCJob(image="local", command=[*script(DUMP_ENV), str(out)], **fields)


# -- success and wiring -------------------------------------------------------------------


def test_pytorch_job_gets_the_cluster_wiring_on_127_0_0_1(runner, tmp_path, monkeypatch):
    out = tmp_path / "env"
    out.mkdir()
    monkeypatch.setenv("SHARD_INDEX", "7")  # wiring of the submitter must not leak in
    monkeypatch.setenv("KEEP_ME", "inherited")
    job = dump_env_job(out, type="pytorch", roles={"master": 1, "worker": 2},
                       env={"USER_VAR": "x"})
    assert runner.submit(job, "torch-env", labels()) is True
    status = wait(runner, "torch-env")
    assert status.state == JobState.SUCCEEDED, status.summary()
    assert status.roles["worker"].succeeded == 2 and status.roles["master"].succeeded == 1
    assert status.created and status.started and status.finished

    envs = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(envs) == ["master-0", "worker-0", "worker-1"]
    ranks = {k: int(e["RANK"]) for k, e in envs.items()}
    assert ranks == {"master-0": 0, "worker-0": 1, "worker-1": 2}
    ports = {e["MASTER_PORT"] for e in envs.values()}
    assert len(ports) == 1 and 1024 <= int(ports.pop()) <= 65535
    jobdir = runner.root / "torch-env"
    for key, env in envs.items():
        role, index = key.rsplit("-", 1)
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert env["WORLD_SIZE"] == "3" and env["PET_NNODES"] == "3"
        assert env["PET_NODE_RANK"] == env["RANK"]
        assert env["DLC_ROLE"] == role and env["DLC_ROLE_INDEX"] == index
        assert env["JOB_COMPLETION_INDEX"] == index
        assert env["DLC_JOB_NAME"] == "torch-env" and env["DLC_JOB_TYPE"] == "pytorch"
        assert env["DLC_OUTPUT_FILE"] == str(jobdir / "outputs" / f"{key}.json")
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["USER_VAR"] == "x" and env["KEEP_ME"] == "inherited"
        assert "SHARD_INDEX" not in env


def test_tensorflow_replicas_get_distinct_free_ports_in_tf_config(runner, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    job = dump_env_job(out, type="tensorflow", roles={"chief": 1, "ps": 1, "worker": 2})
    runner.submit(job, "tf-env", labels())
    assert wait(runner, "tf-env").state == JobState.SUCCEEDED
    configs = {p.stem: json.loads(json.loads(p.read_text())["TF_CONFIG"]) for p in out.glob("*.json")}
    cluster = configs["chief-0"]["cluster"]
    addresses = [a for role in ("chief", "ps", "worker") for a in cluster[role]]
    assert len(addresses) == 4 and len(set(addresses)) == 4
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    for key, config in configs.items():
        role, index = key.rsplit("-", 1)
        assert config["cluster"] == cluster
        assert config["task"] == {"type": role, "index": int(index)}


def test_batch_shards_and_mpi_hostfile(runner, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    runner.submit(dump_env_job(out, type="batch", roles={"worker": 3}), "batch-env", labels())
    assert wait(runner, "batch-env").state == JobState.SUCCEEDED
    shards = sorted((e["SHARD_INDEX"], e["SHARD_COUNT"]) for e in
                    (json.loads(p.read_text()) for p in out.glob("*.json")))
    assert shards == [("0", "3"), ("1", "3"), ("2", "3")]

    mpi_out = tmp_path / "mpi"
    mpi_out.mkdir()
    job = dump_env_job(mpi_out, type="mpi", roles={"launcher": 1, "worker": 2}, slots_per_worker=4)
    runner.submit(job, "mpi-env", labels("task-b"))
    assert wait(runner, "mpi-env").state == JobState.SUCCEEDED
    launcher = json.loads((mpi_out / "launcher-0.json").read_text())
    hostfile = runner.root / "mpi-env" / "hostfile"
    assert launcher["OMPI_MCA_orte_default_hostfile"] == str(hostfile)
    assert launcher["I_MPI_HYDRA_HOST_FILE"] == launcher["DLC_HOSTFILE"] == str(hostfile)
    assert hostfile.read_text() == "127.0.0.1 slots=4\n127.0.0.1 slots=4\n"


def test_ray_runs_only_the_head(runner, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    runner.submit(dump_env_job(out, type="ray", roles={"head": 1, "worker": 3}), "ray-job", labels())
    status = wait(runner, "ray-job")
    assert status.state == JobState.SUCCEEDED
    assert [p.stem for p in out.glob("*.json")] == ["head-0"]
    assert list(status.roles) == ["head"]


# -- failures, restarts, deadline ---------------------------------------------------------


def test_failure_is_restarted_up_to_max_restarts_then_fails(runner):
    job = DLCJob(image="local", type="batch", roles={"worker": 2},
                 command=script("""
                     import os, sys
                     print("working on shard", os.environ["SHARD_INDEX"])
                     sys.exit(3 if os.environ["SHARD_INDEX"] == "1" else 0)
                 """),
                 fault_tolerance={"max_restarts": 2})
    runner.submit(job, "always-fails", labels())
    status = wait(runner, "always-fails")
    assert status.state == JobState.FAILED
    assert status.reason == reasons.RESTART_LIMIT_EXCEEDED
    assert status.restarts == 2
    assert status.roles["worker"].failed == 3 and status.roles["worker"].succeeded == 1
    assert "worker-1" in status.message and "code 3" in status.message
    assert "working on shard 1" in status.message  # the last log lines


def test_restart_succeeds_the_second_time(runner, tmp_path):
    marker = tmp_path / "failed-once"
    job = DLCJob(image="local", command=script(f"""
                     import os, sys
                     if not os.path.exists({str(marker)!r}):
                         open({str(marker)!r}, "w").close()
                         sys.exit(7)
                 """),
                 fault_tolerance={"max_restarts": 1})
    runner.submit(job, "flaky", labels())
    status = wait(runner, "flaky")
    assert status.state == JobState.SUCCEEDED, status.summary()
    assert status.restarts == 1
    lines, _ = runner.read_logs("flaky")
    assert any("exited with code 7; restart 1 of 1" in line for _, line in lines)


def test_non_retryable_exit_code_fails_at_once(runner):
    job = DLCJob(image="local", command=[PY, "-c", "raise SystemExit(4)"],
                 fault_tolerance={"max_restarts": 5, "retryable_exit_codes": [3]})
    runner.submit(job, "not-retryable", labels())
    status = wait(runner, "not-retryable")
    assert (status.state, status.reason, status.restarts) == (JobState.FAILED, "PodFailurePolicy", 0)
    assert "code 4" in status.message and "retryable_exit_codes [3]" in status.message


def test_retryable_exit_code_is_restarted(runner):
    job = DLCJob(image="local", command=[PY, "-c", "raise SystemExit(3)"],
                 fault_tolerance={"max_restarts": 1, "retryable_exit_codes": [3]})
    runner.submit(job, "retryable", labels())
    status = wait(runner, "retryable")
    assert (status.state, status.reason, status.restarts) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED, 1)


def test_failure_kills_the_other_replicas(runner, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    job = DLCJob(image="local", type="batch", roles={"worker": 2}, command=script(f"""
        import os, sys, time
        open(os.path.join({str(pids)!r}, str(os.getpid())), "w").close()
        if os.environ["SHARD_INDEX"] == "0":
            time.sleep(0.5); sys.exit(1)
        time.sleep(300)
    """))
    runner.submit(job, "one-fails", labels())
    status = wait(runner, "one-fails")
    assert status.state == JobState.FAILED and "worker-0" in status.message
    for pid in pids.iterdir():
        assert not procs.alive(int(pid.name))


def test_deadline_kills_and_fails(runner):
    job = DLCJob(image="local", command=[PY, "-c", "import time; time.sleep(300)"],
                 max_running_time=1)
    start = time.monotonic()
    runner.submit(job, "too-slow", labels())
    status = wait(runner, "too-slow")
    assert (status.state, status.reason) == (JobState.FAILED, "DeadlineExceeded")
    assert time.monotonic() - start < 10
    replica = json.loads((runner.root / "too-slow" / "state.json").read_text())["replicas"]["worker-0"]
    assert not procs.alive(replica["pid"], replica["start"])


def test_health_check_runs_once_before_the_main_command(runner, tmp_path):
    checks = tmp_path / "checks"
    marker = tmp_path / "failed-once"
    job = DLCJob(image="local", type="batch", roles={"worker": 2},
                 health_check={"command": [PY, "-c", (f"import os; open(os.path.join({str(checks)!r}, "
                                                       f"os.environ['SHARD_INDEX']), 'a').write('x')")]},
                 command=script(f"""
                     import os, sys
                     if not os.path.exists({str(marker)!r}):
                         open({str(marker)!r}, "w").close()
                         sys.exit(2)
                 """),
                 fault_tolerance={"max_restarts": 1})
    checks.mkdir()
    runner.submit(job, "healthy", labels())
    status = wait(runner, "healthy")
    assert status.state == JobState.SUCCEEDED and status.restarts == 1
    assert sorted((p.name, p.read_text()) for p in checks.iterdir()) == [("0", "x"), ("1", "x")]


def test_failed_health_check_fails_the_job_before_the_main_command(runner, tmp_path):
    ran = tmp_path / "main-ran"
    job = DLCJob(image="local",
                 health_check={"command": [PY, "-c", "print('no GPU'); raise SystemExit(1)"]},
                 command=[PY, "-c", f"open({str(ran)!r}, 'w')"])
    runner.submit(job, "unhealthy", labels())
    status = wait(runner, "unhealthy")
    assert (status.state, status.reason) == (JobState.FAILED, "HealthCheckFailed")
    assert "worker-0 health check exited with code 1" in status.message and "no GPU" in status.message
    assert not ran.exists()


def test_sanity_check_cli_as_the_health_check(runner):
    dlc = Path(PY).with_name("dlc-airflow")
    job = DLCJob(image="local", type="pytorch", roles={"worker": 2},
                 health_check={"command": [str(dlc), "sanity-check", "--dns-timeout", "5"]},
                 command=[PY, "-c", "pass"])
    runner.submit(job, "sane", labels())
    status = wait(runner, "sane", timeout=60)
    assert status.state == JobState.SUCCEEDED, status.summary()
    lines, _ = runner.read_logs("sane")
    text = "\n".join(line for _, line in lines)
    assert "ok   env: rank 1 of 2" in text and "ok   master_addr: 127.0.0.1 resolves" in text


# -- stop, adoption, detachment -----------------------------------------------------------

SPAWNS_GRANDCHILD = """
    import os, subprocess, sys, time
    # the grandchild ignores SIGTERM: only the SIGKILL after the grace period ends it
    grandchild = subprocess.Popen(["/bin/sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    time.sleep(300)
"""


def test_stop_kills_the_whole_process_group(runner, tmp_path):
    pidfile = tmp_path / "pids"
    runner.grace_seconds = 0.5
    job = DLCJob(image="local", command=[*script(SPAWNS_GRANDCHILD), str(pidfile)])
    runner.submit(job, "stop-me", labels())
    wait_for(lambda: pidfile.exists() and " " in pidfile.read_text(), what="the pid file")
    child, grandchild = map(int, pidfile.read_text().split())
    assert procs.alive(child) and procs.alive(grandchild)
    sup = supervisor_pid(runner, "stop-me")

    assert runner.stop("stop-me", reason="TaskKilled") is True
    status = runner.status("stop-me")
    assert (status.state, status.reason) == (JobState.STOPPED, "TaskKilled")
    wait_for(lambda: not procs.alive(child) and not procs.alive(grandchild), 5, "both to die")
    wait_for(lambda: not procs.alive(sup), 5, "the supervisor to exit")
    assert runner.stop("stop-me", reason="again") is False  # idempotent: keeps the first final state
    assert runner.status("stop-me").reason == "TaskKilled"


def test_sigterm_to_the_supervisor_stops_the_job(runner, tmp_path, monkeypatch):
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("DLC_LOCAL_GRACE_SECONDS", "0.5")  # the supervisor's own grace period
    job = DLCJob(image="local", command=[*script(SPAWNS_GRANDCHILD), str(pidfile)])
    runner.submit(job, "term-sup", labels())
    wait_for(lambda: pidfile.exists() and " " in pidfile.read_text(), what="the pid file")
    child, grandchild = map(int, pidfile.read_text().split())
    os.kill(supervisor_pid(runner, "term-sup"), signal.SIGTERM)
    status = wait(runner, "term-sup", timeout=20)
    assert (status.state, status.reason) == (JobState.STOPPED, "Stopped")
    wait_for(lambda: not procs.alive(child) and not procs.alive(grandchild), 15, "both to die")


def test_second_submit_adopts_without_a_second_supervisor(runner, tmp_path):
    gate = tmp_path / "go"
    job = DLCJob(image="local", command=script(f"""
        import os, time
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.02)
    """))
    assert runner.submit(job, "adopt-me", labels("task-a")) is True
    first = supervisor_pid(runner, "adopt-me")
    other = JobFolders(runner.root)  # e.g. the retry of the task, in another process
    assert other.submit(job, "adopt-me", labels("task-a")) is False
    assert supervisor_pid(runner, "adopt-me") == first
    # (a supervisor just forked may not show its own command line yet)
    wait_for(lambda: first in supervisors_of(runner.root / "adopt-me"), 10, "the supervisor")
    assert supervisors_of(runner.root / "adopt-me") == [first]
    assert other.status("adopt-me").state in (JobState.PENDING, JobState.RUNNING)
    gate.touch()
    assert wait(other, "adopt-me").state == JobState.SUCCEEDED


def test_name_taken_by_another_task_is_an_error(runner):
    job = DLCJob(image="local", command=[PY, "-c", "pass"])
    runner.submit(job, "taken", labels("task-a"))
    with pytest.raises(LocalJobError, match="belongs to task key 'task-a', not 'task-b'"):
        runner.submit(job, "taken", labels("task-b"))


def test_job_outlives_the_process_that_submitted_it(runner, tmp_path):
    gate, done = tmp_path / "go", tmp_path / "done"
    submitter = textwrap.dedent(f"""
        from dlc_airflow.local.jobs import JobFolders
        from dlc_airflow.spec import DLCJob
        job = DLCJob(image="local", command=[{PY!r}, "-c",
            "import os, time\\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.02)\\n"
            "open({str(done)!r}, 'w').write('done')"])
        print(JobFolders({str(runner.root)!r}).submit(job, "detached", {{"{KEY}": "task-a"}}))
    """)
    result = subprocess.run([PY, "-c", submitter], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
    # the submitter has exited; the job waits for the gate, then finishes on its own
    assert runner.status("detached").state in (JobState.PENDING, JobState.RUNNING)
    gate.touch()
    assert wait(runner, "detached").state == JobState.SUCCEEDED
    assert done.read_text() == "done"


def test_supervisor_killed_means_supervisor_lost(runner, tmp_path):
    pidfile = tmp_path / "pids"
    job = DLCJob(image="local", command=[*script(SPAWNS_GRANDCHILD), str(pidfile)])
    runner.submit(job, "lost", labels())
    wait_for(lambda: pidfile.exists() and " " in pidfile.read_text(), what="the pid file")
    child, _grandchild = map(int, pidfile.read_text().split())
    os.kill(supervisor_pid(runner, "lost"), signal.SIGKILL)
    status = wait(runner, "lost", timeout=10)
    assert (status.state, status.reason) == (JobState.FAILED, "SupervisorLost")
    assert "died without writing a final state" in status.message
    wait_for(lambda: not procs.alive(child), 5, "the orphaned replica to be killed")
    assert JobFolders(runner.root).status("lost").reason == "SupervisorLost"  # written for good


def test_missing_job_is_stopped_not_found_and_delete_removes(runner):
    assert (runner.status("nope").state, runner.status("nope").reason) == (JobState.STOPPED, "NotFound")
    assert runner.stop("nope") is False  # no error
    job = DLCJob(image="local", command=[PY, "-c", "import time; time.sleep(300)"])
    runner.submit(job, "delete-me", labels())
    wait(runner, "delete-me", states={JobState.RUNNING})
    runner.delete("delete-me")
    assert not (runner.root / "delete-me").exists()
    assert runner.status("delete-me").reason == "NotFound"
    with pytest.raises(LocalJobError, match="no local job delete-me"):
        runner.labels("delete-me")


def test_find_by_labels_oldest_first(runner):
    job = DLCJob(image="local", command=[PY, "-c", "pass"])
    runner.submit(job, "first-1", labels("task-x", **{"dlc-airflow/attempt": "1"}))
    runner.submit(job, "other", labels("task-y"))
    runner.submit(job, "first-2", labels("task-x", **{"dlc-airflow/attempt": "2"}))
    assert runner.find({KEY: "task-x"}) == ["first-1", "first-2"]
    assert runner.find({KEY: "task-x", "dlc-airflow/attempt": "2"}) == ["first-2"]
    assert runner.find({KEY: "nobody"}) == []
    assert runner.labels("other")[KEY] == "task-y"
    for name in ("first-1", "other", "first-2"):
        wait(runner, name)


def test_invalid_name_is_rejected(runner):
    job = DLCJob(image="local", command=[PY, "-c", "pass"])
    with pytest.raises(ValueError, match="local job name '../evil'"):
        runner.submit(job, "../evil", labels())


# -- logs and outputs ---------------------------------------------------------------------


def test_logs_with_offsets(runner, tmp_path):
    gate = tmp_path / "go"
    job = DLCJob(image="local", type="batch", roles={"worker": 2}, command=script(f"""
        import os, sys, time
        shard = os.environ["SHARD_INDEX"]
        print(f"first {{shard}}", flush=True)
        sys.stdout.write(f"partial {{shard}}")
        sys.stdout.flush()
        while not os.path.exists({str(gate)!r}):
            time.sleep(0.02)
        print(" done", flush=True)
        sys.stdout.write("no newline at the end")
    """))
    runner.submit(job, "logs", labels())
    wait_for(lambda: all((runner.root / "logs" / "logs" / f"worker-{i}.log").exists()
                         and b"partial" in (runner.root / "logs" / "logs" / f"worker-{i}.log").read_bytes()
                         for i in range(2)), what="first lines")
    lines, offsets = runner.read_logs("logs")
    assert lines == [("worker-0", "first 0"), ("worker-1", "first 1")]  # no partial line yet
    again, same = runner.read_logs("logs", offsets)
    assert again == [] and same == offsets
    gate.touch()
    wait(runner, "logs")
    rest, final = runner.read_logs("logs", offsets)
    assert rest == [("worker-0", "partial 0 done"), ("worker-0", "no newline at the end"),
                    ("worker-1", "partial 1 done"), ("worker-1", "no newline at the end")]
    assert runner.read_logs("logs", final) == ([], final)


def test_outputs_from_runtime_metrics_coordinator_wins(runner):
    job = DLCJob(image="local", type="pytorch", roles={"master": 1, "worker": 2}, command=script("""
        import os
        from dlc_airflow.runtime import log_metrics, report_output, rank
        log_metrics(step=10, loss=0.5 + rank(), accuracy=0.9)
        report_output("model", f"/models/from-rank-{rank()}")
        if rank() == 2:
            report_output("only-worker-1", "yes")
    """))
    runner.submit(job, "outputs", labels())
    assert wait(runner, "outputs").state == JobState.SUCCEEDED
    merged = runner.outputs("outputs")
    assert merged["outputs"] == {"model": "/models/from-rank-0", "only-worker-1": "yes"}
    assert merged["metrics"] == {"step": 10, "loss": 0.5, "accuracy": 0.9}
    lines, _ = runner.read_logs("outputs")
    from dlc_airflow.runtime import parse_metric_line

    metrics = [parse_metric_line(line) for replica, line in lines if replica == "worker-1"]
    assert {"step": 10, "loss": 2.5, "accuracy": 0.9} in metrics


# -- volumes ------------------------------------------------------------------------------


def test_mount_paths_are_rewritten_to_local_folders(runner, tmp_path):
    host = tmp_path / "host"
    host.mkdir()
    (host / "in.txt").write_text("hello")
    volumes = runner.root / "volumes"
    (volumes / "pvc-datasets").mkdir(parents=True)
    (volumes / "pvc-datasets" / "train.txt").write_text("train data")
    job = DLCJob(
        image="local",
        storage=[
            {"type": "pvc", "claim_name": "datasets", "mount_path": "/data"},
            {"type": "host_path", "path": str(host), "mount_path": "/mnt/host"},
            {"type": "empty_dir", "mount_path": "/scratch"},
            {"type": "nfs", "server": "nas.example", "path": "/export", "mount_path": "/data/nested"},
        ],
        working_dir="/scratch/work",
        env={"INPUT": "/data/train.txt", "NOT_A_MOUNT": "/database/x", "URI": "file:///mnt/host/in.txt"},
        command=script("""
            import os, sys, json
            data, host_file, nested = sys.argv[1:4]
            out = {"train": open(data).read(), "host": open(host_file).read(),
                   "env": {k: os.environ[k] for k in ("INPUT", "NOT_A_MOUNT", "URI")},
                   "nested": nested, "cwd": os.getcwd()}
            with open("result.json", "w") as f:  # relative: the cwd is working_dir, mapped
                json.dump(out, f)
        """) + ["/data/train.txt", "/mnt/host/in.txt", "/data/nested/x"],
    )
    runner.submit(job, "mounts", labels())
    status = wait(runner, "mounts")
    assert status.state == JobState.SUCCEEDED, status.message
    jobdir = runner.root / "mounts"
    cwd = jobdir / "volumes" / "empty_dir-2" / "work"
    result = json.loads((cwd / "result.json").read_text())
    assert result["cwd"] == str(cwd)
    assert result["train"] == "train data" and result["host"] == "hello"
    assert result["env"] == {
        "INPUT": str(volumes / "pvc-datasets" / "train.txt"),
        "NOT_A_MOUNT": "/database/x",
        "URI": f"file://{host}/in.txt",
    }
    assert result["nested"] == str(volumes / "nfs-nas-example-export" / "x")


def test_rewrite_matches_whole_path_components_longest_first(tmp_path):
    mounts = LocalMounts()
    mounts.add("/data", tmp_path / "d")
    mounts.add("/data/cache/", tmp_path / "c")
    assert mounts.rewrite("/data") == str(tmp_path / "d")
    assert mounts.rewrite("--in=/data/a.txt,/data/cache/b") == f"--in={tmp_path}/d/a.txt,{tmp_path}/c/b"
    assert mounts.rewrite("/database /my/data /data.bak data/x") == "/database /my/data /data.bak data/x"
    assert mounts.rewrite("s3://bucket/data/x") == "s3://bucket/data/x"


# -- checkpoints --------------------------------------------------------------------------

TRAIN_WITH_CHECKPOINTS = """
    import os, sys
    from dlc_airflow.runtime import save_checkpoint, resume_path, log_metrics, rank
    start = resume_path(fallback_to_latest=True)  # a restarted replica resumes its own work
    step = int(open(os.path.join(start, "step")).read()) if start else 0
    print("resumed from", start, "at step", step, flush=True)
    for step in range(step + 1, step + 4):
        def write(path, step=step):
            with open(os.path.join(path, "step"), "w") as f:
                f.write(str(step))
        save_checkpoint(write, step)
        log_metrics(step=step)
        crashed = os.path.join(os.environ["DLC_CHECKPOINT_DIR"], "..", "crashed")
        if step == 3 and rank() == 0 and not os.path.exists(crashed):
            open(crashed, "w").close()
            sys.exit(1)   # rank 0 crashes once after step 3: its restart resumes from there
"""


def test_checkpoint_save_resume_and_keep_last_across_a_restart(runner, tmp_path):
    root = tmp_path / "ckpt" / "run"
    job = DLCJob(image="local", type="pytorch", roles={"worker": 2},
                 checkpoint={"uri": f"file://{root}", "keep_last": 2},
                 fault_tolerance={"max_restarts": 1},
                 command=script(TRAIN_WITH_CHECKPOINTS))
    runner.submit(job, "ckpt", labels())
    status = wait(runner, "ckpt")
    assert status.state == JobState.SUCCEEDED, status.message
    assert status.restarts == 1
    # rank 0 wrote steps 1-3, crashed, resumed from 3 and wrote 4-6: the last 2 are kept
    assert sorted(p.name for p in root.iterdir()) == ["step-000005", "step-000006"]
    lines, _ = runner.read_logs("ckpt")
    assert ("worker-0", f"resumed from {root}/step-000003 at step 3") in lines
    assert runner.outputs("ckpt")["outputs"]["checkpoint"] == f"file://{root}/step-000006"


# -- real distributed training ------------------------------------------------------------

DDP_TRAIN = """
    import os, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from dlc_airflow.runtime import rank, world_size, save_checkpoint, log_metrics
    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    assert dist.get_rank() == rank() and dist.get_world_size() == world_size() == 2
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank())
    x = torch.randn(64, 4, generator=g)
    y = x.sum(dim=1, keepdim=True)
    for step in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    total = torch.tensor([float(rank() + 1)])
    dist.all_reduce(total)
    log_metrics(step=20, loss=loss.item(), allreduce=total.item())
    save_checkpoint(lambda d: torch.save(model.module.state_dict(), os.path.join(d, "model.pt")), 20)
    weights = [p.detach().clone() for p in model.parameters()]
    gathered = [torch.zeros_like(weights[0]) for _ in range(2)]
    dist.all_gather(gathered, weights[0])
    assert torch.equal(gathered[0], gathered[1])  # DDP kept the replicas in sync
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_pytorch_ddp_over_gloo_with_two_workers(runner, tmp_path):
    pytest.importorskip("torch")
    root = tmp_path / "ckpt"
    job = DLCJob(image="local", type="pytorch", roles={"worker": 2},
                 checkpoint={"uri": f"file://{root}"}, command=script(DDP_TRAIN))
    runner.submit(job, "ddp", labels())
    status = wait(runner, "ddp", timeout=300)
    assert status.state == JobState.SUCCEEDED, status.message
    out = runner.outputs("ddp")
    assert out["metrics"]["allreduce"] == 3.0
    assert out["metrics"]["loss"] < 1.0
    assert (root / "step-000020" / "model.pt").exists()


# -- code source and submit failures ------------------------------------------------------


def test_code_source_is_cloned_into_the_job_folder(runner, tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "hello.txt").write_text("v1")
    subprocess.run([*git, "add", "hello.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "v1"], check=True)
    v1 = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (repo / "hello.txt").write_text("v2")
    subprocess.run([*git, "commit", "-qam", "v2"], check=True)
    job = DLCJob(image="local", code={"repo": str(repo), "revision": v1, "mount_path": "/workspace/code"},
                 working_dir="/workspace/code",
                 command=[PY, "-c", "import sys; print(open(sys.argv[1]).read())", "/workspace/code/hello.txt"])
    runner.submit(job, "with-code", labels())
    assert wait(runner, "with-code").state == JobState.SUCCEEDED
    assert runner.read_logs("with-code")[0] == [("worker-0", "v1")]  # the pinned revision

    bad = job.model_copy(update={"code": job.code.model_copy(update={"revision": "no-such-rev"})})
    runner.submit(bad, "bad-code", labels("task-b"))
    status = wait(runner, "bad-code")
    assert (status.state, status.reason) == (JobState.FAILED, "CodeSourceFailed")
    assert "no-such-rev" in status.message


def test_a_supervisor_that_cannot_start_leaves_a_failed_job(runner):
    runner.python = "/nonexistent/python3"
    job = DLCJob(image="local", command=[PY, "-c", "pass"])
    with pytest.raises(LocalJobError, match="cannot start the local supervisor"):
        runner.submit(job, "no-python", labels())
    status = runner.status("no-python")
    assert (status.state, status.reason) == (JobState.FAILED, "SupervisorStartFailed")
    assert runner.submit(job, "no-python", labels()) is False  # the retry finds the failed job


def test_reserved_name(runner):
    with pytest.raises(ValueError, match="reserved"):
        runner.submit(DLCJob(image="local", command=[PY, "-c", "pass"]), "volumes", labels())
