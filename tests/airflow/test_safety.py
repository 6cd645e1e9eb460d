"""Safe by default on a shared Airflow (issue 9), through real Airflow (dag.test): the
admin's policy refuses before anything is created, on the local backend and on the real
control plane (restricted identity); jobs whose pods can never be created fail within
queue_timeout with the API server's own message and are stopped (and kept, STOPPED)."""

from __future__ import annotations

import json
import sys

import pytest

from dlc_airflow.k8s.kinds import JOB, JOBSET, PYTORCH_JOB, RAY_JOB, TRAIN_JOB
from dlc_airflow.naming import MANAGED_BY
from dlc_airflow.policy import PolicyError
from tests.airflow.test_operator_dagtest import stopped_and_kept, training_job, wait_until


def managed(kube, kind=JOB):
    return kube.list(kind, labels={MANAGED_BY: "dlc-airflow"})[0]


HOST_ROOT = {"type": "host_path", "path": "/", "mount_path": "/host"}


@pytest.mark.airflow
def test_the_admins_policy_refuses_a_host_root_mount_locally(dag_files, tmp_path, capfd, monkeypatch):
    # the local backend's defaults allow host paths (a local job has the worker's rights anyway);
    # an admin who says otherwise is obeyed, when the DAG file is parsed (the local policy needs
    # nothing but the Airflow config): the DAG does not load, nothing runs
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"host_paths": [{"prefix": "/data"}]}))
    root = tmp_path / "jobs"
    job = {"type": "custom", "image": "local", "roles": {"main": 1}, "storage": [HOST_ROOT],
           "command": [sys.executable, "-c", "print('should never run')"]}
    with pytest.raises(PolicyError) as refused:
        dag_files.operator_dag(backend="local", job=job, deferrable=False, local_root=str(root))
    message = str(refused.value)
    assert "storage[0].path: host path '/'" in message and "dlc_policy.host_paths" in message
    assert "\n" not in message
    assert "should never run" not in "".join(capfd.readouterr())
    assert not root.exists() or not any(p for p in root.iterdir() if not p.name.startswith("."))


@pytest.mark.parametrize("overrides,named", [
    ({"storage": [HOST_ROOT]}, "storage[0].path: host path '/'"),
    ({"scheduling": {"service_account": "cluster-admin"}}, "scheduling.service_account"),
    ({"image": "evil.example.com/miner:1"}, "image: image 'evil.example.com/miner:1'"),
])
def test_the_connections_policy_refuses_before_anything_is_created(kube, policed_conn, dag_files, capfd,
                                                                   overrides, named):
    conn_id = policed_conn({"registries": ["registry.local/"]})
    job = training_job(**overrides)
    dag = dag_files.operator_dag(conn_id=conn_id, backend="native", job=job.to_dict(), deferrable=False)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert named in text and f"connection {conn_id!r} extra dlc_policy" in text
    assert managed(kube) == []


# backend -> (the job, the kind of its primary object, whose controller reports the FailedCreate)
CANNOT_CREATE = {
    "native": ({}, JOB, "Job"),  # the Job controller: FailedCreate
    "jobset": ({}, JOBSET, "Job"),  # the Job controller, on the JobSet's child Job
    "kubeflow": ({}, PYTORCH_JOB, "PyTorchJob"),  # the Training Operator: FailedCreatePod
    "trainer": ({"roles": {"worker": 2}}, TRAIN_JOB, "Job"),  # TrainJob -> JobSet -> Job
    "ray": ({"type": "ray", "roles": {"head": 1, "worker": 1}}, RAY_JOB, "RayCluster"),  # FailedToCreateHeadPod
}


@pytest.mark.parametrize("backend,deferrable", [("native", False), ("native", True), ("jobset", True),
                                                ("kubeflow", False), ("trainer", True), ("ray", True)])
def test_a_missing_service_account_fails_within_queue_timeout_with_the_servers_message(
        kube, controllers, policed_conn, dag_files, capfd, backend, deferrable):
    """The controller cannot create the pods (an Event: FailedCreate and its kin): nothing else
    reports it. On native and, through their real controllers, on every CRD backend."""
    overrides, kind, reporter = CANNOT_CREATE[backend]
    conn_id = policed_conn({"service_accounts": ["nope"]})  # allowed, but it does not exist
    job = training_job("2s", scheduling={"service_account": "nope"}, **overrides)
    dag = dag_files.operator_dag(conn_id=conn_id, backend=backend, job=job.to_dict(), deferrable=deferrable,
                                 queue_timeout=15)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "could not start within queue_timeout (15s): " + reporter in text, text[-3000:]
    assert 'serviceaccount "nope" not found' in text
    wait_until(lambda: stopped_and_kept(kube, kind), "the job to be stopped")


def test_pod_security_refusing_a_host_path_fails_with_the_servers_message(
        kube, admin, namespace, policed_conn, dag_files, capfd):
    """The admin allows a read-only host path, but the namespace enforces Pod Security
    `baseline`, which refuses hostPath volumes: the pods are never created."""
    from dlc_airflow.k8s.kinds import ResourceKind

    admin.patch(ResourceKind("v1", "Namespace", "namespaces", namespaced=False), namespace,
                {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    conn_id = policed_conn({"host_paths": [{"prefix": "/mnt/datasets"}]})
    job = training_job("2s", storage=[{"type": "host_path", "path": "/mnt/datasets", "mount_path": "/data",
                                       "read_only": True}])
    dag = dag_files.operator_dag(conn_id=conn_id, backend="native", job=job.to_dict(), deferrable=True,
                                 queue_timeout=15)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "could not start within queue_timeout" in text and "PodSecurity" in text and "hostPath" in text
    wait_until(lambda: stopped_and_kept(kube), "the job to be stopped")


def test_an_image_that_cannot_be_pulled_fails_within_queue_timeout_with_the_kubelets_message(
        kube, k8s_conn, dag_files, capfd):
    """kwok stands in for the kubelet (k8s/cluster/pod-stages.yaml: pod-image-pull-failed)."""
    job = training_job("2s", labels={"pod-image-pull-failed.stage.kwok.x-k8s.io": "true"})
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job.to_dict(), deferrable=True,
                                 queue_timeout=10)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "could not start within queue_timeout (10s)" in text and "ErrImagePull" in text
    assert 'failed to pull and unpack image "registry.local/train:1": not found' in text
    wait_until(lambda: stopped_and_kept(kube), "the job to be stopped")


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_a_job_kueue_does_not_admit_fails_within_queue_timeout_with_kueues_reason(
        kube, controllers, policed_conn, dag_files, capfd, deferrable):
    """More GPUs than the teams' cohort has (32): Kueue keeps the JobSet suspended, the task log
    says why in Kueue's words, and queue_timeout ends the task with them and stops the job."""
    from dlc_airflow.k8s.kinds import JOBSET

    conn_id = policed_conn({})
    job = training_job("2s", roles={"worker": 5}, resources={"cpu": "8", "memory": "64Gi", "gpu": 8},
                       scheduling={"queue": "team-a"})
    dag = dag_files.operator_dag(conn_id=conn_id, backend="jobset", job=job.to_dict(), deferrable=deferrable,
                                 queue_timeout=15)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    assert "was not scheduled within queue_timeout (15s): Kueue: couldn't assign flavors" in text, text[-3000:]
    assert "insufficient quota for nvidia.com/gpu" in text
    wait_until(lambda: stopped_and_kept(kube, JOBSET), "the job to be stopped")
