"""The life of a job under each CRD backend's real controller (JobSet, Training Operator,
Trainer, KubeRay): a retry adopts the running job and claims it, another task's job of the
same name is refused, a preempted pod is recovered the way the controller does it, stopping
the job (suspend) ends its pods and keeps it, STOPPED, and deleting it leaves no object it made
behind (every kind the controller creates, listed as the administrator sees them).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from dlc_airflow.errors import OwnershipError
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import CONFIG_MAP, JOB, JOBSET, POD, SERVICE, WORKLOAD, ResourceKind
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from dlc_airflow.submission import Action, submit_or_adopt
from tests.cluster.polling import wait_for, wait_state
from tests.cluster.specs import COMMAND, IMAGE, RUN_FOR
from tests.support.cluster import create_test_namespace, delete_namespace

RAY_CLUSTER = ResourceKind("ray.io/v1", "RayCluster", "rayclusters")
PREEMPT = "pod-preempt.stage.kwok.x-k8s.io"
# Every kind a CRD backend's controllers make, whoever makes it (names start with the job's).
CHILD_KINDS = (POD, JOB, SERVICE, CONFIG_MAP, JOBSET, RAY_CLUSTER, WORKLOAD)

JOBS = {
    "jobset": dict(type="pytorch", roles={"master": 1, "worker": 2}),
    # exit code 137 (a preempted pod's) is one the operator restarts under its ExitCode policy
    "kubeflow": dict(type="pytorch", roles={"master": 1, "worker": 2},
                     fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]}),
    "trainer": dict(type="pytorch", roles={"worker": 2}),
    "ray": dict(type="ray", roles={"head": 1, "worker": 2}),
}
BACKENDS = list(JOBS)


def job(backend: str, run_for: str = "600s") -> DLCJob:
    return DLCJob(image=IMAGE, command=list(COMMAND), annotations={RUN_FOR: run_for}, **JOBS[backend])


def identity(try_number: int = 1) -> TaskIdentity:
    return TaskIdentity("lifecycle", "train", f"run-{uuid.uuid4().hex[:6]}", try_number=try_number)


@pytest.fixture(scope="module")
def lifecycle(controllers, admin):
    ns = create_test_namespace(admin, prefix="lc")
    kube = controllers.restricted(ns)
    yield {b: KubeRunner(kube, get_backend(b)) for b in BACKENDS}, admin, ns
    delete_namespace(admin, ns)


def leftovers(admin, namespace: str, name: str) -> list[str]:
    found = []
    for kind in CHILD_KINDS:
        for obj in admin.list(kind, namespace)[0]:
            if obj["metadata"]["name"].startswith(name):
                found.append(f"{kind.kind} {obj['metadata']['name']}")
    return found


def running_pods(admin, namespace: str, name: str, role: str) -> list[dict]:
    return [p for p in admin.list(POD, namespace, labels={"dlc-airflow/job-name": name, "dlc-airflow/role": role})[0]
            if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_retry_adopts_the_running_job_and_deleting_it_leaves_nothing(lifecycle, backend):
    runners, admin, ns = lifecycle
    runner = runners[backend]
    first_try = identity(1)
    first = submit_or_adopt(runner, job(backend), first_try, base_name=f"ad-{backend[:4]}")
    assert first.action is Action.SUBMITTED and first.ref is not None
    wait_state(runner, first.ref, {JobState.RUNNING}, timeout=90)
    # the worker died; try 2 finds the job running, adopts it (no second job) and claims it
    retry = submit_or_adopt(runner, job(backend), replace(first_try, try_number=2), base_name=f"ad-{backend[:4]}")
    assert (retry.action, retry.ref.name, retry.ref.uid) == (Action.ADOPTED, first.ref.name, first.ref.uid)
    assert runner.owner_try(first.ref) == 2
    assert [r.name for r in runner.find(first_try, job(backend))] == [first.ref.name]
    # another task instance's job of the same name is not adopted
    with pytest.raises(OwnershipError, match="belongs to another task"):
        runner.submit(job(backend), first.ref.name, identity(), 1)
    assert leftovers(admin, ns, first.ref.name)
    runner.delete(first.ref)
    wait_for(lambda: not leftovers(admin, ns, first.ref.name), timeout=90,
             what=f"nothing of {first.ref.name} left ({leftovers(admin, ns, first.ref.name)})")




@pytest.mark.parametrize("backend", BACKENDS)
def test_stop_ends_the_pods_and_keeps_the_job_stopped(lifecycle, backend):
    runners, admin, ns = lifecycle
    runner = runners[backend]
    ref, _ = runner.submit(job(backend), f"st-{backend[:4]}-{uuid.uuid4().hex[:6]}", identity(), 1)
    wait_state(runner, ref, {JobState.RUNNING}, timeout=90)
    assert runner.stop(ref) == 1  # the primary, suspended (and marked)
    assert runner.status(ref).state is JobState.STOPPED
    wait_for(lambda: not running_pods(admin, ns, ref.name, "worker"), timeout=90, what="the stopped job's pods gone")
    assert runner.objects(ref), "the stopped job is kept"
    assert runner.stop(ref) == 0  # it has ended
    runner.delete(ref)
    wait_for(lambda: not leftovers(admin, ns, ref.name), timeout=90,
             what=f"nothing of {ref.name} left ({leftovers(admin, ns, ref.name)})")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_preempted_pod_is_replaced_and_the_job_succeeds(lifecycle, backend):
    """kwok's pod-preempt stage fails a running worker with DisruptionTarget and exit code 137, as
    the scheduler or a reclaimed spot node would. JobSet's Jobs ignore it (podFailurePolicy), the
    Training Operator restarts 137 under its ExitCode policy, Trainer's Job retries it within its
    backoffLimit, and KubeRay replaces a lost worker pod."""
    runners, admin, ns = lifecycle
    runner = runners[backend]
    ref, _ = runner.submit(job(backend, run_for="20s"), f"pre-{backend[:4]}-{uuid.uuid4().hex[:6]}", identity(), 1)
    role = "worker"
    pods = wait_for(lambda: running_pods(admin, ns, ref.name, role), timeout=90, what=f"a running {role} pod")
    victim = pods[0]["metadata"]
    admin.patch(POD, victim["name"], {"metadata": {"labels": {PREEMPT: "true"},
                                                   "annotations": {f"{PREEMPT}/delay": "0s"}}}, namespace=ns)
    replicas = JOBS[backend]["roles"][role]

    def replaced() -> bool:
        uids = [p["metadata"]["uid"] for p in running_pods(admin, ns, ref.name, role)]
        return victim["uid"] not in uids and len(uids) == replicas
    wait_for(replaced,
             timeout=90, what=f"the preempted {role} pod replaced")
    if backend == "ray":  # the job's end is a real head's word: tests/node runs Ray to its end
        assert runner.status(ref).state is JobState.RUNNING, runner.status(ref).summary()
        runner.delete(ref)
        return
    done = wait_state(runner, ref, {JobState.SUCCEEDED, JobState.FAILED}, timeout=150)
    assert done.state is JobState.SUCCEEDED, done.summary()
    runner.delete(ref)
    # restart_on_preemption: a preempted replica is replaced without counting a restart
    assert done.restarts == 0, done.summary()
