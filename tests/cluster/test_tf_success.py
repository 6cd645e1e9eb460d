"""TensorFlow success on the native backend, on the real Job controller (kwok runs the pods).

As Kubeflow's TFJob default success policy: the job succeeds when the chief succeeds (worker 0
when there is no chief), whatever the parameter servers, evaluators and other workers are
doing; the runner's `settle` then stops those role Jobs (a deadline already past, so every
object stays), and the stop is not a failure of the job.

Every pod of these jobs serves until told otherwise (the pod-complete stage's delay, from the
pod annotation, is 600 s: a parameter server's `server.join()`); the test then ends the
training of the deciding replica by patching its pod's delay to 0 s, as kwok re-reads the
annotation on every change of the pod.
"""

from __future__ import annotations

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.backends.podspec import COMPLETION_INDEX_ANNOTATION
from dlc_airflow.k8s.kinds import JOB, POD
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import LABEL_JOB, LABEL_ROLE, child_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, condition
from tests.cluster.polling import wait_for, wait_state
from tests.cluster.specs import COMMAND, IDENTITY, IMAGE, unique_name

DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
TERMINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED}


def serving_job(roles: dict[str, int]) -> DLCJob:
    return DLCJob(type="tensorflow", image=IMAGE, command=list(COMMAND), roles=roles,
                  annotations={DELAY: "600s"})


def running_pods(kube, name: str, count: int) -> dict[str, dict] | None:
    """`<role>-<index>` -> pod, once `count` pods of job `name` run."""
    pods = kube.list(POD, labels={LABEL_JOB: name})[0]
    running = {
        f"{p['metadata']['labels'][LABEL_ROLE]}-{p['metadata']['annotations'][COMPLETION_INDEX_ANNOTATION]}": p
        for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }
    return running if len(running) == count else None


def finish_training(admin, kube, pod: dict) -> None:
    """The replica's command returns: kwok completes the pod now."""
    admin.patch(POD, pod["metadata"]["name"], {"metadata": {"annotations": {DELAY: "0s"}}},
                namespace=kube.namespace)


def stopped(kube, name: str, roles: list[str]) -> bool:
    """Every role Job in `roles` failed by the past deadline settle gave it, no pod running."""
    for role in roles:
        job = kube.get(JOB, child_name(name, role))
        failed = condition(job or {}, "Failed")
        if not failed or failed.get("reason") != "DeadlineExceeded":
            return False
        pods = kube.list(POD, labels={LABEL_JOB: name, LABEL_ROLE: role})[0]
        if any(p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
               for p in pods):
            return False
    return True


def test_tf_job_succeeds_when_its_chief_does_and_settle_stops_the_rest(kube, admin):
    runner = KubeRunner(kube, get_backend("native"))
    job = serving_job({"chief": 1, "ps": 1, "worker": 2, "evaluator": 1})
    ref, _ = runner.submit(job, unique_name("tf-chief"), IDENTITY, 1)
    pods = wait_for(lambda: running_pods(kube, ref.name, 5), timeout=60, interval=0.3, what="every pod running")

    finish_training(admin, kube, pods["chief-0"])
    s = wait_state(runner, ref, TERMINAL, timeout=60)
    assert (s.state, s.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), s.summary()
    assert s.roles["chief"].succeeded == 1 and s.roles["ps"].active == 1

    leftovers = sorted(child_name(ref.name, role) for role in ("evaluator", "ps", "worker"))
    assert sorted(runner.settle(ref)) == leftovers
    assert runner.settle(ref) == []  # already being stopped
    wait_for(lambda: stopped(kube, ref.name, ["ps", "worker", "evaluator"]), timeout=60, interval=0.3,
             what="ps, worker and evaluator Jobs stopped")
    after = runner.status(ref)  # the stop is ours, not a failure of the job
    assert (after.state, after.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), after.summary()
    assert kube.get(JOB, child_name(ref.name, "chief")) is not None  # every object stays


def test_tf_job_without_a_chief_succeeds_when_worker_0_does(kube, admin):
    runner = KubeRunner(kube, get_backend("native"))
    job = serving_job({"ps": 1, "worker": 2})
    ref, _ = runner.submit(job, unique_name("tf-worker0"), IDENTITY, 1)
    pods = wait_for(lambda: running_pods(kube, ref.name, 3), timeout=60, interval=0.3, what="every pod running")

    finish_training(admin, kube, pods["worker-0"])
    s = wait_state(runner, ref, TERMINAL, timeout=60)
    assert (s.state, s.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), s.summary()
    assert s.roles["worker"].succeeded == 1

    assert sorted(runner.settle(ref)) == sorted(child_name(ref.name, r) for r in ("ps", "worker"))
    wait_for(lambda: stopped(kube, ref.name, ["ps", "worker"]), timeout=60, interval=0.3,
             what="ps and worker Jobs stopped")
    after = runner.status(ref)
    assert (after.state, after.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), after.summary()
    assert after.roles["worker"].succeeded == 1
