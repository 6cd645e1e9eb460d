"""The local control plane's helper scripts, their pure parts: scripts/k8s-webhooks.py (upstream
webhook configurations pointed at 127.0.0.1). tests/cluster/test_controllers.py runs it for real."""

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

