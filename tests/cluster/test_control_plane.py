"""The local control plane behaves like a real cluster: the real Job controller, scheduler,
garbage collector and RBAC, with kwok running pods on simulated nodes.

These tests write plain manifests on purpose: they check the infrastructure, not our
renderers (tests/cluster/test_backends_accepted.py does that).
"""

from __future__ import annotations

import time
import uuid

import pytest

from dlc_airflow.k8s.errors import Forbidden
from dlc_airflow.k8s.kinds import JOB, NODE, POD, SECRET, SERVICE, ResourceKind

LOGS = ResourceKind("kwok.x-k8s.io/v1alpha1", "Logs", "logs")


def wait_for(fn, timeout=60.0, interval=0.2, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def indexed_job(name: str, completions: int, *, labels=None, annotations=None, resources=None,
                pod_failure_policy=None, backoff_limit_per_index=None) -> dict:
    template_meta = {"labels": {"app": name, **(labels or {})}, "annotations": annotations or {}}
    spec = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": completions,
        "template": {
            "metadata": template_meta,
            "spec": {
                "restartPolicy": "Never",
                "subdomain": name,
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"],
                                "resources": resources or {}}],
            },
        },
    }
    if pod_failure_policy:
        spec["podFailurePolicy"] = pod_failure_policy
    if backoff_limit_per_index is not None:
        spec["backoffLimitPerIndex"] = backoff_limit_per_index
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_condition(kube, name, ctype):
    job = kube.get(JOB, name)
    for cond in (job or {}).get("status", {}).get("conditions", []):
        if cond["type"] == ctype and cond["status"] == "True":
            return cond
    return None


def test_indexed_job_with_headless_service_completes(kube):
    name = "idx-" + uuid.uuid4().hex[:6]
    kube.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                 "spec": {"clusterIP": "None", "selector": {"app": name}, "publishNotReadyAddresses": True,
                          "ports": [{"name": "rdzv", "port": 23456}]}})
    kube.create(indexed_job(name, 3, annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "2s"}))

    # The real Job controller runs three indexed pods, kwok runs them on the simulated nodes.
    pods = wait_for(lambda: [p for p in kube.list(POD, labels={"app": name})[0]
                             if p["status"].get("phase") == "Running"] or None, what="running pods")
    indexes = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
                     for p in kube.list(POD, labels={"app": name})[0])
    assert indexes == ["0", "1", "2"]
    pod = pods[0]
    assert pod["spec"]["hostname"].startswith(f"{name}-") and pod["spec"]["subdomain"] == name
    assert pod["spec"]["nodeName"]
    env = {e["name"]: e for e in pod["spec"]["containers"][0].get("env", [])}
    assert "JOB_COMPLETION_INDEX" in env  # injected by the Job controller

    cond = wait_for(lambda: job_condition(kube, name, "Complete"), what="Job Complete")
    assert cond["status"] == "True"
    assert kube.get(JOB, name)["status"]["succeeded"] == 3
    assert kube.get(SERVICE, name)["spec"]["clusterIP"] == "None"


def test_chaos_failed_container_fails_the_job_by_pod_failure_policy(kube):
    name = "fail-" + uuid.uuid4().hex[:6]
    chaos = "pod-container-running-failed.stage.kwok.x-k8s.io"
    kube.create(indexed_job(
        name, 2,
        labels={chaos: "true"},
        annotations={f"{chaos}/exit-code": "3", f"{chaos}/delay": "1s"},
        pod_failure_policy={"rules": [{"action": "FailJob",
                                       "onExitCodes": {"operator": "In", "values": [3]}}]},
    ))
    cond = wait_for(lambda: job_condition(kube, name, "Failed"), what="Job Failed")
    assert cond["reason"] == "PodFailurePolicy"
    assert "exit code 3" in cond["message"]


def test_chaos_failed_container_exhausts_backoff_per_index(kube):
    name = "boff-" + uuid.uuid4().hex[:6]
    chaos = "pod-container-running-failed.stage.kwok.x-k8s.io"
    kube.create(indexed_job(name, 1, labels={chaos: "true"},
                            annotations={f"{chaos}/exit-code": "1", f"{chaos}/delay": "0s"},
                            backoff_limit_per_index=1))
    cond = wait_for(lambda: job_condition(kube, name, "Failed"), timeout=90, what="Job Failed")
    # one retry of index 0, then the index fails and with it the Job
    assert cond["reason"] in ("FailedIndexes", "BackoffLimitExceeded")
    assert kube.get(JOB, name)["status"]["failed"] == 2


