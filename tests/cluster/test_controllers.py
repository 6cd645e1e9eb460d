"""The CRD backends through their real controllers on the local control plane.

Kueue, JobSet, the Training Operator, Trainer and KubeRay run beside the API server
(scripts/k8s-controllers), built from the module versions in scripts/k8s-versions.env, with
their admission webhooks registered; kwok runs the pods they create. A RayJob needs more:
KubeRay reads its state from a real Ray head's dashboard, so Ray jobs run to their end on the
real node (tests/node/test_frameworks.py); here KubeRay's webhook and CRDs are checked.

1. The CRDs in k8s/crds are the controllers' own, and every controller serves its webhooks.
2. Every (type, backend) pair the CRD backends support (but Ray's) runs to SUCCEEDED: the controller makes
   the pods, and our status is read from the controller's own status.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from dlc_airflow import reasons
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.k8s.kinds import JOB, JOBSET, POD, PYTORCH_JOB, TRAIN_JOB, ResourceKind, ref_kinds
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, condition
from tests.cluster.polling import wait_all_terminal, wait_for, wait_state
from tests.cluster.specs import (
    CLUSTER_QUEUE,
    COMMAND,
    IDENTITY,
    IMAGE,
    RICH_ROLES,
    SUPPORTED,
    TRAINER_ROLES,
    unique_name,
)
from tests.support.cluster import REPO, create_test_namespace, delete_namespace

CRD_BACKENDS = ("kubeflow", "trainer", "jobset", "ray")
# a Ray job's end is its head's word: on kwok pods no head answers (tests/node runs Ray for real)
PAIRS = [(t, b) for t, b in SUPPORTED if b in CRD_BACKENDS and b != "ray"]
CACHE = Path.home() / ".cache" / "dlc-airflow" / "k8s"
# k8s/crds/<folder>: the controller and where its module keeps the CRDs (scripts/k8s-build crds)
CRD_SOURCES = {
    "kueue": ("kueue", "config/components/crd/bases"),
    "jobset": ("jobset", "config/components/crd/bases"),
    "kubeflow-v1": ("training-operator", "config/base/crds"),
    "kubeflow-trainer-v2": ("trainer", "config/base/crds"),
    "kuberay": ("kuberay", "config/crd/bases"),
}
VERSION_KEYS = {"kueue": "KUEUE_VERSION", "jobset": "JOBSET_VERSION", "training-operator": "TRAINING_OPERATOR_VERSION",
                "trainer": "TRAINER_VERSION", "kuberay": "KUBERAY_VERSION"}
MUTATING = ResourceKind("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
                        "mutatingwebhookconfigurations", namespaced=False)
VALIDATING = ResourceKind("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
                          "validatingwebhookconfigurations", namespaced=False)
RAY_CLUSTER = ResourceKind("ray.io/v1", "RayCluster", "rayclusters")


def versions() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (REPO / "scripts" / "k8s-versions.env").read_text().splitlines()
             if "=" in line and not line.startswith("#"))
    return {key: value for key, value in pairs}


# -- 1. the controllers and their webhooks ------------------------------------------------------


def test_the_crds_are_the_controllers_own(controllers):
    pinned = versions()
    for folder, (controller, source) in CRD_SOURCES.items():
        upstream = CACHE / f"{controller}-{pinned[VERSION_KEYS[controller]]}" / source
        ours = REPO / "k8s" / "crds" / folder
        names = sorted(p.name for p in upstream.glob("*.yaml") if p.name != "kustomization.yaml")
        assert names and names == sorted(p.name for p in ours.glob("*.yaml")), (folder, names)
        _, mismatch, errors = filecmp.cmpfiles(upstream, ours, names, shallow=False)
        assert mismatch == errors == [], f"k8s/crds/{folder} differs from {controller}'s: run scripts/k8s-build crds"


def test_every_controller_serves_its_webhooks_on_this_host(controllers, admin):
    configs = admin.list(MUTATING)[0] + admin.list(VALIDATING)[0]
    ours = [c for c in configs if "dlc-airflow.io/local-controller" in (c["metadata"].get("labels") or {})]
    by_controller: dict[str, set[str]] = {}
    for config in ours:
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["url"].startswith("https://127.0.0.1:"), hook["name"]
            assert hook["clientConfig"]["caBundle"] and "service" not in hook["clientConfig"]
        by_controller.setdefault(config["metadata"]["labels"]["dlc-airflow.io/local-controller"], set()).add(
            config["kind"])
    assert by_controller == {
        "kueue": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"},
        "jobset": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"},
        "training-operator": {"ValidatingWebhookConfiguration"},
        "trainer": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"},
        "kuberay": {"ValidatingWebhookConfiguration"},
    }


@pytest.fixture
def webhook_namespace(controllers, admin):
    ns = create_test_namespace(admin, prefix="wh")
    yield ns
    delete_namespace(admin, ns)


def refused(admin, kind: ResourceKind, namespace: str, obj: dict) -> str:
    """The API server's answer to creating `obj` (it must refuse it)."""
    path = kind.path(namespace if kind.namespaced else None)
    with pytest.raises(KubeError) as err:
        admin.request("POST", path, body=obj)
    return str(err.value)


