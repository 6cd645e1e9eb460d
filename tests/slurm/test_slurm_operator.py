"""DLCJobOperator with backend="slurm" on the real local Slurm, through Airflow (dag.test):
a DAG unchanged but for backend= and conn_id=, sync and deferred; a failure with its exit
code; the task's timeout; bad connection inputs, each with one clear
line and nothing left queued; and the JWT nowhere but in the request headers."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tests.airflow.test_operator_dagtest import xcom
from tests.support.slurm import wait_for

pytestmark = pytest.mark.airflow

REPORT = textwrap.dedent("""
    import os, time
    from dlc_airflow.runtime import log_metrics, report_output, shard
    index, count = shard()
    print(f"shard {index} of {count} on {os.environ['SLURMD_NODENAME']}", flush=True)
    log_metrics(step=1, loss=0.5 - index / 10)
    report_output("where", os.environ["DLC_ROLE"] + "-" + str(index))
    time.sleep(float(os.environ.get("HOLD", "0")))
""")


def batch_job(**changes) -> dict:
    job = {"type": "batch", "image": "registry.example.com/unused:1", "roles": {"worker": 2},
           "command": [sys.executable, "-c", REPORT]}
    job.update(changes)
    return job


def ours(slurm, dag_id: str) -> list:
    """Every Slurm job a run of `dag_id` made (the dag id is in the job's comment)."""
    return [r for r in slurm.jobs() if f'"dag-id":"{dag_id}"' in r.comment]


@pytest.mark.slurm_shapes
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_dag_runs_on_slurm_and_reports_into_xcom(dag_files, slurm, slurm_conn, job_root, deferrable, capfd):
    dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, job=batch_job(env={"HOLD": "2"}),
                                 deferrable=deferrable)
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    result = xcom(ti)
    assert result["backend"] == "slurm" and result["state"] == "SUCCEEDED" and result["namespace"] == "debug"
    assert result["roles"]["worker"] == {"replicas": 2, "active": 0, "succeeded": 2, "failed": 0}
    assert result["metrics"] == {"step": 1, "loss": 0.5} and result["outputs"] == {"where": "worker-0"}
    (job,) = ours(slurm, dag.dag_id)
    assert job.state == "COMPLETED" and str(job.job_id) == result["uid"] and job.name == result["job_name"]
    assert "[worker-1] shard 1 of 2 on dlc" in text
    if deferrable:
        assert "waiting on job" in text  # the trigger ran (dag.test runs it inline)
    # the JWT is in no log line, no XCom, no file of the job's folder
    token = Path(slurm.token_file).read_text().strip()
    assert token not in text and token not in json.dumps(result)
    for path in (Path(job_root) / result["job_name"]).rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path


@pytest.mark.slurm_shapes
def test_failure_fails_the_task_with_the_exit_code(dag_files, slurm, slurm_conn, capfd):
    failing = "import os, sys; print('about to fail', flush=True); sys.exit(3 if os.environ['SHARD_INDEX'] == '1' else 0)"
    dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, deferrable=False,
                                 job=batch_job(command=[sys.executable, "-c", failing]))
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    assert "exit code 3" in text and "worker-1 exited with code 3" in text, text[-2000:]
    assert "[worker-1] about to fail" in text
    (job,) = ours(slurm, dag.dag_id)
    assert job.state == "FAILED" and job.exit_code == 3


def test_task_timeout_cancels_the_job(dag_files, slurm, slurm_conn, capfd):
    dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, deferrable=False, timeout=4,
                                 job=batch_job(env={"HOLD": "300"}))
    started = time.monotonic()
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed" and time.monotonic() - started < 60
    assert "did not finish within timeout" in text
    (job,) = ours(slurm, dag.dag_id)
    wait_for(lambda: ours(slurm, dag.dag_id)[0].state == "CANCELLED", 30, "the job to be cancelled")



@pytest.mark.slurm_shapes
def test_queue_timeout_fails_with_slurms_pending_reason(dag_files, slurm, runner, slurm_conn, capfd):
    """A job that cannot start (its node is taken whole by another job) fails the task after
    queue_timeout with Slurm's pending reason, and is cancelled."""
    from dlc_airflow.naming import TaskIdentity, job_name
    from dlc_airflow.spec import DLCJob

    whole_node = {"scheduling": {"include_nodes": ["dlc4"]}, "resources": {"cpu": 8}}
    blocker = DLCJob(type="custom", image="unused", roles={"main": 1}, shell="sleep 120", **whole_node)
    identity = TaskIdentity("slurm_queue", "blocker", f"run-{uuid.uuid4().hex[:6]}")
    blocking, _ = runner.submit(blocker, job_name("blocker", identity, 1), identity, 1)
    try:
        dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, deferrable=False, queue_timeout=6,
                                     job=batch_job(roles={"worker": 1}, **whole_node))
        ti = dag.test().get_task_instance("train")
        text = "".join(capfd.readouterr())
        assert ti.state == "failed"
        assert "was not scheduled within queue_timeout (6s): pending in partition debug: " in text, text[-2000:]
        wait_for(lambda: ours(slurm, dag.dag_id)[0].state == "CANCELLED", 30, "the queued job to be cancelled")
    finally:
        runner.stop(blocking)

