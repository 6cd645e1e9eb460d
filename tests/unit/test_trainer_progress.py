"""Kubeflow Trainer v2.3's TrainJobStatus: status.trainerStatus read as progress, and the runtime's
reports to the Trainer's status server.

The status server is the Trainer controller's (pkg/statusserver), which cannot run here without
the controller's feature gate, its TLS setup and the cluster's token issuer: `StatusServerStandIn`
is a local HTTPS stand-in, named as such, that checks each request as the real handler and the
CRD's validation would (path, bearer token, JSON shape and limits) and answers as it does.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dlc_airflow.finish import job_result
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.runtime import metrics, trainer_status
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.support.faultproxy import _make_certs

trainer = get_backend("trainer")
NAME = "train-abc123"
STATUS_PATH = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status$")


def a_trainjob(trainer_status=None, complete=False):
    job = DLCJob(type="pytorch", image="img", command=["x"], roles={"worker": 2})
    obj = trainer.render(job, NAME)[0]
    obj["metadata"].update(namespace="team-a", creationTimestamp="2026-12-06T10:00:00Z")
    obj["status"] = {
        "conditions": ([{"type": "Complete", "status": "True", "reason": "JobsCompleted",
                         "message": "TrainJob is completed", "lastTransitionTime": "2026-12-06T10:30:00Z"}]
                       if complete else []),
        "jobsStatus": [{"name": "node", "ready": 1, "active": 1, "succeeded": 0, "failed": 0, "suspended": 0}],
    }
    if trainer_status is not None:
        obj["status"]["trainerStatus"] = trainer_status
    return obj


# as the status server applies it (toApplyConfig): what the runtime sent, and lastUpdatedTime
REPORTED = {"progressPercentage": 42, "estimatedRemainingSeconds": 318,
            "metrics": [{"name": "loss", "value": "0.412"}, {"name": "lr", "value": "0.0003"}],
            "lastUpdatedTime": "2026-12-06T10:12:30Z"}


def test_trainer_status_is_read_as_progress():
    status = trainer.status([a_trainjob(REPORTED)])
    assert status.state is JobState.RUNNING
    assert status.progress.percent == 42 and status.progress.eta_seconds == 318
    assert status.progress.updated == datetime.fromisoformat("2026-12-06T10:12:30+00:00")
    no_eta = trainer.status([a_trainjob({"progressPercentage": 7, "lastUpdatedTime": "2026-12-06T10:01:00Z"})])
    assert no_eta.progress.percent == 7 and no_eta.progress.eta_seconds is None
    assert trainer.status([a_trainjob()]).progress is None  # the gate off, or nothing reported yet
    assert trainer.status([a_trainjob({"metrics": [], "lastUpdatedTime": "2026-12-06T10:01:00Z"})]).progress is None


def test_the_result_carries_the_trainers_progress_when_the_logs_had_none():
    done = trainer.status([a_trainjob({**REPORTED, "progressPercentage": 100, "estimatedRemainingSeconds": 0},
                                      complete=True)])
    ref = JobRef(backend="trainer", place="team-a", name=NAME)
    result = job_result(ref, done, {"metrics": {}, "outputs": {}})
    assert result["progress"] == {"current": 100, "total": 100, "unit": "percent", "percent": 100.0, "eta_seconds": 0}
    with_lines = job_result(ref, done, {"metrics": {"step": 1000, "total_steps": 1000}, "outputs": {}})
    assert with_lines["progress"]["unit"] == "steps" and with_lines["progress"]["current"] == 1000


class StatusServerStandIn:
    """A local stand-in for the Trainer's status server (HTTPS, the same path, auth and body rules)."""

    def __init__(self, folder, token: str, namespace: str = "team-a", name: str = NAME, answer: int = 200):
        self.ca, cert, key = _make_certs(folder)
        self.token, self.namespace, self.name, self.answer = token, namespace, name, answer
        self.bodies: list[dict] = []
        self.problems: list[str] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                code, reply = stand_in.handle(self.path, self.headers,
                                              self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:  # as the plugin builds it: https://<service>:<port> + StatusUrl(namespace, name)
        port = self.server.server_address[1]
        return f"https://localhost:{port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/{NAME}/status"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def handle(self, path, headers, raw):
        def fail(code, reason, message):
            self.problems.append(message)
            return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                          "reason": reason, "code": code}

        match = STATUS_PATH.match(path)
        if not match:
            return fail(404, "NotFound", "Not found")
        auth = (headers.get("Authorization") or "").split()
        if len(auth) != 2 or auth[0].lower() != "bearer" or auth[1] != self.token or match.groups() != (
                self.namespace, self.name):
            return fail(403, "Forbidden", "Forbidden")
        if self.answer != 200:
            return fail(self.answer, "InternalError", "Internal error")
        if headers.get("Content-Type") != "application/json":
            return fail(415, "UnsupportedMediaType", f"content type {headers.get('Content-Type')}")
        try:
            body = json.loads(raw)
        except ValueError:
            return fail(422, "Invalid", "Invalid payload")
        problem = check_request(body)
        if problem:
            return fail(422, "Invalid", problem)
        self.bodies.append(body)
        return 200, body