def test_the_validating_webhooks_refuse_what_the_controllers_would(webhook_namespace, admin):
    """Each controller's own validation answers: objects the CRD schema accepts are refused by
    the controller's webhook, with its message."""
    meta = {"name": "bad"}
    container = {"name": "not-pytorch", "image": IMAGE}
    # Training Operator: the replica's container must be named pytorch
    text = refused(admin, PYTORCH_JOB, webhook_namespace, {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {"containers": [container]}}}}}})
    assert "validator.pytorchjob.training-operator.kubeflow.org" in text and "pytorch" in text
    # Trainer: the runtime must exist
    text = refused(admin, TRAIN_JOB, webhook_namespace, {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
        "spec": {"runtimeRef": {"name": "no-such-runtime"}}})
    assert "trainer.kubeflow.org" in text and "no-such-runtime" in text
    # JobSet: failure policy rules take only the Job failure reasons it knows
    text = refused(admin, JOBSET, webhook_namespace, {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
        "spec": {"failurePolicy": {"rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["Nope"]}]},
                 "replicatedJobs": [{"name": "w", "template": {"spec": {"template": {"spec": {
                     "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE}]}}}}}]}})
    assert "vjobset.kb.io" in text and "Nope" in text
    # KubeRay: a RayCluster's worker groups need distinct names
    group = {"groupName": "g", "replicas": 1, "rayStartParams": {},
             "template": {"spec": {"containers": [{"name": "ray-worker", "image": IMAGE}]}}}
    text = refused(admin, RAY_CLUSTER, webhook_namespace, {
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
            {"name": "ray-head", "image": IMAGE}]}}}, "workerGroupSpecs": [group, group]}})
    assert "vraycluster.kb.io" in text
    # Kueue: a ClusterQueue may borrow only inside a cohort
    text = refused(admin, CLUSTER_QUEUE, webhook_namespace, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "bad-cq"},
        "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "on-demand", "resources": [
            {"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]}]}]}})
    assert "borrowingLimit" in text


def test_the_defaulting_webhooks_default_what_we_left_out(webhook_namespace, admin, cluster):
    """Kueue suspends a queued Job at creation (its mutating webhook); JobSet's webhook fills
    in the startup policy we do not set."""
    kube = cluster.restricted(webhook_namespace)
    job = DLCJob(type="batch", image=IMAGE, command=list(COMMAND), roles={"worker": 1})
    native = get_backend("native")
    obj = next(o for o in native.render(job, unique_name("kq"), IDENTITY, 1) if o["kind"] == JOB.kind)
    obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    obj["spec"]["suspend"] = False
    created = kube.create(obj)
    assert created["spec"]["suspend"] is True  # Kueue's webhook, not us
    assert created["kind"] == JOB.kind
    js_runner = KubeRunner(kube, get_backend("jobset"))
    ref, _ = js_runner.submit(job, unique_name("js"), IDENTITY, 1)
    stored = kube.get(JOBSET, ref.name)
    assert stored["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}


# -- 2. every pair to SUCCEEDED through its controller ------------------------------------------


def roles_for(job_type: str, backend: str) -> dict:
    if backend == "trainer":
        return TRAINER_ROLES[job_type]
    return RICH_ROLES[job_type]


@pytest.fixture(scope="module")
def finished(controllers, admin):
    """Every pair submitted at once as the restricted identity, run to its end."""
    ns = create_test_namespace(admin, prefix="ctl")
    kube = controllers.restricted(ns)
    runners = {backend: KubeRunner(kube, get_backend(backend)) for backend in {b for _, b in PAIRS}}
    refs = {}
    try:
        for job_type, backend in PAIRS:
            job = DLCJob(type=job_type, image=IMAGE, command=list(COMMAND), roles=roles_for(job_type, backend))
            name = unique_name(f"{job_type[:5]}-{backend[:4]}")
            refs[(job_type, backend)], _ = runners[backend].submit(job, name, IDENTITY, 1)
        statuses = {}
        for backend, runner in runners.items():
            mine = {f"{t}-{b}": ref for (t, b), ref in refs.items() if b == backend}
            done = wait_all_terminal(runner, mine, timeout=180)
            statuses.update({(t, b): done[f"{t}-{b}"] for (t, b) in refs if b == backend})
        yield kube, admin, refs, statuses
    finally:
        delete_namespace(admin, ns)


# What each controller says of a success, in its own status.
def controller_says_succeeded(backend: str, obj: dict) -> bool:
    st = obj.get("status") or {}
    if backend == "kubeflow":
        return condition(obj, "Succeeded") is not None
    if backend == "jobset":
        return condition(obj, "Completed") is not None and st.get("terminalState") == "Completed"
    assert backend == "trainer", backend
    return condition(obj, "Complete") is not None


# Who owns the pods: the controller's objects, never ours directly (but the Training Operator's).
POD_OWNERS = {"kubeflow": {"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob"}, "jobset": {"Job"}, "trainer": {"Job"}}


@pytest.mark.parametrize("job_type, backend", PAIRS, ids=[f"{t}-{b}" for t, b in PAIRS])
def test_every_pair_succeeds_through_its_controller(finished, job_type, backend):
    kube, admin, refs, statuses = finished
    ref, status = refs[(job_type, backend)], statuses[(job_type, backend)]
    assert (status.state, status.reason) == (JobState.SUCCEEDED, reasons.COMPLETED), status.summary()
    primary = kube.get(ref_kinds(ref)[0], ref.name)
    assert controller_says_succeeded(backend, primary), primary.get("status")
    pods = [p for p in admin.list(POD, kube.namespace)[0] if p["metadata"]["name"].startswith(ref.name)]
    assert pods, "the controller made no pods"
    owners = {o["kind"] for p in pods for o in p["metadata"].get("ownerReferences") or []}
    assert owners and owners <= POD_OWNERS[backend], owners
    assert all(p["status"]["phase"] in ("Succeeded", "Running", "Pending") for p in pods)


# -- 3. the env each framework gets from its controller, on the real pods -----------------------

TORCH_TYPES = ("pytorch", "deepspeed", "megatron")


def expected_env(job_type: str, backend: str, name: str, role: str) -> tuple[dict[str, str | None], set[str]]:
    """What the controller sets (None: any value) and what it must not set, for a pod of `role`."""
    if backend == "kubeflow" and job_type in TORCH_TYPES:  # the operator, given a Master
        return {"MASTER_ADDR": f"{name}-master-0", "MASTER_PORT": None, "RANK": None, "WORLD_SIZE": None}, set()
    if backend == "kubeflow" and job_type == "xgboost":
        return {"MASTER_ADDR": f"{name}-master-0", "WORKER_ADDRS": None, "RANK": None, "WORLD_SIZE": None}, set()
    if backend == "kubeflow" and job_type == "tensorflow":
        return {"TF_CONFIG": None}, set()
    if backend == "kubeflow" and job_type == "mpi":
        return ({"OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile"} if role == "launcher" else {}), set()
    if backend == "trainer":  # torchrun's PET_* only (README: the job controllers)
        return ({"PET_NNODES": None, "PET_NODE_RANK": None, "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
                 "PET_MASTER_PORT": "29500"}, {"MASTER_ADDR", "RANK", "WORLD_SIZE"})
    # jobset: no controller env, ours (as on native)
    if job_type in TORCH_TYPES:
        return {"MASTER_ADDR": None, "RANK": None, "WORLD_SIZE": None}, set()
    return {}, set()


@pytest.mark.parametrize("job_type, backend", PAIRS, ids=[f"{t}-{b}" for t, b in PAIRS])
def test_the_controllers_env_on_the_real_pods(finished, job_type, backend):
    from tests.cluster.podenv import container_env

    kube, admin, refs, _ = finished
    ref = refs[(job_type, backend)]
    pods = [p for p in admin.list(POD, kube.namespace)[0] if p["metadata"]["name"].startswith(ref.name)]
    assert pods
    for pod in pods:
        role = pod["metadata"]["labels"].get("dlc-airflow/role", "")
        env = container_env(pod, pod["spec"]["containers"][0]["name"])
        wanted, unwanted = expected_env(job_type, backend, ref.name, role)
        for key, value in wanted.items():
            assert key in env and (value is None or env[key] == value), (pod["metadata"]["name"], key, env.get(key))
        assert not unwanted & set(env), (pod["metadata"]["name"], unwanted & set(env))
        assert env.get("DLC_JOB_NAME") == ref.name


# -- 4. failures through the controllers ---------------------------------------------------------

CHAOS = "pod-container-running-failed.stage.kwok.x-k8s.io"


def failing(exit_code: int) -> dict:
    """kwok fails every container of the job's pods with `exit_code`."""
    return {"labels": {CHAOS: "true"}, "annotations": {f"{CHAOS}/exit-code": str(exit_code), f"{CHAOS}/delay": "0s"}}


FAILURES = {
    # exit 3 is not retryable: no restart
    ("permanent", "kubeflow"): dict(type="pytorch", roles={"master": 1, "worker": 1},
                                    fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]}, **failing(3)),
    ("permanent", "jobset"): dict(type="pytorch", roles={"master": 1, "worker": 1},
                                  fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]}, **failing(3)),
    # exit 137 is retryable: one restart, then the restart budget is used up
    ("retryable", "kubeflow"): dict(type="pytorch", roles={"master": 1, "worker": 1},
                                    fault_tolerance={"max_restarts": 1, "retryable_exit_codes": [137]}, **failing(137)),
    ("retryable", "jobset"): dict(type="pytorch", roles={"master": 1, "worker": 1},
                                  fault_tolerance={"max_restarts": 1, "retryable_exit_codes": [137]}, **failing(137)),
}


@pytest.fixture(scope="module")
def failed(controllers, admin):
    ns = create_test_namespace(admin, prefix="ctf")
    kube = controllers.restricted(ns)
    runners = {backend: KubeRunner(kube, get_backend(backend)) for backend in ("kubeflow", "jobset")}
    try:
        refs = {key: runners[key[1]].submit(DLCJob(image=IMAGE, command=list(COMMAND), **spec),
                                            unique_name(f"{key[0][:4]}-{key[1][:4]}"), IDENTITY, 1)[0]
                for key, spec in FAILURES.items()}
        statuses = {}
        # the Training Operator restarts an ExitCode-policy replica without end (below)
        endless = ("retryable", "kubeflow")
        statuses[endless] = wait_state(runners["kubeflow"], refs[endless], {JobState.RESTARTING}, timeout=60)
        for backend, runner in runners.items():
            mine = {f"{k[0]}-{k[1]}": ref for k, ref in refs.items() if k[1] == backend and k != endless}
            done = wait_all_terminal(runner, mine, timeout=240)
            statuses.update({k: done[f"{k[0]}-{k[1]}"] for k in refs if k[1] == backend and k != endless})
        yield statuses, kube, admin, runners, refs
    finally:
        delete_namespace(admin, ns)


@pytest.mark.parametrize("backend", ["kubeflow", "jobset"])
def test_a_permanent_exit_code_fails_the_job_at_once(failed, backend):
    status = failed[0][("permanent", backend)]
    assert (status.state, status.reason) == (JobState.FAILED, reasons.NON_RETRYABLE_EXIT), status.summary()
    assert "exited with code 3" in status.message and status.restarts == 0, status.summary()


def test_a_retryable_failure_restarts_then_uses_up_the_budget(failed):
    status = failed[0][("retryable", "jobset")]
    assert (status.state, status.reason) == (JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED), status.summary()
    assert status.restarts >= 1 and "137" in status.message, status.summary()


def test_the_training_operator_restarts_a_retryable_exit_code(failed):
    """Under the ExitCode policy the operator recreates a replica that exited 128-255, and counts no
    backoff for it (runPolicy.backoffLimit is not reached this way: README, the job controllers).
    Our status says RESTARTING, counted; stopping it (runPolicy.suspend) leaves no pod behind and keeps
    the job, STOPPED."""
    statuses, kube, admin, runners, refs = failed
    key = ("retryable", "kubeflow")
    status = statuses[key]
    assert status.state is JobState.RESTARTING and status.restarts >= 1 and "restarting" in status.message
    runners["kubeflow"].stop(refs[key])
    name = refs[key].name
    wait_for(lambda: not [p for p in admin.list(POD, kube.namespace)[0] if p["metadata"]["name"].startswith(name)],
             timeout=60, what="the job's pods to go")
    assert kube.get(PYTORCH_JOB, name) is not None
    assert runners["kubeflow"].status(refs[key]).state is JobState.STOPPED