def bad_connection(monkeypatch, slurm, job_root, **fields) -> str:
    conn = json.loads(slurm.connection(job_root))
    for key, value in fields.items():
        if key in ("host", "login", "password"):
            conn[key] = value
        elif value is None:
            conn["extra"].pop(key, None)
        else:
            conn["extra"][key] = value
    conn_id = f"bad_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


def forged_jwt(user: str) -> str:
    """A well-formed JWT for the right user, signed with another key."""
    import base64

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part({'exp': int(time.time()) + 3600, 'sun': user})}.c2lnbmF0dXJl"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


BAD_INPUTS = {
    "wrong-token": (lambda slurm: {"password": forged_jwt(slurm.user), "token_file": None},
                    ["refused the credentials of user", "scontrol token username="]),
    "not-a-token": (lambda slurm: {"password": "not-a-jwt", "token_file": None},
                    ["refused the credentials", "the token is not a JWT"]),
    "unreachable-url": (lambda slurm: {"host": f"http://127.0.0.1:{free_port()}"},
                        ["cannot reach slurmrestd at http://127.0.0.1:", "Connection refused"]),
}


@pytest.mark.parametrize("case", [*BAD_INPUTS, "unknown-partition"])
def test_bad_inputs_fail_with_one_clear_line_and_nothing_queued(case, dag_files, slurm, job_root, monkeypatch, capfd):
    job = batch_job()
    if case == "unknown-partition":
        conn_id = bad_connection(monkeypatch, slurm, job_root)
        job["scheduling"] = {"queue": "nope"}
        expected = ["Invalid partition name specified", "partition 'nope' (scheduling.queue) does not exist"]
    else:
        fields, expected = BAD_INPUTS[case]
        conn_id = bad_connection(monkeypatch, slurm, job_root, **fields(slurm))
    dag = dag_files.operator_dag(backend="slurm", conn_id=conn_id, deferrable=False, job=job)
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    line = next((ln for ln in text.splitlines() if all(e in ln for e in expected)), None)
    assert line is not None, f"no line with {expected} in:\n{text[-3000:]}"
    assert ours(slurm, dag.dag_id) == []  # nothing left queued (nor anything else)
    assert "not-a-jwt" not in text and forged_jwt(slurm.user).split(".")[2] not in line


# the values' digests, not the values: the job's command travels with it (spec.json) and must
# hold no value the test looks for
SECRET_REPORT = textwrap.dedent(f"""
    import hashlib, os
    from dlc_airflow.runtime import report_output
    digest = lambda name: hashlib.sha256(os.environ[name].encode()).hexdigest()
    print("token is", os.environ["HF_TOKEN"], "and key is", os.environ["API_KEY"], flush=True)
    report_output("token_ok", digest("HF_TOKEN") == "{hashlib.sha256(b'hf_SlurmSecret42').hexdigest()}"
                  and digest("API_KEY") == "{hashlib.sha256(b'key-Literal-77').hexdigest()}")
""")


def test_secret_env_values_reach_the_job_and_nothing_else(dag_files, slurm, slurm_conn, job_root, monkeypatch, capfd):
    """An Airflow Variable and a secret-looking literal: in the job's env, masked in the task log,
    *** in the job folder's logs, in no file of the folder and not in XCom."""
    monkeypatch.setenv("AIRFLOW_VAR_HF_TOKEN_SLURM", "hf_SlurmSecret42")
    job = batch_job(roles={"worker": 1}, command=[sys.executable, "-c", SECRET_REPORT],
                    env={"HF_TOKEN": {"airflow_variable": "hf_token_slurm"}, "API_KEY": "key-Literal-77"})
    dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, deferrable=False, job=job)
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    result = xcom(ti)
    assert result["outputs"] == {"token_ok": True}  # the job had both values
    for value in ("hf_SlurmSecret42", "key-Literal-77"):
        assert value not in text and value not in json.dumps(result)
        for path in (Path(job_root) / result["job_name"]).rglob("*"):
            if path.is_file():
                assert value not in path.read_text(errors="replace"), path
    log = (Path(job_root) / result["job_name"] / "logs" / "worker-0.log").read_text()
    assert log.startswith("token is *** and key is ***")


SENSOR_DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator
from dlc_airflow.sensors import DLCJobSensor

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    DLCJobOperator(task_id="train", backend="slurm", conn_id={conn!r}, wait_for_completion=False,
                   job={job!r}) >> DLCJobSensor(task_id="watch", task_id_of_job="train", conn_id={conn!r},
                                                poke_interval=1, deferrable={deferrable!r})