def check_request(body) -> str:
    """The UpdateTrainJobStatusRequest as the handler decodes it and the TrainJob CRD validates it."""
    if not isinstance(body, dict) or set(body) != {"trainerStatus"}:
        return f"the request is {{'trainerStatus': ...}}, not {body!r}"
    status = body["trainerStatus"]
    allowed = {"progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"}
    if not isinstance(status, dict) or set(status) - allowed:
        return f"unknown fields {set(status) - allowed}"
    if "lastUpdatedTime" not in status:
        return "lastUpdatedTime is required when trainerStatus is present"
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", status["lastUpdatedTime"]):
        return f"lastUpdatedTime {status['lastUpdatedTime']!r} is not RFC 3339"
    percent = status.get("progressPercentage")
    if percent is not None and (type(percent) is not int or not 0 <= percent <= 100):
        return f"progressPercentage {percent!r}"
    remaining = status.get("estimatedRemainingSeconds")
    if remaining is not None and (type(remaining) is not int or remaining < 0 or remaining > 2**31 - 1):
        return f"estimatedRemainingSeconds {remaining!r}"
    entries = status.get("metrics", [])
    if not isinstance(entries, list) or len(entries) > 256:
        return "metrics: at most 256"
    for m in entries:
        if (not isinstance(m, dict) or set(m) != {"name", "value"}
                or not all(isinstance(m[k], str) and 1 <= len(m[k]) <= 64 for k in ("name", "value"))):
            return f"metric {m!r}"
    return ""


@pytest.fixture
def trainer_env(tmp_path, monkeypatch):
    metrics._reset_for_tests()
    trainer_status._reset_for_tests()
    token = "eyJhbGciOiJSUzI1NiJ9.secret-projected-token.sig"
    (tmp_path / "token").write_text(token + "\n")
    server = StatusServerStandIn(tmp_path, token)
    monkeypatch.setenv(trainer_status.URL_ENV, server.url)
    monkeypatch.setenv(trainer_status.TOKEN_ENV, str(tmp_path / "token"))
    monkeypatch.setenv(trainer_status.CA_ENV, server.ca)
    monkeypatch.delenv("DLC_OUTPUT_FILE", raising=False)
    monkeypatch.setattr(trainer_status, "REPORT_EVERY", 0.0)
    yield server
    server.close()
    metrics._reset_for_tests()
    trainer_status._reset_for_tests()


def test_log_progress_reports_to_the_trainers_status_server(trainer_env, capsys):
    for step in (0, 100, 200, 300):
        metrics.log_progress(step, 1000, loss=1.0 / (step + 1), note="text is not sent")
        time.sleep(0.3)  # a rate the ETA can be told from
    assert trainer_env.problems == [] and len(trainer_env.bodies) == 4
    last = trainer_env.bodies[-1]["trainerStatus"]
    assert last["progressPercentage"] == 30
    assert last["estimatedRemainingSeconds"] >= 1  # 700 steps at about 300 a second
    assert {m["name"] for m in last["metrics"]} == {"loss"}  # numbers only, progress keys left out
    assert "estimatedRemainingSeconds" not in trainer_env.bodies[0]["trainerStatus"]  # no rate yet
    metrics.log_metrics(step=5, loss=0.1)  # a line without a total is not progress: nothing sent
    assert len(trainer_env.bodies) == 4
    assert "could not report" not in capsys.readouterr().err


def test_reports_are_spaced_and_the_end_is_always_sent(trainer_env, monkeypatch):
    monkeypatch.setattr(trainer_status, "REPORT_EVERY", 3600.0)
    for step in range(0, 1001, 100):
        metrics.log_progress(step, 1000)
    assert [b["trainerStatus"]["progressPercentage"] for b in trainer_env.bodies] == [0, 100]


def test_a_refused_report_is_said_once_without_the_token_and_training_goes_on(trainer_env, capsys, monkeypatch):
    trainer_env.answer = 500
    metrics.log_progress(1, 10)
    metrics.log_progress(2, 10)
    err = capsys.readouterr().err
    assert err.count("could not report progress to the Kubeflow Trainer status server") == 1
    assert "HTTP 500: Internal error" in err and "secret-projected-token" not in err


def test_the_servers_certificate_is_checked_against_the_trainers_ca(trainer_env, capsys, monkeypatch, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    wrong_ca, _, _ = _make_certs(other)
    monkeypatch.setenv(trainer_status.CA_ENV, wrong_ca)
    metrics.log_progress(1, 10)
    assert trainer_env.bodies == [] and "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err


def test_only_the_coordinator_reports(trainer_env, monkeypatch):
    monkeypatch.setenv("DLC_JOB_NAME", NAME)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    metrics.log_progress(1, 10)
    assert trainer_env.bodies == []
    monkeypatch.setenv("RANK", "0")
    metrics.log_progress(2, 10)
    assert len(trainer_env.bodies) == 1


def test_after_a_failure_no_more_tries_and_a_token_in_the_env_is_never_echoed(trainer_env, capsys, monkeypatch,
                                                                            tmp_path):
    """A token put into the env by mistake (not a file's path) is refused without being printed;
    a server that failed once is not asked again (a slow server must not slow training)."""
    monkeypatch.setenv(trainer_status.TOKEN_ENV, "eyJ-a-token-pasted-into-the-env")
    metrics.log_progress(1, 10)
    err = capsys.readouterr().err
    assert "does not name a readable token file" in err and "eyJ-a-token-pasted" not in err
    monkeypatch.setenv(trainer_status.TOKEN_ENV, str(tmp_path / "token"))  # good again: still no tries
    for step in range(2, 11):
        metrics.log_progress(step, 10)
    assert trainer_env.bodies == []  # not even the end is sent after the failure
