"""An MPI job's SSH keys on native and JobSet (k8s/backends/sshkeys.py): render shows
placeholders, submit makes a new key pair, every pod installs it before its command, the
launcher waits for its workers to resolve, the launcher's end decides the job.
tests/node/test_frameworks.py runs mpirun over SSH with them for real."""

from __future__ import annotations

import base64
import subprocess

import pytest

from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.backends.batchjob import jobs_status
from dlc_airflow.k8s.backends.sshkeys import KEYS_PATH, PLACEHOLDER, fill_ssh_keys, wait_for_hosts
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

NAME = "mpi-1"


def mpi_job(**kw) -> DLCJob:
    return DLCJob(type="mpi", image="img", slots_per_worker=2, roles={
        "launcher": {"replicas": 1, "command": ["mpirun", "-np", "4", "hostname"]},
        "worker": {"replicas": 2, "command": ["/usr/sbin/sshd", "-De"]}}, **kw)


def secret_of(objects: list[dict]) -> dict:
    (secret,) = [o for o in objects if o["kind"] == "Secret" and o["metadata"]["name"] == f"{NAME}-ssh"]
    return secret


def pods_of(objects: list[dict]) -> dict[str, dict]:
    """role -> pod spec, from native's role Jobs or JobSet's replicated Jobs."""
    found = {}
    for obj in objects:
        if obj["kind"] == "Job":
            found[obj["metadata"]["labels"]["dlc-airflow/role"]] = obj["spec"]["template"]["spec"]
        if obj["kind"] == "JobSet":
            for rj in obj["spec"]["replicatedJobs"]:
                found[rj["name"]] = rj["template"]["spec"]["template"]["spec"]
    return found


@pytest.mark.parametrize("backend", ["native", "jobset"])
def test_render_shows_placeholders_and_every_pod_installs_the_keys(backend):
    objects = get_backend(backend).render(mpi_job(), NAME)
    secret = secret_of(objects)
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert set(secret["stringData"].values()) == {PLACEHOLDER} and "data" not in secret
    pods = pods_of(objects)
    assert set(pods) == {"launcher", "worker"}
    for role, pod in pods.items():
        (container,) = pod["containers"]
        assert {"name": "ssh-keys", "mountPath": KEYS_PATH, "readOnly": True} in container["volumeMounts"]
        volume = next(v for v in pod["volumes"] if v["name"] == "ssh-keys")
        assert volume["secret"]["secretName"] == f"{NAME}-ssh"
        # the wrapper installs the keys, then runs the role's command
        shell, argv = container["command"][2], container["command"][4:]
        assert '"$HOME/.ssh"' in shell and argv == mpi_job().roles[role].command
        assert ("getent hosts" in shell) is (role == "launcher")


@pytest.mark.parametrize("backend", ["native", "jobset"])
def test_submit_makes_a_new_key_pair_for_each_job(backend):
    first = fill_ssh_keys(get_backend(backend).render(mpi_job(), NAME), NAME)
    second = fill_ssh_keys(get_backend(backend).render(mpi_job(), NAME), NAME)
    keys = [{k: base64.b64decode(v).decode() for k, v in secret_of(o)["data"].items()} for o in (first, second)]
    for pair in keys:
        assert pair["ssh-privatekey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
        assert pair["ssh-publickey"].startswith("ssh-ed25519 ") and pair["ssh-publickey"].endswith(f" dlc-airflow/{NAME}\n")
        assert "stringData" not in secret_of(first)
    assert keys[0]["ssh-privatekey"] != keys[1]["ssh-privatekey"]


def test_jobs_without_a_hostfile_get_no_keys():
    job = DLCJob(type="pytorch", image="img", command=["torchrun", "t.py"], roles={"master": 1, "worker": 1})
    objects = get_backend("native").render(job, NAME)
    assert not [o for o in objects if o["kind"] == "Secret"]
    assert all("$HOME/.ssh" not in " ".join(p["containers"][0].get("command", [])) for p in pods_of(objects).values())


def test_the_launcher_waits_for_its_workers_to_resolve(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    done = subprocess.run(["/bin/sh", "-c", wait_for_hosts(str(hostfile))], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    hostfile.write_text("localhost slots=2\nno-such-worker.invalid slots=2\n")
    slow = subprocess.Popen(["/bin/sh", "-c", wait_for_hosts(str(hostfile))])
    with pytest.raises(subprocess.TimeoutExpired):  # still waiting for the second worker
        slow.wait(timeout=2)
    slow.kill()


def role_job(role: str, *, complete: bool, active: int = 0) -> dict:
    status: dict = {"active": active, "succeeded": 1 if complete else 0}
    if complete:
        status["conditions"] = [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-06T10:00:00Z"}]
    template = {"spec": {"containers": [{"name": "main", "env": [{"name": "DLC_JOB_TYPE", "value": "mpi"}]}]}}
    return {"metadata": {"name": f"{NAME}-{role}", "labels": {"dlc-airflow/role": role}},
            "spec": {"completions": 1 if role == "launcher" else 2, "template": template}, "status": status}


def test_the_launchers_end_decides_an_mpi_job():
    workers_serving = role_job("worker", complete=False, active=2)
    assert jobs_status([role_job("launcher", complete=False, active=1), workers_serving]).state is JobState.RUNNING
    assert jobs_status([role_job("launcher", complete=True), workers_serving]).state is JobState.SUCCEEDED


def test_jobset_lets_the_launcher_decide():
    (jobset,) = [o for o in get_backend("jobset").render(mpi_job(), NAME) if o["kind"] == "JobSet"]
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["launcher"]}
