"""scripts/k8s-local's own lifecycle, on a second, throwaway control plane (its own name and
state folder, no job controllers): `restart-apiserver` replaces the API server in place, and
`down` stops every process the script started, the restarted API server included."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.support.cluster import K8S_LOCAL


def cluster_processes(workdir: Path) -> list[str]:
    """Processes started from the cluster's folder (its binaries are linked there)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and cmdline[0].startswith(str(workdir)) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(f"{proc.info['pid']} {cmdline[0]}")
    return found


@pytest.mark.slow
def test_down_stops_every_process_even_after_restart_apiserver(cluster, tmp_path):
    if cluster.source != "local control plane (scripts/k8s-local)":
        pytest.skip("runs the local control plane's script itself")
    env = {**os.environ, "DLC_K8S_NAME": "lifecycle", "DLC_K8S_STATE": str(tmp_path / "state"),
           "DLC_K8S_CONTROLLERS": "none", "DLC_K8S_REAL_NODE": "0"}
    workdir = tmp_path / "state" / "kwok" / "clusters" / "lifecycle"

    def script(*args: str) -> str:
        done = subprocess.run([str(K8S_LOCAL), *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr

    try:
        script("up")
        before = cluster_processes(workdir)
        assert any("kube-apiserver" in p for p in before), before
        pidfile = workdir / "pids" / "kube-apiserver.pid"
        first = pidfile.read_text().strip()
        assert "kube-apiserver restarted" in script("restart-apiserver")
        assert pidfile.read_text().strip() != first
    finally:
        script("down")
    assert cluster_processes(workdir) == []


@pytest.mark.slow
def test_two_local_clusters_run_their_controllers_side_by_side(cluster, tmp_path):
    """A second cluster's controllers take their own ports (recorded in its state) while this
    cluster's run, and each cluster's Kueue admits its own jobs."""
    from dlc_airflow.k8s.client import KubeClient
    from dlc_airflow.k8s.kinds import JOB
    from tests.support.cluster import create_test_namespace, delete_namespace

    if cluster.source != "local control plane (scripts/k8s-local)":
        pytest.skip("runs the local control plane's script itself")
    state = tmp_path / "state"
    env = {**os.environ, "DLC_K8S_NAME": "beside", "DLC_K8S_STATE": str(state),
           "DLC_K8S_CONTROLLERS": "kueue,jobset,kuberay", "DLC_K8S_REAL_NODE": "0"}

    def script(*args: str) -> str:
        done = subprocess.run([str(K8S_LOCAL), *args], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout + done.stderr

    def ports(workdir: Path) -> dict[str, int]:
        text = (workdir / "controllers" / "ports.env").read_text()
        return {k: int(v) for k, v in (line.split("=") for line in text.split())}

    try:
        output = script("up")
        # KubeRay v1.6.1's webhook port is fixed: the first cluster keeps it, this one runs without
        assert "runs without its RayCluster validator" in output, output[-2000:]
        mine, theirs = ports(Path(cluster.local_workdir or "")), ports(state / "kwok" / "clusters" / "beside")
        for key in ("kueue_webhook", "kueue_health", "jobset_webhook", "jobset_metrics"):
            assert mine[key] != theirs[key], key
        for admin in (cluster.admin(), KubeClient.from_kubeconfig(str(state / "admin.kubeconfig"))):
            namespace = create_test_namespace(admin, prefix="side")
            try:
                created = admin.create({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": "queued", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
                    "spec": {"suspend": False, "template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "c", "image": "registry.local/none", "command": ["true"]}]}}}}, namespace=namespace)
                assert created["kind"] == JOB.kind and created["spec"]["suspend"] is True  # that cluster's Kueue
            finally:
                delete_namespace(admin, namespace)
    finally:
        script("down")
    assert cluster_processes(state / "kwok" / "clusters" / "beside") == []
