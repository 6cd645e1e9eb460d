"""The real node itself: a pod of the runtime image runs in a real container, pulled from the
local registry through containerd's ordinary pull path, reads its logs through the API
server (which proxies to the kubelet), resolves cluster names through CoreDNS, is held to its
memory limit by the kernel, and a missing image fails as the real kubelet says it does."""

from __future__ import annotations

import time
import uuid

import pytest

from dlc_airflow.k8s.kinds import POD
from tests.support.realnode import NODE_LABEL, NODE_TAINT, crictl


@pytest.fixture
def kube(cluster, namespace):
    """Plain pods are the cluster admin's here (dlc-airflow's Role makes jobs, not pods)."""
    return cluster.admin(namespace)


def pod(name: str, image: str, command: list[str], **container) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeSelector": NODE_LABEL, "tolerations": [NODE_TAINT],
                     "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": image, "command": command, **container}]}}


def wait_phase(kube, name: str, phases: set[str], timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        obj = kube.get(POD, name) or {}
        if obj.get("status", {}).get("phase") in phases:
            return obj
        assert time.monotonic() < deadline, f"pod {name} not {phases} after {timeout:.0f} s: {obj.get('status')}"
        time.sleep(0.5)


def wait_for(predicate, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


def test_a_pod_of_the_runtime_image_prints_from_a_real_container(kube, real_node):
    name = f"hello-{uuid.uuid4().hex[:6]}"
    script = ("import os, sys, torch, dlc_airflow.runtime; "
              "print('uid', os.getuid(), 'python', sys.version.split()[0], 'torch', torch.__version__, "
              "'pid', os.getpid(), flush=True)")
    kube.create(pod(name, real_node, ["python3", "-c", script]))
    done = wait_phase(kube, name, {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert done["spec"]["nodeName"] == "real-node"
    line = kube.read_log(name)
    # a real process: the image's user, its Python and torch, pid 1 of its own pid namespace
    assert "uid 1000 python 3.11" in line and "torch 2." in line and "pid 1\n" in line + "\n", line
    state = done["status"]["containerStatuses"][0]
    assert state["imageID"].startswith("registry.local/dlc-airflow/runtime@sha256:") or "sha256:" in state["imageID"]
    assert state["state"]["terminated"]["exitCode"] == 0


def test_cluster_dns_resolves_services_and_pods_reach_each_other(kube, real_node):
    """A headless Service's pod names resolve through CoreDNS and a TCP connection crosses the bridge."""
    from dlc_airflow.k8s.kinds import SERVICE

    tag = uuid.uuid4().hex[:6]
    server = pod(f"srv-{tag}", real_node, ["python3", "-c", (
        "import socket; s = socket.socket(); s.bind(('', 7777)); s.listen(1); c, _ = s.accept(); "
        "c.sendall(b'hello from ' + socket.gethostname().encode()); c.close()")])
    server["metadata"]["labels"] = {"app": f"srv-{tag}"}
    server["spec"].update({"hostname": "srv-0", "subdomain": f"svc-{tag}"})
    kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"svc-{tag}"},
                 "spec": {"clusterIP": "None", "selector": {"app": f"srv-{tag}"}, "publishNotReadyAddresses": True,
                          "ports": [{"port": 7777}]}})
    kube.create(server)
    client = pod(f"cli-{tag}", real_node, ["python3", "-c", (
        "import socket, time\n"
        f"name = 'srv-0.svc-{tag}'\n"
        "for _ in range(120):\n"
        "    try:\n"
        "        addr = socket.gethostbyname(name); c = socket.create_connection((name, 7777), timeout=2); break\n"
        "    except OSError:\n"
        "        time.sleep(0.5)\n"
        "print(name, addr, c.recv(100).decode(), flush=True)\n")])
    kube.create(client)
    done = wait_phase(kube, f"cli-{tag}", {"Succeeded", "Failed"})
    assert done["status"]["phase"] == "Succeeded", kube.read_log(f"cli-{tag}")
    server_ip = kube.get(POD, f"srv-{tag}")["status"]["podIP"]
    assert kube.read_log(f"cli-{tag}").strip() == f"srv-0.svc-{tag} {server_ip} hello from srv-0"
    assert kube.get(SERVICE, f"svc-{tag}") is not None


def test_a_container_over_its_memory_limit_is_oom_killed(kube, real_node):
    name = f"oom-{uuid.uuid4().hex[:6]}"
    hog = "x = []\nwhile True:\n    x.append(bytearray(16 * 1024 * 1024))\n"
    kube.create(pod(name, real_node, ["python3", "-c", hog],
                    resources={"limits": {"memory": "64Mi", "cpu": "500m"}}))
    done = wait_phase(kube, name, {"Failed", "Succeeded"})
    terminated = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (done["status"]["phase"], terminated["reason"], terminated["exitCode"]) == ("Failed", "OOMKilled", 137)


def test_an_image_that_does_not_exist_is_errimagepull_from_the_kubelet(kube, real_node):
    name = f"nopull-{uuid.uuid4().hex[:6]}"
    kube.create(pod(name, "registry.local/dlc-airflow/no-such-image:1", ["true"]))

    def waiting_reason():
        statuses = (kube.get(POD, name) or {}).get("status", {}).get("containerStatuses") or []
        return statuses and (statuses[0].get("state", {}).get("waiting") or {}).get("reason") in (
            "ErrImagePull", "ImagePullBackOff") and statuses[0]["state"]["waiting"]
    waiting = wait_for(waiting_reason, "the kubelet to report the failed pull")
    assert "no-such-image" in waiting.get("message", ""), waiting


def test_deleting_a_pod_ends_its_processes(kube, real_node):
    name = f"sleeper-{uuid.uuid4().hex[:6]}"
    kube.create(pod(name, real_node, ["sleep", "600"]))
    wait_phase(kube, name, {"Running"})
    running = wait_for(lambda: crictl("ps", "--quiet", "--label", f"io.kubernetes.pod.name={name}").split(),
                       "the container to run")
    kube.delete(POD, name)
    wait_for(lambda: not crictl("ps", "--quiet", "--label", f"io.kubernetes.pod.name={name}").split(),
             "the container to stop", timeout=60)
    assert running
