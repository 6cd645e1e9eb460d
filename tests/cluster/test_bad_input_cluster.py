"""The bad-input catalogue, the cases that reach the API server (issue 9, item 6): as the
restricted identity, each is (a) refused, (b) with one message naming the object, the field
or the API call, (c) leaving no object labelled app.kubernetes.io/managed-by=dlc-airflow.

- REFUSED_AT_SUBMIT: the API server refuses a create (ResourceQuota, a ValidatingAdmission-
  Policy of the admin's, RBAC in a namespace the identity has no Role in); a half-made job
  is removed by the submit itself.
- POD_SECURITY: the namespace enforces Pod Security `baseline` (one case `restricted`): the
  Job is created but its pods never are; the wait fails within queue_timeout with the API
  server's message and the job is stopped.
- RENDERED: templates that render into bad values at run time (dag.test, the operator as
  the task runs it): refused before any API call.

The pure cases (spec, files, operator, sensor, pipelines, CLI) are in
tests/unit/test_bad_input_catalogue.py.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from dlc_airflow import reasons
from dlc_airflow.airflow.waiting import wait_sync
from dlc_airflow.finish import OnFinish, finish
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.kinds import CONFIG_MAP, JOB, NAMESPACE, SERVICE, ResourceKind
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.naming import MANAGED_BY, TaskIdentity
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from dlc_airflow.submission import submit_or_adopt
from tests.airflow.conftest import airflow_db, dag_files, k8s_conn  # noqa: F401 - fixtures used below
from tests.cluster.polling import wait_for
from tests.support.cluster import SA_NAME, SA_NAMESPACE, create_test_namespace, delete_namespace

IMAGE = "registry.local/train:1"
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
SA = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
QUOTA = ResourceKind("v1", "ResourceQuota", "resourcequotas")
VAP = ResourceKind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies",
                   namespaced=False)
VAP_BINDING = ResourceKind("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding",
                           "validatingadmissionpolicybindings", namespaced=False)
KINDS = {  # every kind a backend creates, to look for leftovers
    "native": (JOB, SERVICE, CONFIG_MAP),
    "jobset": (ResourceKind("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"), SERVICE, CONFIG_MAP),
    "kubeflow": (ResourceKind("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
                 ResourceKind("kubeflow.org/v1", "MPIJob", "mpijobs"), CONFIG_MAP),
    "trainer": (ResourceKind("trainer.kubeflow.org/v1alpha1", "TrainJob", "trainjobs"), CONFIG_MAP),
    "ray": (ResourceKind("ray.io/v1", "RayJob", "rayjobs"),),
}
LOG = logging.getLogger("catalogue")


def job(job_type: str = "pytorch", roles: dict | None = None, **kw) -> DLCJob:
    default = {"pytorch": {"master": 1, "worker": 2}, "mpi": {"launcher": 1, "worker": 2}, "batch": {"worker": 2},
               "ray": {"head": 1, "worker": 1}, "tensorflow": {"chief": 1, "ps": 1, "worker": 2},
               "xgboost": {"master": 1, "worker": 1}}[job_type]
    return DLCJob(type=job_type, image=IMAGE, command=["train"], roles=roles or default,
                  annotations={RUN_FOR: "2s"}, **kw)


def identity() -> TaskIdentity:
    return TaskIdentity("catalogue", "train", f"run-{uuid.uuid4().hex[:8]}", try_number=1)


def managed(kube, kinds=KINDS["native"]) -> list[tuple[str, str]]:
    return [(k.kind, o["metadata"]["name"]) for k in kinds for o in kube.list(k, labels={MANAGED_BY: "dlc-airflow"})[0]]


def nothing_left(kube, backend: str = "native") -> None:
    wait_for(lambda: not managed(kube, KINDS[backend]), timeout=30, what="no dlc-airflow object left")


def one_line(message: str, words: list[str]) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    missing = [w for w in words if w not in message]
    assert not missing, f"message does not say {missing}: {message}"


# -- refused at submit ------------------------------------------------------------------------
def _quota(admin, namespace: str, hard: dict[str, str]) -> None:
    admin.request("POST", QUOTA.path(namespace), body={"apiVersion": "v1", "kind": "ResourceQuota",
                                                       "metadata": {"name": "catalogue"}, "spec": {"hard": hard}})

    def in_force() -> bool:  # the quota controller fills in status.hard once it enforces it
        return bool(admin.request("GET", QUOTA.path(namespace, "catalogue")).get("status", {}).get("hard"))

    wait_for(in_force, timeout=30, what="the ResourceQuota in force")


QUOTA_CASES = {
    # (backend, job, quota, the words): a multi-object job refused half way leaves nothing
    "second role Job over a jobs quota": ("native", job(), {"count/jobs.batch": "1"},
                                          ["Job ", "-worker", "exceeded quota", "count/jobs.batch"]),
    "Service over a services quota": ("native", job(), {"count/services": "0"},
                                      ["Service ", "exceeded quota", "count/services"]),
    "MPI hostfile over a configmaps quota": ("native", job("mpi"), {"count/configmaps": "1"},
                                             ["ConfigMap ", "exceeded quota", "count/configmaps"]),
    "tensorflow ps Job over a jobs quota": ("native", job("tensorflow"), {"count/jobs.batch": "2"},
                                            ["Job ", "exceeded quota"]),
    "JobSet over its quota": ("jobset", job("batch"), {"count/jobsets.jobset.x-k8s.io": "0"},
                              ["JobSet ", "exceeded quota", "count/jobsets.jobset.x-k8s.io"]),
    "PyTorchJob over its quota": ("kubeflow", job(), {"count/pytorchjobs.kubeflow.org": "0"},
                                  ["PyTorchJob ", "exceeded quota"]),
    "MPIJob over its quota": ("kubeflow", job("mpi"), {"count/mpijobs.kubeflow.org": "0"},
                              ["MPIJob ", "exceeded quota", "count/mpijobs.kubeflow.org"]),
    "TrainJob over its quota": ("trainer", job(roles={"worker": 2}), {"count/trainjobs.trainer.kubeflow.org": "0"},
                                ["TrainJob ", "exceeded quota"]),
    "RayJob over its quota": ("ray", job("ray"), {"count/rayjobs.ray.io": "0"}, ["RayJob ", "exceeded quota"]),
}


@pytest.mark.parametrize("backend, spec, hard, words", QUOTA_CASES.values(), ids=QUOTA_CASES.keys())
def test_quota_refusals(kube, admin, namespace, backend, spec, hard, words):
    from dlc_airflow.errors import SubmitError

    _quota(admin, namespace, hard)
    runner = KubeRunner(kube, get_backend(backend))
    with pytest.raises(SubmitError) as err:
        submit_or_adopt(runner, spec, identity(), base_name="quota")
    one_line(str(err.value), ["submitting job quota-", f"to namespace {namespace}", *words])
    # a quota frees as the namespace's other jobs end: the retry policy decides (reason QuotaExceeded)
    assert not err.value.permanent and err.value.reason == reasons.QUOTA_EXCEEDED
    nothing_left(kube, backend)


@pytest.fixture
def admission_policy(admin, namespace):
    """The admin's ValidatingAdmissionPolicy in this namespace only: every Job and JobSet
    needs a `team` label."""
    name = f"dlc-catalogue-{namespace}"
    admin.request("POST", VAP.path(), body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["batch", "jobset.x-k8s.io"], "apiVersions": ["*"],
                                                    "operations": ["CREATE"], "resources": ["jobs", "jobsets"]}]},
            "validations": [{"expression": "has(object.metadata.labels) && 'team' in object.metadata.labels",
                             "message": "every job needs a team label"}]}})
    admin.request("POST", VAP_BINDING.path(), body={
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"], "matchResources": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})
    probe = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": IMAGE}]}}}}

    def in_force() -> bool:  # a policy takes a moment to reach the admission plugin
        from dlc_airflow.k8s.errors import KubeError

        try:
            admin.create(probe, namespace, dry_run=True)
            return False
        except KubeError:
            return True

    wait_for(in_force, timeout=30, what="the admission policy in force")
    yield name
    for kind in (VAP_BINDING, VAP):
        admin.request("DELETE", kind.path(None, name))


ADMISSION_CASES = {
    "native Job without the label": ("native", job(), ["Job quota-", "-master", "ValidatingAdmissionPolicy",
                                                        "every job needs a team label"]),
    "native batch Job without the label": ("native", job("batch"), ["Job quota-", "every job needs a team label"]),
    "JobSet without the label": ("jobset", job("batch"), ["JobSet quota-", "every job needs a team label"]),
}


@pytest.mark.parametrize("backend, spec, words", ADMISSION_CASES.values(), ids=ADMISSION_CASES.keys())
def test_admission_policy_refusals(kube, admission_policy, backend, spec, words):
    from dlc_airflow.errors import SubmitError

    runner = KubeRunner(kube, get_backend(backend))
    with pytest.raises(SubmitError) as err:
        submit_or_adopt(runner, spec, identity(), base_name="quota")
    one_line(str(err.value), [*words, admission_policy])
    nothing_left(kube, backend)
    # the same job with the label the admin asks for is admitted
    labelled = spec.model_copy(update={"labels": {"team": "ml"}})
    runner.delete(submit_or_adopt(runner, labelled, identity(), base_name="quota").ref)


@pytest.fixture
def unbound_namespace(admin):
    """A namespace where the restricted identity holds no Role."""
    name = f"nobind-{uuid.uuid4().hex[:8]}"
    admin.request("POST", NAMESPACE.path(), body={"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": name, "labels": {"dlc-airflow/test": "true"}}})
    yield name
    delete_namespace(admin, name)


RBAC_CASES = {
    "native": ("native", job(), "jobs.batch"),
    "jobset": ("jobset", job("batch"), "jobsets.jobset.x-k8s.io"),
    "kubeflow": ("kubeflow", job(), "pytorchjobs.kubeflow.org"),
    "trainer": ("trainer", job(roles={"worker": 2}), "trainjobs.trainer.kubeflow.org"),
    "ray": ("ray", job("ray"), "rayjobs.ray.io"),
}


@pytest.mark.parametrize("backend, spec, resource", RBAC_CASES.values(), ids=RBAC_CASES.keys())
def test_a_namespace_without_the_role(cluster, admin, unbound_namespace, backend, spec, resource):
    from dlc_airflow.k8s.errors import Forbidden

    kube = cluster.restricted(unbound_namespace)
    with pytest.raises(Forbidden) as err:
        submit_or_adopt(KubeRunner(kube, get_backend(backend)), spec, identity(), base_name="rbac")
    assert err.value.identity == SA
    # the message names the identity once, in the short form (ServiceAccount <namespace>/<name>)
    one_line(str(err.value), [f"ServiceAccount {SA_NAMESPACE}/{SA_NAME}", resource, f"namespace {unbound_namespace!r}",
                              "Role and RoleBinding"])
    assert err.value.permanent
    assert managed(cluster.admin(unbound_namespace), KINDS[backend]) == []  # seen as the admin


# -- Pod Security ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pod_security(cluster):
    """One namespace per level, as the admin labels them; the restricted identity submits."""
    admin = cluster.admin()
    made: dict[str, str] = {}

    def namespace(level: str):
        if level not in made:
            made[level] = create_test_namespace(admin, prefix=f"psa-{level[:4]}")
            admin.patch(NAMESPACE, made[level], {"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": level}}})
        return cluster.restricted(made[level])

    yield namespace
    for name in made.values():
        delete_namespace(admin, name)


HOST = {"type": "host_path", "path": "/mnt/datasets", "mount_path": "/data", "read_only": True}
POD_SECURITY = {
    # (level, job, words): the server's own reason reaches the task, naming the volume or field
    "host path in a batch job": ("baseline", job("batch", storage=[HOST]),
                                 ['violates PodSecurity "baseline', "hostPath volumes", '"hostpath-0"']),
    "host path in a pytorch job": ("baseline", job(storage=[HOST]), ['PodSecurity "baseline', "hostPath"]),
    "host path in an MPI job": ("baseline", job("mpi", storage=[HOST]), ['PodSecurity "baseline', "hostPath"]),
    "host path in a tensorflow job": ("baseline", job("tensorflow", storage=[HOST]), ["hostPath volumes"]),
    "two host paths": ("baseline", job("xgboost", storage=[HOST, {**HOST, "path": "/mnt/b", "mount_path": "/b"}]),
                       ["hostPath volumes", '"hostpath-0"', '"hostpath-1"']),
    "host path with a code source": ("baseline", job("batch", storage=[HOST],
                                                     code={"repo": "https://git.example.com/ml/x.git"}),
                                     ["hostPath volumes"]),
    "any job under restricted": ("restricted", job("batch"), ['PodSecurity "restricted', "allowPrivilegeEscalation",
                                                              "runAsNonRoot"]),
}


@pytest.mark.parametrize("level, spec, words", POD_SECURITY.values(), ids=POD_SECURITY.keys())
def test_pod_security(pod_security, level, spec, words):
    kube = pod_security(level)
    runner = KubeRunner(kube, get_backend("native"))
    start = time.monotonic()
    sub = submit_or_adopt(runner, spec, identity(), base_name="psa")
    verdict, pods = wait_sync(runner, sub.ref, LOG, queue_timeout=12, timeout=None, stream_logs=False)
    outcome = finish(runner, sub.ref, verdict, pods, on_finish=OnFinish.KEEP, log=LOG, owner_try=1)
    assert not outcome.ok and time.monotonic() - start < 60
    one_line(outcome.error or "", [f"job {sub.ref.name} could not start within queue_timeout (12s)", *words])
    assert runner.status(sub.ref).state is JobState.STOPPED  # stopped, and kept (on_finish='keep')
    assert runner.pods(sub.ref) == []  # none was ever admitted


def test_baseline_admits_the_jobs_we_render(pod_security):
    """The control case: what the spec can express without host paths passes `baseline`."""

    kube = pod_security("baseline")
    runner = KubeRunner(kube, get_backend("native"))
    sub = submit_or_adopt(runner, job(storage=[{"type": "empty_dir", "mount_path": "/scratch"}],
                                      resources={"shared_memory": "1Gi"}), identity(), base_name="ok")
    verdict, pods = wait_sync(runner, sub.ref, LOG, queue_timeout=60, timeout=120, stream_logs=False)
    assert verdict.status.state is JobState.SUCCEEDED, verdict.message
    runner.delete(sub.ref)


# -- rendered at run time -------------------------------------------------------------------
RENDERED = {
    "image": ({"image": "{{ 'Registry.Example.com/Train:1' }}"}, ["image", "lowercase"]),
    "role image": ({"roles": {"master": 1, "worker": {"replicas": 2, "image": "{{ 'reg/x::1' }}"}}},
                   ["roles.worker.image", "one tag at most"]),
    "git revision": ({"code": {"repo": "https://git.example.com/ml/x.git", "revision": "{{ 'main; reboot' }}"}},
                     ["code.revision", "';'"]),
    "git repo": ({"code": {"repo": "{{ 'not a url' }}"}}, ["code.repo", "scp-like"]),
    "label value": ({"labels": {"run": "{{ 'a b' }}"}}, ["labels", "run"]),
    "memory": ({"resources": {"memory": "{{ '16GB' }}"}}, ["resources.memory", "quantity"]),
}


@pytest.mark.airflow
@pytest.mark.parametrize("overrides, words", RENDERED.values(), ids=RENDERED.keys())
def test_rendered_values(kube, k8s_conn, dag_files, capfd, overrides, words):  # noqa: F811 - pytest fixtures
    spec = {"type": "pytorch", "image": IMAGE, "command": ["train"], "roles": {"master": 1, "worker": 2}, **overrides}
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=spec, deferrable=False)
    ti = dag.test().get_task_instance("train")
    assert ti.state == "failed"
    text = "".join(capfd.readouterr())
    failure = [line for line in text.splitlines() if "invalid job of task train" in line]
    assert failure, text[-3000:]
    one_line(failure[-1], words)
    assert managed(kube) == []


CASE_COUNT = sum(len(t) for t in (QUOTA_CASES, ADMISSION_CASES, RBAC_CASES, POD_SECURITY, RENDERED))
