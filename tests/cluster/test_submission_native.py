"""submit_or_adopt and stop_if_owner on the real API server and Job controller (native
backend, restricted identity): a half-submitted job is completed by the retry that adopts
it (issue 13 4f), and a superseded try cannot stop its successor's job (4g), not even when
the successor's claim overtakes its check (issue 25 part 5). The same on the local backend:
tests/local/test_submission_local.py.
"""

from __future__ import annotations

import uuid

from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import JOB, POD, SERVICE, kind_of, ref_kinds
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import LABEL_JOB, TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from dlc_airflow.submission import Action, stop_if_owner, submit_or_adopt
from tests.cluster.polling import wait_for, wait_state


def ddp(delay: str | None = None) -> DLCJob:
    annotations = {"pod-complete.stage.kwok.x-k8s.io/delay": delay} if delay else {}
    return DLCJob(type="pytorch", image="registry.local/train:1", command=["train"],
                  roles={"master": 1, "worker": 2}, annotations=annotations)


def identity(try_number: int, run: str) -> TaskIdentity:
    return TaskIdentity("dag", "task", run, try_number=try_number)


def objects(kube, name: str) -> set[tuple[str, str]]:
    found = set()
    for kind in (JOB, SERVICE):
        for obj in kube.list(kind, labels={LABEL_JOB: name})[0]:
            found.add((obj["kind"], obj["metadata"]["name"]))
    return found


def test_the_retry_completes_a_job_whose_try_died_between_two_creates(kube):
    runner = KubeRunner(kube, get_backend("native"))
    run = f"run-{uuid.uuid4().hex[:6]}"
    job = ddp()
    name = job_name("ddp", identity(1, run), 1)
    rendered = get_backend("native").render(job, name, identity(1, run), 1)
    # try 1 was killed right after creating the primary (the master's Job): no Service
    # (its pods could not resolve their peers) and no worker Job
    kube.create(rendered[0], kube.namespace)
    assert objects(kube, name) == {("Job", f"{name}-master")}

    retry = submit_or_adopt(runner, job, identity(2, run), base_name="ddp")
    assert retry.action is Action.ADOPTED and retry.ref.name == name
    assert retry.ref.uid == kube.get(JOB, f"{name}-master")["metadata"]["uid"]
    expected = {(o["kind"], o["metadata"]["name"]) for o in rendered}
    assert objects(kube, name) == expected == {("Job", f"{name}-master"), ("Service", name), ("Job", f"{name}-worker")}
    # the objects the retry made are owned by the primary, as a whole submit makes them
    primary_uid = kube.get(kind_of(rendered[0]), f"{name}-master")["metadata"]["uid"]
    service = kube.get(SERVICE, name)
    assert [o["uid"] for o in service["metadata"]["ownerReferences"]] == [primary_uid]
    assert wait_state(runner, retry.ref, {JobState.SUCCEEDED, JobState.FAILED}, timeout=120).state is JobState.SUCCEEDED


def test_a_superseded_try_does_not_stop_its_successors_job(kube):
    runner = KubeRunner(kube, get_backend("native"))
    run = f"run-{uuid.uuid4().hex[:6]}"
    first = submit_or_adopt(runner, ddp("600s"), identity(1, run), base_name="own")
    assert first.action is Action.SUBMITTED and runner.owner_try(first.ref) == 1
    # a scheduler restart reset the task: try 2 adopts while try 1's process still runs
    second = submit_or_adopt(runner, ddp("600s"), identity(2, run), base_name="own")
    assert second.action is Action.ADOPTED and runner.owner_try(second.ref) == 2
    # then try 1's on_kill ("task shouldn't be running anymore") arrives
    assert stop_if_owner(runner, first.ref, try_number=1) is False
    assert not runner.status(first.ref).terminal  # not stopped
    assert stop_if_owner(runner, second.ref, try_number=2) is True
    assert runner.status(second.ref).state is JobState.STOPPED
    assert objects(kube, first.ref.name)  # stopped, and kept


