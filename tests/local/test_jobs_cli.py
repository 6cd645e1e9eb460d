"""`dlc-airflow jobs` on the local backend: list, describe, logs, stop, delete, clone, script,
on real local jobs (detached supervisors and processes), and its refusals: one line each,
nothing submitted. tests/cluster/test_jobs_cli.py runs the same commands on the control plane."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dlc_airflow.cli import main
from dlc_airflow.local.runner import LocalRunner
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

METRICS = ("import json, os; print('DLC_METRICS ' + json.dumps({'step': 1, 'loss': 0.5})); "
           "print('rank', os.environ['SHARD_INDEX'])")


@pytest.fixture
def jobs(tmp_path):
    """A local job root with a finished 2-replica job and a long-running one."""
    root = tmp_path / "jobs"
    runner = LocalRunner(str(root))
    done = DLCJob(type="batch", image="local", roles={"worker": 2}, env={"API_TOKEN": "s3cr3t-value"},
                  command=[sys.executable, "-c", METRICS])
    ref, _ = runner.submit(done, "prep-a1b2c3-1", TaskIdentity("retrain", "grp.prep", "manual__1"), 1)
    sleeper = DLCJob(type="custom", image="local", roles={"main": 1},
                     command=[sys.executable, "-c", "import time; time.sleep(120)"])
    long_ref, _ = runner.submit(sleeper, "sleep-d4e5f6-1", TaskIdentity("retrain", "grp.train", "manual__2"), 1)
    deadline = time.monotonic() + 30
    while not runner.status(ref).terminal or runner.status(long_ref).state is not JobState.RUNNING:
        assert time.monotonic() < deadline, (runner.status(ref).summary(), runner.status(long_ref).summary())
        time.sleep(0.1)
    yield runner, root
    for info in runner.jobs():
        runner.stop(info.ref)


def cli(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["jobs", *args, "--backend", "local", "--local-root", str(root)])
    except SystemExit as exc:  # argparse refusals
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_job_with_its_task_and_state(jobs, capsys):
    runner, root = jobs
    code, out, _ = cli(capsys, root, "list")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "BACKEND", "NAMESPACE", "STATE", "RESTARTS", "DAG", "TASK", "RUN", "CREATED"]
    assert any(r.split()[:4] == ["prep-a1b2c3-1", "local", str(root), "SUCCEEDED"] for r in rows), out
    assert any(r.split()[:4] == ["sleep-d4e5f6-1", "local", str(root), "RUNNING"] for r in rows), out
    code, out, _ = cli(capsys, root, "list", "--task", "grp.train", "-o", "json")
    listed = json.loads(out)
    assert [j["name"] for j in listed] == ["sleep-d4e5f6-1"] and listed[0]["run"] == "manual__2"
    code, out, _ = cli(capsys, root, "list", "--state", "succeeded", "-o", "yaml")
    assert [j["name"] for j in yaml.safe_load(out)] == ["prep-a1b2c3-1"]


def test_describe_has_roles_replicas_and_timeline(jobs, capsys):
    _, root = jobs
    code, out, _ = cli(capsys, root, "describe", "prep-a1b2c3-1", "-o", "json")
    data = json.loads(out)
    assert (data["state"], data["dag"], data["task"], data["roles"]["worker"]["succeeded"]) == \
        ("SUCCEEDED", "retrain", "grp.prep", 2)
    assert data["uid"] and data["timeline"]["started"] and data["timeline"]["finished"]
    replicas = {r["replica"]: r for r in data["replicas"]}
    assert set(replicas) == {"worker-0", "worker-1"}
    assert all(r["state"] == "Succeeded" and r["exit_code"] == 0 and r["started"] <= r["finished"]
               for r in replicas.values())
    code, text, _ = cli(capsys, root, "describe", "prep-a1b2c3-1")
    assert "replicas:" in text and "worker-1  Succeeded" in text


def test_logs_of_one_replica(jobs, capsys):
    _, root = jobs
    code, out, _ = cli(capsys, root, "logs", "prep-a1b2c3-1", "--role", "worker", "--replica", "1")
    assert code == 0 and "[worker-1] rank 1" in out and "[worker-0]" not in out
    code, out, _ = cli(capsys, root, "logs", "prep-a1b2c3-1")
    assert "[worker-0] rank 0" in out and "[worker-1] rank 1" in out


def test_stop_then_delete(jobs, capsys):
    runner, root = jobs
    code, _, err = cli(capsys, root, "stop", "sleep-d4e5f6-1")
    assert code == 0 and "stopped job sleep-d4e5f6-1" in err
    deadline = time.monotonic() + 30
    while not runner.status(runner.lookup("sleep-d4e5f6-1")).terminal:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert runner.status(runner.lookup("sleep-d4e5f6-1")).state is JobState.STOPPED
    code, _, err = cli(capsys, root, "delete", "sleep-d4e5f6-1")
    assert code == 0 and not (root / "sleep-d4e5f6-1").exists()


def test_script_prints_the_spec_without_secret_values_and_a_dag_that_parses(jobs, capsys, tmp_path):
    _, root = jobs
    code, out, _ = cli(capsys, root, "script", "prep-a1b2c3-1")
    spec = yaml.safe_load(out)
    assert spec["roles"] == {"worker": {"replicas": 2}} and spec["env"] == {"API_TOKEN": "<hidden>"}
    assert "s3cr3t-value" not in out
    code, out, _ = cli(capsys, root, "script", "prep-a1b2c3-1", "--as", "dag")
    dag_file = tmp_path / "reproduce.py"
    dag_file.write_text(out)
    parsed = subprocess.run([sys.executable, "-c", f"import runpy; g = runpy.run_path({str(dag_file)!r}); "
                             "print(g['JOB']['type'])"], capture_output=True, text=True, timeout=120)
    assert parsed.returncode == 0 and parsed.stdout.strip() == "batch", parsed.stderr[-2000:]
    assert 'DLCJobOperator(task_id="prep", job=JOB, backend="local"' in out and 'DAG("retrain"' in out


def test_clone_submits_the_spec_again_with_changes(jobs, capsys):
    runner, root = jobs
    code, _, err = cli(capsys, root, "clone", "prep-a1b2c3-1")
    assert code == 2 and "env.API_TOKEN: a secret value was not kept with the job" in err
    before = {i.ref.name for i in runner.jobs()}
    assert len(before) == 2  # refused: nothing submitted
    code, out, err = cli(capsys, root, "clone", "prep-a1b2c3-1", "--set", "env.API_TOKEN=another",
                         "--set", "roles.worker=3", "-o", "json")
    assert code == 0, err
    new = json.loads(out)["name"]
    assert new.startswith("prep-") and new not in before
    ref = runner.lookup(new)
    deadline = time.monotonic() + 30
    while not runner.status(ref).terminal:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    status = runner.status(ref)
    assert status.state is JobState.SUCCEEDED and status.roles["worker"].succeeded == 3
    (info,) = [i for i in runner.jobs() if i.ref.name == new]
    assert info.dag_id == ""  # made outside Airflow


@pytest.mark.parametrize("args,words", [
    (["describe", "no-such-job"], ["no job 'no-such-job'", "dlc-airflow jobs list"]),
    (["clone", "prep-a1b2c3-1", "--set", "resources.gpu"], ["--set 'resources.gpu'", "field=value"]),
    (["clone", "prep-a1b2c3-1", "--set", "env.API_TOKEN=x", "--set", "roles.worker=many"],
     ["roles.worker", "whole number"]),
    (["clone", "prep-a1b2c3-1", "--set", "env.API_TOKEN=x", "--set", "command=[oops"],
     ["--set command", "is not a value"]),
])
def test_refusals_are_one_line_and_submit_nothing(jobs, capsys, args, words):
    runner, root = jobs
    before = {i.ref.name for i in runner.jobs()}
    code, out, err = cli(capsys, root, *args)
    assert code == 2, (out, err)
    line = err.strip()
    assert "\n" not in line and "Traceback" not in line and all(w in line for w in words), line
    assert {i.ref.name for i in runner.jobs()} == before


def test_the_entry_point_and_an_unknown_backend(jobs):
    _, root = jobs
    script = Path(sys.executable).with_name("dlc-airflow")
    done = subprocess.run([str(script), "jobs", "list", "--backend", "Local", "--local-root", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "\n" not in done.stderr.strip() and "local" in done.stderr, done.stderr
    done = subprocess.run([str(script), "jobs", "list", "--backend", "local", "--local-root", str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "prep-a1b2c3-1" in done.stdout
