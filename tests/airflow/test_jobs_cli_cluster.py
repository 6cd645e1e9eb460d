"""`dlc-airflow jobs` on the local control plane, as the restricted identity through an Airflow
connection (the way the operator reaches the cluster): without --backend it looks at every
Kubernetes backend; the spec travels with the job (an annotation), so clone and script work
from the job alone; clone goes through the admin's policy. tests/local/test_jobs_cli.py has
the same commands on the local backend."""

from __future__ import annotations

import json
import uuid

import pytest
import yaml

from dlc_airflow.cli import main
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import JOBSET, POD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import LABEL_JOB, TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.airflow.test_operator_dagtest import wait_until
from tests.cluster.polling import wait_state
from tests.cluster.specs import RUN_FOR
from tests.support.cluster import pod_logs


def job(**extra) -> DLCJob:
    return DLCJob(type="pytorch", image="registry.local/train:1", command=["python", "train.py"],
                  roles={"master": 1, "worker": 1}, env={"LR": "0.1"},
                  annotations={RUN_FOR: "600s"}, **extra)


@pytest.fixture
def submitted(kube, admin, controllers, k8s_conn, tmp_path):
    """A running native job and a running jobset job made by a task, and the pods' logs."""
    runners = {b: KubeRunner(kube, get_backend(b)) for b in ("native", "jobset")}
    run_id = f"manual__{uuid.uuid4().hex[:6]}"
    refs = {}
    for backend, runner in runners.items():
        identity = TaskIdentity("retrain", f"train_{backend}", run_id)
        refs[backend], _ = runner.submit(job(), f"{backend[:4]}-{uuid.uuid4().hex[:6]}-1", identity, 1)
    for backend, ref in refs.items():
        wait_state(runners[backend], ref, {JobState.RUNNING}, timeout=90)
    log_file = tmp_path / "pod.log"
    log_file.write_text("2026-12-02T10:00:00.000000000Z stdout F epoch 1 loss 0.5\n")
    undo = pod_logs(admin, kube.namespace, log_file)
    yield runners, refs, run_id
    undo()
    for backend, ref in refs.items():
        runners[backend].delete(ref)


def cli(capsys, conn_id: str, *args: str) -> tuple[int, str, str]:
    try:
        code = main(["jobs", *args, "--conn-id", conn_id])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_describe_logs_script_over_every_kubernetes_backend(submitted, k8s_conn, capsys):
    runners, refs, run_id = submitted
    code, out, err = cli(capsys, k8s_conn, "list", "--run", run_id, "-o", "json")
    assert code == 0, err
    listed = {j["name"]: j for j in json.loads(out)}
    assert set(listed) == {refs["native"].name, refs["jobset"].name}
    assert {j["backend"] for j in listed.values()} == {"native", "jobset"}
    assert all(j["state"] == "RUNNING" and j["dag"] == "retrain" and j["run"] == run_id for j in listed.values())

    code, out, _ = cli(capsys, k8s_conn, "describe", refs["jobset"].name, "-o", "json")
    data = json.loads(out)
    assert data["backend"] == "jobset" and data["task"] == "train_jobset" and data["uid"] == refs["jobset"].uid
    assert {r["replica"] for r in data["replicas"]} == {"master-0", "worker-0"}
    assert all(r["state"] == "Running" and r["node"] and r["started"] for r in data["replicas"])

    code, out, _ = cli(capsys, k8s_conn, "logs", refs["native"].name, "--role", "worker")
    assert "[worker-0] epoch 1 loss 0.5" in out and "[master-0]" not in out

    code, out, _ = cli(capsys, k8s_conn, "script", refs["native"].name)
    spec = yaml.safe_load(out)
    assert set(spec["roles"]) == {"master", "worker"} and spec["env"] == {"LR": "0.1"} and spec["type"] == "pytorch"


def test_stop_clone_and_delete(submitted, kube, admin, k8s_conn, capsys):
    runners, refs, _ = submitted
    native = refs["native"]
    code, _, err = cli(capsys, k8s_conn, "stop", native.name)
    assert code == 0 and f"stopped job {native.name}" in err
    wait_until(lambda: not admin.list(POD, kube.namespace, labels={LABEL_JOB: native.name})[0], "the pods to go")

    # the admin's default policy refuses a host path: nothing is created
    code, _, err = cli(capsys, k8s_conn, "clone", refs["jobset"].name, "--set",
                       'storage=[{"type": "host_path", "path": "/", "mount_path": "/host"}]')
    assert code == 2 and "storage[0].path: host path '/'" in err and "dlc_policy" in err, err
    assert len(kube.list(JOBSET)[0]) == 1

    code, out, err = cli(capsys, k8s_conn, "clone", refs["jobset"].name, "--set", "roles.worker=2",
                         "--set", f"annotations.{RUN_FOR}=1s", "-o", "json")
    assert code == 0, err
    clone = json.loads(out)
    assert clone["backend"] == "jobset" and clone["cloned_from"] == refs["jobset"].name
    ref = runners["jobset"].lookup(clone["name"])
    done = wait_state(runners["jobset"], ref, {JobState.SUCCEEDED, JobState.FAILED}, timeout=120)
    assert done.state is JobState.SUCCEEDED and done.roles["worker"].replicas == 2, done.summary()

    code, _, err = cli(capsys, k8s_conn, "delete", clone["name"])
    assert code == 0
    wait_until(lambda: kube.get(JOBSET, clone["name"]) is None, "the clone to be deleted")
