"""Tokens that expire, on the real local Slurm: slurmctld refuses a JWT past its `exp`.

- A token file an admin's job rotates (a new JWT of short lifespan, renamed into place, well
  before the old one expires) carries a wait several lifespans long to its end: the client
  reads the file again whenever it changes.
- A token nobody rotates ends the wait with one clear line that names the connection and
  says the JWT expired, and the task is not retried (the connection is what must change).
  A token file first gets the connection's token_grace to be rotated; a token in the
  password fails at once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from dlc_airflow.slurm.settings import token_claims

pytestmark = pytest.mark.airflow

LIFESPAN = 6  # seconds: slurmctld refuses the token after this


def mint(slurm, lifespan: int) -> str:
    """A new JWT for the test user, from slurmctld (scontrol token)."""
    done = slurm.scontrol("token", f"username={slurm.user}", f"lifespan={lifespan}", check=False)
    assert done.returncode == 0 and "SLURM_JWT=" in done.stdout, f"cannot mint a token: {done.stderr.strip()}"
    return done.stdout.strip().removeprefix("SLURM_JWT=")


def write_token(path: Path, token: str) -> None:
    """As a rotating cron job would: a new file renamed over the old one."""
    fresh = path.with_suffix(".new")
    fresh.write_text(token + "\n")
    os.chmod(fresh, 0o600)
    fresh.rename(path)


def connection(slurm, job_root, monkeypatch, **extra) -> str:
    conn_id = f"slurm_tok_{uuid.uuid4().hex[:6]}"
    value = json.loads(slurm.connection(job_root, **extra))
    if "password" in value["extra"]:
        value["password"] = value["extra"].pop("password")
        value["extra"].pop("token_file")
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(value))
    return conn_id


def holding_job(seconds: int) -> dict:
    script = f"import time; print('holding', flush=True); time.sleep({seconds}); print('done holding', flush=True)"
    return {"type": "custom", "image": "registry.example.com/unused:1", "roles": {"main": 1},
            "command": [sys.executable, "-c", script]}


def test_a_wait_longer_than_the_tokens_lifespan_completes_with_a_rotated_token_file(
        dag_files, slurm, job_root, monkeypatch, tmp_path, capfd):
    token_file = tmp_path / "slurm.jwt"
    write_token(token_file, mint(slurm, LIFESPAN))
    first_expiry = token_claims(token_file.read_text())["exp"]
    rotations = []
    stop = threading.Event()

    def rotate() -> None:  # the admin's cron job: a fresh token every third of a lifespan
        while not stop.wait(LIFESPAN / 3):
            write_token(token_file, mint(slurm, LIFESPAN))
            rotations.append(time.time())

    rotator = threading.Thread(target=rotate, daemon=True)
    rotator.start()
    conn_id = connection(slurm, job_root, monkeypatch, token_file=str(token_file))
    dag = dag_files.operator_dag(backend="slurm", conn_id=conn_id, deferrable=True, job=holding_job(3 * LIFESPAN))
    try:
        ti = dag.test().get_task_instance("train")
    finally:
        stop.set()
        rotator.join(30)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    assert "[main-0] done holding" in text
    assert time.time() > first_expiry + LIFESPAN  # the wait outlived the first token, and the next
    assert len(rotations) >= 6, rotations
    assert "refused the credentials" not in text  # the rotation came before any token expired


@pytest.mark.parametrize("where", ["token_file", "password"])
def test_an_expired_token_fails_the_task_once_with_a_line_naming_the_connection(
        where, dag_files, slurm, job_root, monkeypatch, tmp_path, capfd):
    token = mint(slurm, LIFESPAN)
    if where == "token_file":
        token_file = tmp_path / "slurm.jwt"
        write_token(token_file, token)
        conn_id = connection(slurm, job_root, monkeypatch, token_file=str(token_file), token_grace=4)
    else:
        conn_id = connection(slurm, job_root, monkeypatch, password=token)
    dag = dag_files.operator_dag(backend="slurm", conn_id=conn_id, deferrable=True, retries=2,
                                 job=holding_job(300))
    started = time.monotonic()
    ti = dag.test().get_task_instance("train")
    took, ended = time.monotonic() - started, time.time()
    text = "".join(capfd.readouterr())
    assert ti.state == "failed", text[-3000:]
    assert ti.try_number == 1 and took < 120, (ti.try_number, took)  # no retry, no wait for the job's 300 s
    errors = [line for line in text.splitlines() if "refused the credentials" in line and "the JWT expired at" in line]
    assert errors, text[-3000:]
    assert f"(connection {conn_id!r})" in errors[-1] and "may still be running" in errors[-1]
    if where == "token_file":  # the file had token_grace to be rotated before the wait gave up
        assert ended - token_claims(token)["exp"] >= 4
    assert token not in text
    # the job itself goes on (the credentials could not stop it): cancel it with a valid token
    jobs = [r for r in slurm.jobs() if f'"dag-id":"{dag.dag_id}"' in r.comment]
    assert len(jobs) == 1 and jobs[0].state in ("PENDING", "RUNNING"), jobs
    slurm.client().cancel(jobs[0].job_id)