def test_preempted_pod_is_replaced_without_failing_the_job(kube, admin):
    name = "pre-" + uuid.uuid4().hex[:6]
    kube.create(indexed_job(
        name, 1, annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"},
        pod_failure_policy={"rules": [{"action": "Ignore",
                                       "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        backoff_limit_per_index=0,
    ))
    first = wait_for(lambda: next((p for p in kube.list(POD, labels={"app": name})[0]
                                   if p["status"].get("phase") == "Running"), None), what="running pod")
    # Preempt that pod (as the scheduler would; our identity may not patch pods): kwok's
    # pod-preempt stage fails it with the DisruptionTarget condition.
    admin_patch = {"metadata": {"labels": {"pod-preempt.stage.kwok.x-k8s.io": "true"},
                                "annotations": {"pod-preempt.stage.kwok.x-k8s.io/delay": "0s"}}}
    admin.patch(POD, first["metadata"]["name"], admin_patch, namespace=kube.namespace)

    def replaced():
        pods = kube.list(POD, labels={"app": name})[0]
        preempted = [p for p in pods if any(c["type"] == "DisruptionTarget" and c["status"] == "True"
                                            for c in p["status"].get("conditions", []))]
        fresh = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
        return preempted and fresh
    wait_for(replaced, what="preempted pod replaced")
    assert job_condition(kube, name, "Failed") is None  # Ignore: not counted against backoff


def test_unschedulable_pod_reports_the_schedulers_reason(kube):
    name = "gpu-" + uuid.uuid4().hex[:6]
    kube.create(indexed_job(name, 1, resources={"limits": {"nvidia.com/gpu": "64"}}))

    def unschedulable():
        for pod in kube.list(POD, labels={"app": name})[0]:
            for cond in pod["status"].get("conditions", []):
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return cond
        return None
    cond = wait_for(unschedulable, what="PodScheduled=False/Unschedulable")
    assert "nodes are available" in cond["message"]
    assert "Insufficient nvidia.com/gpu" in cond["message"]


def test_pod_logs_are_served_through_the_api_server(kube, admin, tmp_path):
    name = "log-" + uuid.uuid4().hex[:6]
    kube.create(indexed_job(name, 1, annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}))
    pod = wait_for(lambda: next((p for p in kube.list(POD, labels={"app": name})[0]
                                 if p["status"].get("phase") == "Running"), None), what="running pod")
    log_file = tmp_path / "main.log"
    log_file.write_text(
        "2026-12-02T10:00:00.000000000Z stdout F epoch 1 loss 0.5\n"
        "2026-12-02T10:00:01.000000000Z stdout F epoch 2 loss 0.25\n"
    )
    # kwok serves a pod's logs from a file named by a Logs object (a kwok CRD).
    admin.request("POST", LOGS.path(kube.namespace), body={
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
        "metadata": {"name": pod["metadata"]["name"], "namespace": kube.namespace},
        "spec": {"logs": [{"containers": ["main"], "logsFile": str(log_file), "follow": False}]}})
    text = wait_for(lambda: _try_log(kube, pod["metadata"]["name"]), timeout=30, what="pod log")
    assert "epoch 1 loss 0.5" in text and "epoch 2 loss 0.25" in text


def _try_log(kube, pod):
    try:
        return kube.read_log(pod, container="main") or None
    except Exception:  # noqa: BLE001 - the Logs object takes a moment to be picked up
        return None


def test_restricted_identity_is_refused_what_its_role_does_not_grant(kube, cluster, admin):
    with pytest.raises(Forbidden) as exc:
        kube.list(SECRET)
    assert exc.value.status == 403 and "secrets" in exc.value.message
    # nor anything in a namespace where it holds no RoleBinding
    from tests.support.cluster import create_test_namespace, delete_namespace

    other = create_test_namespace(admin, prefix="other")
    try:
        admin.request("DELETE", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{other}/rolebindings/dlc-airflow")
        with pytest.raises(Forbidden):
            cluster.restricted(other).create(indexed_job("nope", 1))
    finally:
        delete_namespace(admin, other)
    # and it may do what the Role grants
    kube.create(indexed_job("allowed-" + uuid.uuid4().hex[:6], 1))


def test_node_goes_not_ready(admin):
    name = "tmp-node-" + uuid.uuid4().hex[:6]
    admin.request("POST", NODE.path(), body={
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                     "labels": {"type": "kwok", "kubernetes.io/hostname": name}},
        "spec": {"taints": [{"key": "dlc-airflow/test-only", "effect": "NoSchedule"}]}})
    try:
        def ready_status():
            node = admin.get(NODE, name)
            return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), None)
        assert wait_for(lambda: ready_status() == "True", what="node Ready")
        admin.patch(NODE, name, {"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": "true"},
                                              "annotations": {"node-not-ready.stage.kwok.x-k8s.io/delay": "0s"}}})
        assert wait_for(lambda: ready_status() == "False", what="node NotReady")
    finally:
        admin.delete(NODE, name)


def test_training_cluster_nodes(admin):
    nodes, _ = admin.list(NODE, labels={"type": "kwok"})
    by_name = {n["metadata"]["name"]: n for n in nodes}
    gpu = [n for n in nodes if n["status"]["allocatable"].get("nvidia.com/gpu")]
    spot = [n for n in nodes if n["metadata"]["labels"].get("karpenter.sh/capacity-type") == "spot"]
    rdma = [n for n in nodes if n["status"]["allocatable"].get("rdma/hca")]
    assert len(gpu) >= 4 and len(spot) >= 2 and rdma
    assert all(any(t["key"] == "dlc-airflow/spot" for t in n["spec"].get("taints", [])) for n in spot)
    assert len({n["metadata"]["labels"]["topology.kubernetes.io/zone"] for n in nodes}) >= 3
    assert all(n["metadata"]["labels"].get("nvidia.com/gpu.product") for n in gpu)
    assert "cpu-0" in by_name