'''


@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferred"])
def test_sensor_waits_on_a_slurm_job(dag_files, slurm_conn, deferrable):
    dag_id = f"sense_{uuid.uuid4().hex[:8]}"
    dag = dag_files(dag_id, SENSOR_DAG.format(dag_id=dag_id, conn=slurm_conn, deferrable=deferrable,
                                              job=batch_job(env={"HOLD": "3"})))
    run = dag.test()
    assert run.get_task_instance("train").state == "success"
    watch = run.get_task_instance("watch")
    assert watch.state == "success"
    result = xcom(watch)
    assert result["backend"] == "slurm" and result["state"] == "SUCCEEDED" and result["metrics"]["loss"] == 0.5


def test_no_secret_value_in_the_jobs_state_or_its_environment_at_submit(slurm, runner, job_root, monkeypatch):
    """The values travel in a 0600 file of the job's folder, not in the request: the request
    body, `scontrol show job -d`, the environment slurmctld saved for the job and the batch
    script's own environment hold none; the file goes when the job ends."""
    import os
    import re
    import stat

    from dlc_airflow.naming import TaskIdentity, job_name
    from dlc_airflow.slurm.backend import SECRETS_FILE
    from dlc_airflow.spec import DLCJob
    from dlc_airflow.status import JobState

    values = ("hf_StateSecret99", "key-State-88")
    monkeypatch.setenv("AIRFLOW_VAR_HF_TOKEN_STATE", values[0])
    job = DLCJob.model_validate(batch_job(roles={"worker": 1}, command=[sys.executable, "-c", SECRET_CHECK],
                                          env={"HF_TOKEN": {"airflow_variable": "hf_token_state"}, "API_KEY": values[1]}))
    sent = []
    submit = runner.rest.submit
    monkeypatch.setattr(runner.rest, "submit", lambda request: sent.append(request) or submit(request))
    identity = TaskIdentity("slurm_tests", "state", f"run-{uuid.uuid4().hex[:6]}")
    ref, _ = runner.submit(job, job_name("state", identity, 1), identity, 1)
    secrets = Path(job_root) / ref.name / SECRETS_FILE
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    wait_for(lambda: runner.status(ref).state is JobState.RUNNING, 60, "the job to run")

    def scontrol(*args: str) -> str:
        return slurm.scontrol(*args).stdout

    shown = scontrol("show", "job", "-d", ref.uid)
    state_dir = re.search(r"StateSaveLocation\s*=\s*(\S+)", scontrol("show", "config")).group(1)
    saved = list(Path(state_dir).glob(f"hash.*/job.{ref.uid}/environment"))
    batch_env = b""
    for line in scontrol("listpids", ref.uid).splitlines()[1:]:
        pid, _, step = (line.split() + ["", "", ""])[:3]
        if step == "batch" and Path(f"/proc/{pid}/environ").exists():
            batch_env += Path(f"/proc/{pid}/environ").read_bytes()
    assert saved and batch_env, (saved, shown)  # (this host runs the local Slurm: its state is readable here)
    for value in values:
        assert value not in repr(sent[0]) and value not in shown, value
        assert value.encode() not in saved[0].read_bytes() and value.encode() not in batch_env, value
    assert f"DLC_SLURM_SECRETS={secrets}".encode() in saved[0].read_bytes()  # a path, not a value
    done = wait_for(lambda: (s := runner.status(ref)).terminal and s, 120, "the job to end")
    assert done.state is JobState.SUCCEEDED, done.summary()
    assert runner.outputs(ref)["outputs"] == {"token_ok": True}  # the replica had both values
    assert not secrets.exists() and not any(os.fspath(p).endswith(".tmp") for p in secrets.parent.iterdir())


SECRET_CHECK = textwrap.dedent(f"""
    import hashlib, os, time
    from dlc_airflow.runtime import report_output
    time.sleep(4)
    digest = lambda name: hashlib.sha256(os.environ[name].encode()).hexdigest()
    report_output("token_ok", digest("HF_TOKEN") == "{hashlib.sha256(b'hf_StateSecret99').hexdigest()}"
                  and digest("API_KEY") == "{hashlib.sha256(b'key-State-88').hexdigest()}")
""")


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_progress_and_eta_on_slurm(dag_files, slurm, slurm_conn, deferrable, capfd):
    """The job's log_progress lines, read from its Slurm job folder: progress and ETA in the task
    log on change only (the worker's wait and the trigger's), the last progress in the XCom."""
    from tests.airflow.test_progress_dagtest import PROGRESS, STEPS, TRAIN

    # the job imports dlc_airflow.runtime from this checkout (Slurm does not pass the test's PYTHONPATH)
    here = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
    dag = dag_files.operator_dag(backend="slurm", conn_id=slurm_conn, deferrable=deferrable,
                                 job=batch_job(command=[sys.executable, "-c", here + TRAIN]))
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    assert xcom(ti)["progress"] == {"current": STEPS, "total": STEPS, "unit": "steps", "percent": 100.0,
                                    "eta_seconds": 0}
    said = [(int(m[1]), m[3]) for m in PROGRESS.finditer(text)]
    assert 2 <= len(said) <= 12 and said[-1] == (STEPS, "0s"), said
    assert any(eta.endswith("s") and eta[:-1].isdigit() and current < STEPS for current, eta in said), said
