"""The local control plane's helper scripts, their pure parts: scripts/k8s-webhooks.py (upstream
webhook configurations pointed at 127.0.0.1) and scripts/ray-dashboard-standin.py (the Ray head's
job API as KubeRay reads it). tests/cluster/test_controllers.py runs them for real."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), SCRIPTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


webhooks = load("k8s-webhooks")
standin = load("ray-dashboard-standin")


def hook(path: str) -> dict:
    return {"name": f"v{path}", "clientConfig": {"service": {"name": "webhook-service", "namespace": "system",
                                                             "path": path}},
            "rules": [{"operations": ["CREATE"]}], "failurePolicy": "Fail"}


UPSTREAM = [
    {"kind": "ValidatingWebhookConfiguration", "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [hook("/validate-a"), hook("/validate-pod")]},
    {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [hook("/mutate-pod")]},
    {"kind": "Service", "metadata": {"name": "webhook-service"}},
]


def test_webhooks_point_at_this_host_with_our_ca_and_only_the_served_paths():
    out = webhooks.rewrite(json.loads(json.dumps(UPSTREAM)), "ctl", 9445, "Q0E=", r"^/validate-a$")
    assert [o["metadata"]["name"] for o in out] == ["dlc-local-ctl-validating"]  # no pod hooks, no Service
    (only,) = out[0]["webhooks"]
    assert only["clientConfig"] == {"url": "https://127.0.0.1:9445/validate-a", "caBundle": "Q0E="}
    assert only["rules"] == [{"operations": ["CREATE"]}] and only["failurePolicy"] == "Fail"  # kept as upstream
    assert out[0]["metadata"]["labels"] == {"dlc-airflow.io/local-controller": "ctl"}


def test_a_webhook_configuration_can_keep_a_fixed_name():
    out = webhooks.rewrite(json.loads(json.dumps(UPSTREAM[:1])), "ctl", 1, "x", ".", name="validator.x.io")
    assert out[0]["metadata"]["name"] == "validator.x.io" and len(out[0]["webhooks"]) == 2


@pytest.mark.parametrize("text", [
    json.dumps(UPSTREAM[0]) + "\n" + json.dumps(UPSTREAM[1]),  # kubectl: objects one after another
    json.dumps({"kind": "List", "items": UPSTREAM[:2]}),
])
def test_kubectls_json_output_is_read_whole(text):
    assert [o["kind"] for o in webhooks.json_stream(text)] == ["ValidatingWebhookConfiguration",
                                                                "MutatingWebhookConfiguration"]


def pod(phase: str, created: str, exit_code: int | None = None) -> dict:
    status: dict = {"phase": phase, "startTime": "2026-12-03T10:00:00Z"}
    if exit_code is not None:
        status["containerStatuses"] = [{"state": {"terminated": {"exitCode": exit_code,
                                                                 "finishedAt": "2026-12-03T10:00:05Z"}}}]
    return {"metadata": {"creationTimestamp": created}, "spec": {"containers": [{"command": ["ray", "job"]}]},
            "status": status}


def test_the_ray_job_is_what_its_submitter_pod_did():
    assert standin.job_info(pod("Pending", "1"), "id") is None  # not submitted yet: 404
    assert standin.job_info(pod("Running", "1"), "id")["status"] == "RUNNING"
    done = standin.job_info(pod("Succeeded", "1", 0), "id")
    assert done["status"] == "SUCCEEDED" and done["end_time"] > done["start_time"] > 0
    failed = standin.job_info(pod("Failed", "1", 3), "id")
    assert failed["status"] == "FAILED" and failed["message"] == "Job entrypoint command failed with exit code 3"


def test_a_ray_job_runs_once_whatever_the_submitter_retries():
    first_failed, retry_running = pod("Failed", "2026-12-03T10:00:00Z", 3), pod("Running", "2026-12-03T10:00:09Z")
    assert standin.deciding_pod([retry_running, first_failed]) is first_failed
    assert standin.deciding_pod([retry_running]) is retry_running
    assert standin.deciding_pod([]) is None
