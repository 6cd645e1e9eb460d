"""Notifications on a job's state changes through real Airflow (dag.test, sync and deferred, on
the local backend): a notifier that writes to a file, and the smtp provider's SmtpNotifier
talking to a real SMTP server (aiosmtpd on 127.0.0.1). Refusals at parse time."""

from __future__ import annotations

import json
import socket
import sys
import uuid

import pytest

DAG = '''
import sys
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator
from tests.support.notifiers import FileNotifier
{extra_import}

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    DLCJobOperator(task_id="train", job={job!r}, backend="local", local_root={root!r},
                   deferrable={deferrable!r}, notify={notify}, **{kwargs!r})
'''

# fails once with a retryable code, then succeeds: running, restarting, succeeded (slowly enough
# for a deferred task's trigger to see each state)
FLAKY = ("import os, sys, time, pathlib; marker = pathlib.Path(os.environ['MARKER']); time.sleep(2); "
         "sys.exit(0) if marker.exists() else (marker.touch(), sys.exit(3))")


def write(dag_files, tmp_path, job, deferrable, notify, extra_import="", **kwargs):
    dag_id = f"n_{uuid.uuid4().hex[:8]}"
    return dag_files(dag_id, DAG.format(dag_id=dag_id, job=job, root=str(tmp_path / "jobs"), deferrable=deferrable,
                                        notify=notify, extra_import=extra_import, kwargs=kwargs))


def notes(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_running_restarting_succeeded(dag_files, tmp_path, deferrable):
    out = tmp_path / "notes.jsonl"
    job = {"type": "custom", "image": "local", "roles": {"main": 1}, "env": {"MARKER": str(tmp_path / "marker")},
           "command": [sys.executable, "-c", FLAKY], "fault_tolerance": {"max_restarts": 2}}
    dag = write(dag_files, tmp_path, job, deferrable, f"[FileNotifier({str(out)!r}, text='{{{{ job }}}} is {{{{ event }}}}')]")
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success"
    got = notes(out)
    assert [n["event"] for n in got] == ["running", "restarting", "succeeded"], got
    restart = got[1]
    assert restart["state"] == "RESTARTING" and "exited with code 3" in restart["message"] and restart["restarts"] == 1
    assert all(n["dag_id"] == dag.dag_id and n["task_id"] == "train" and n["job"].startswith("train-") for n in got)
    assert got[-1]["text"] == f"{got[-1]['job']} is succeeded"  # each notification renders its templates anew
    assert got[0]["text"] == f"{got[0]['job']} is running"
    assert got[-1]["link"].endswith(f"/dlc/jobs/{dag.dag_id}/{got[-1]['run_id']}/train".replace(":", "%3A")
                                    .replace("+", "%2B"))


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_failures_say_why(dag_files, tmp_path, deferrable):
    out = tmp_path / "notes.jsonl"
    job = {"type": "custom", "image": "local", "roles": {"main": 1},
           "command": [sys.executable, "-c", "import sys; sys.exit(7)"]}
    ti = write(dag_files, tmp_path, job, deferrable, f"[FileNotifier({str(out)!r})]").test().get_task_instance("train")
    assert ti.state == "failed"
    got = notes(out)
    assert [n["event"] for n in got][-1] == "failed" and "code 7" in got[-1]["message"], got
    # a timeout is a failure too, with its own reason
    out.unlink()
    sleeper = {**job, "command": [sys.executable, "-c", "import time; time.sleep(60)"]}
    ti = write(dag_files, tmp_path, sleeper, deferrable, f"[FileNotifier({str(out)!r})]",
               timeout=3).test().get_task_instance("train")
    got = notes(out)
    assert ti.state == "failed" and [n["event"] for n in got] == ["running", "failed"], got
    assert "did not finish within timeout (3s)" in got[-1]["message"]


@pytest.fixture
def smtp_server(monkeypatch):
    """A real SMTP server on 127.0.0.1 (aiosmtpd), and the smtp_default connection to it."""
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    received = []

    class Keep(Message):
        def handle_message(self, message):
            received.append(message)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    controller = Controller(Keep(), hostname="127.0.0.1", port=port)
    controller.start()
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_DEFAULT", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": port,
        "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "airflow@example.com"}}))
    yield received
    controller.stop()


@pytest.mark.airflow
def test_the_smtp_notifier_mails_each_state_change(dag_files, tmp_path, smtp_server):
    # Runs 2 s so its RUNNING state is seen (a job that ends between two looks goes PENDING -> SUCCEEDED).
    job = {"type": "custom", "image": "local", "roles": {"main": 1},
           "command": [sys.executable, "-c", "import time; time.sleep(2); print(1)"]}
    notify = ("[SmtpNotifier(to='ml-team@example.com', subject='DLC {{ job }} {{ event }}', "
              "html_content='<p>{{ summary }}</p><a href=\"{{ link }}\">report</a>')]")
    dag = write(dag_files, tmp_path, job, True, notify,
                extra_import="from airflow.providers.smtp.notifications.smtp import SmtpNotifier")
    assert dag.test().get_task_instance("train").state == "success"
    subjects = [m["Subject"] for m in smtp_server]
    assert len(subjects) == 2 and subjects[0].endswith(" running") and subjects[1].endswith(" succeeded"), subjects
    assert all(m["To"] == "ml-team@example.com" for m in smtp_server)
    body = smtp_server[1].get_payload()[0].get_payload(decode=True).decode()
    assert "SUCCEEDED" in body and "/dlc/jobs/" in body


def test_a_notifier_that_cannot_travel_is_refused_at_parse_time():
    from airflow.sdk import BaseNotifier
    from dlc_airflow.operators import DLCJobOperator

    from dlc_airflow.arguments import ArgumentError

    class Local(BaseNotifier):  # defined here: not importable by the triggerer
        def __init__(self, where: str) -> None:
            super().__init__()
            self.where = where

        def notify(self, context) -> None:
            pass

    job = {"type": "custom", "image": "local", "roles": {"main": 1}, "command": ["true"]}
    with pytest.raises(ArgumentError, match=r"train: notify\[0\]: .*Local cannot be rebuilt.*a module the workers and the triggerer can import"):
        DLCJobOperator(task_id="train", job=job, backend="local", notify=[Local("x")])
    with pytest.raises(ArgumentError, match=r"train: notify\[0\]: 'mail me' is not an Airflow notifier"):
        DLCJobOperator(task_id="train", job=job, backend="local", notify=["mail me"])