def test_a_claim_that_overtakes_an_older_trys_check_makes_its_stop_fail(kube):
    """The race a soak found (issue 25, part 5): try 1 checks the owner, try 2 claims, then
    try 1 stops. The stop carries the resourceVersion try 1 read, so the API server refuses
    it and try 1's check, run again, sees try 2's claim."""
    runner = KubeRunner(kube, get_backend("native"))
    run = f"run-{uuid.uuid4().hex[:6]}"
    first = submit_or_adopt(runner, ddp("600s"), identity(1, run), base_name="race")
    real_objects, reads = runner._live_objects, []

    def objects_then_claim(ref):  # try 2's claim lands right after try 1's first read
        found = real_objects(ref)
        reads.append(len(found))
        if len(reads) == 1:
            runner.claim(ref, 2)
        return found

    runner._live_objects = objects_then_claim
    assert stop_if_owner(runner, first.ref, try_number=1) is False
    assert len(reads) == 2  # the first stop was refused (409) and the check ran again
    assert not runner.status(first.ref).terminal and runner.owner_try(first.ref) == 2
    runner._live_objects = real_objects
    assert stop_if_owner(runner, first.ref, try_number=2) is True
    assert runner.status(first.ref).state is JobState.STOPPED


def test_a_stop_refused_halfway_is_finished_though_the_stopped_part_reads_failed(kube):
    """A CI run found it: the guarded stop patched the master's Job, the worker's Job changed
    before its own patch (409), and on the next read the master had failed by its deadline, so
    the job read ended and the worker's Job ran on, unstopped. The next read finishes the stop."""
    from dlc_airflow.k8s.backends.base import STOPPED_ANNOTATION, stop_annotations

    runner = KubeRunner(kube, get_backend("native"))
    run = f"run-{uuid.uuid4().hex[:6]}"
    sub = submit_or_adopt(runner, ddp("600s"), identity(1, run), base_name="half")
    master = f"{sub.ref.name}-master"
    kube.patch(JOB, master, {**get_backend("native").stop_patch(), **stop_annotations()})  # the stop's first patch
    wait_for(lambda: any(c["type"] == "Failed" for c in kube.get(JOB, master)["status"].get("conditions", [])),
             timeout=60, what="the master's Job failed by its deadline")
    assert runner.status(sub.ref).terminal  # the whole job reads stopped, the worker's Job runs on

    assert stop_if_owner(runner, sub.ref, try_number=1) is True
    worker = kube.get(JOB, f"{sub.ref.name}-worker")
    assert worker["metadata"]["annotations"].get(STOPPED_ANNOTATION) == "true"
    assert worker["spec"]["activeDeadlineSeconds"] == 1

    def worker_pods_running() -> list[str]:
        return [p["metadata"]["name"] for p in kube.list(POD, labels={LABEL_JOB: sub.ref.name})[0]
                if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")]

    wait_for(lambda: not worker_pods_running(), timeout=60, what="the worker's pods to end")
    runner.delete(sub.ref)


def test_a_job_an_older_try_ends_while_this_try_adopts_it_is_no_verdict(kube):
    """Try 1's on_kill stops (or deletes) the job between try 2's find and claim: try 2 does
    not take that end as its verdict but submits the next attempt."""
    for end in ("stop", "delete"):
        runner = KubeRunner(kube, get_backend("native"))
        run = f"run-{uuid.uuid4().hex[:6]}"
        first = submit_or_adopt(runner, ddp("600s"), identity(1, run), base_name="gone")
        real_claim = runner.claim

        def ended_before_claim(ref, try_number, end=end, older=first.ref, real_claim=real_claim):
            getattr(KubeRunner(kube, get_backend("native")), end)(older)  # try 1, in its own process
            real_claim(ref, try_number)

        runner.claim = ended_before_claim
        second = submit_or_adopt(runner, ddp("600s"), identity(2, run), base_name="gone")
        assert (second.action, second.ref.attempt) == (Action.SUBMITTED, 2), end
        assert second.ref.name != first.ref.name and not second.status.terminal
        assert runner.owner_try(second.ref) == 2
        runner.delete(second.ref)


def test_lookup_finds_a_job_by_name_alone(kube):
    runner = KubeRunner(kube, get_backend("kubeflow"))
    run = f"run-{uuid.uuid4().hex[:6]}"
    job = DLCJob(type="tensorflow", image="registry.local/tf:1", command=["train"],
                 roles={"chief": 1, "worker": 1})
    sub = submit_or_adopt(runner, job, identity(1, run), base_name="tf")
    found = runner.lookup(sub.ref.name)
    assert found is not None and ref_kinds(found)[0].kind == "TFJob" and found.uid == sub.ref.uid
    assert runner.lookup("no-such-job") is None
    runner.delete(sub.ref)
