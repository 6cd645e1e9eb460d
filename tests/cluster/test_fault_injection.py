"""The fault-injection tools later reliability tests rely on, and the client's retries."""

from __future__ import annotations

import threading
import time

import pytest

from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.k8s.kinds import CONFIG_MAP


def config_map(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


@pytest.mark.parametrize("status", [429, 500, 503])
def test_client_retries_through_injected_errors(cluster, namespace, status):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file, backoff=0.01)
        proxy.set(error_share=0.5, error_status=status)
        for i in range(6):
            kube.create(config_map(f"cm-{i}"))
        names = {c["metadata"]["name"] for c in kube.list(CONFIG_MAP)[0]}
        assert {f"cm-{i}" for i in range(6)} <= names
        assert proxy.injected > 0


def test_errors_surface_once_retries_are_exhausted(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file, retries=2, backoff=0.01)
        proxy.set(error_share=1.0, error_status=503)
        with pytest.raises(KubeError) as exc:
            kube.list(CONFIG_MAP)
        assert exc.value.status == 503 and "ServiceUnavailable" in str(exc.value)
        assert proxy.injected == 3  # the first try and two retries


def test_dropped_connections_and_delay(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file, backoff=0.01)
        proxy.set(drop_share=0.5)
        kube.create(config_map("dropped"))
        assert proxy.dropped > 0 or proxy.requests == 1
        proxy.set(delay=0.5)
        start = time.monotonic()
        kube.get(CONFIG_MAP, "dropped")
        assert time.monotonic() - start >= 0.5


def test_drop_connections_breaks_a_running_watch(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file)
        _, rv = kube.list(CONFIG_MAP)
        outcome = {}

        def consume():
            try:
                for event in kube.watch(CONFIG_MAP, resource_version=rv, timeout_seconds=60):
                    outcome.setdefault("events", []).append(event)
            except KubeError as exc:
                outcome["error"] = exc

        watcher = threading.Thread(target=consume)
        watcher.start()
        time.sleep(1)
        assert proxy.drop_connections() >= 1
        watcher.join(10)
        assert not watcher.is_alive()
        assert "watch connection broken" in str(outcome.get("error"))


def test_apiserver_restart_in_place(cluster, namespace):
    kube = cluster.restricted(namespace, backoff=0.5, retries=10)
    kube.create(config_map("before"))
    cluster.restart_apiserver()
    # the same server, with its state, answers again
    assert kube.get(CONFIG_MAP, "before")["data"] == {"k": "v"}
    kube.create(config_map("after"))
