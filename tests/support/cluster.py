"""Which Kubernetes cluster the tests run against, and clients for it.

Order: DLC_TEST_KUBECONFIG (a user's own cluster) > the local control plane
(scripts/k8s-local) > k3s through testcontainers when a Docker engine answers.
Outside CI a missing cluster skips the cluster tests with the reason; with CI=true it is an
error (a cluster test never silently skips in CI).
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import Conflict, NotFound
from dlc_airflow.k8s.kinds import NAMESPACE, ResourceKind

REPO = Path(__file__).resolve().parents[2]
K8S_LOCAL = REPO / "scripts" / "k8s-local"
RUNNER_ROLE = "dlc-airflow-job-runner"  # k8s/rbac/role.yaml
SA_NAMESPACE, SA_NAME = "dlc-system", "dlc-airflow"
SERVICE_ACCOUNT = ResourceKind("v1", "ServiceAccount", "serviceaccounts")
ROLE_BINDING = ResourceKind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings")
ROLE = ResourceKind("rbac.authorization.k8s.io/v1", "Role", "roles")


class ClusterUnavailable(Exception):
    pass


@dataclass
class TestCluster:
    admin_kubeconfig: str
    source: str
    local_workdir: str | None = None  # the local control plane's state (fault injection)
    outage_lock: str | None = None  # held exclusively while restart-apiserver runs (scripts/k8s-local)
    _token: str | None = field(default=None, repr=False)

    def admin(self, namespace: str = "default") -> KubeClient:
        return KubeClient.from_kubeconfig(self.admin_kubeconfig, namespace=namespace)

    def restricted(self, namespace: str, *, server: str | None = None, ca_file: str | None = None,
                   **client_options) -> KubeClient:
        """A client as the ServiceAccount that holds only dlc-airflow's documented Role
        (optionally through another server address, e.g. a FaultProxy, with its CA)."""
        from kubernetes import client

        admin = self.admin()
        cfg = client.Configuration()
        cfg.host = server or admin.api.configuration.host
        cfg.ssl_ca_cert = ca_file or admin.api.configuration.ssl_ca_cert
        cfg.verify_ssl = True
        # kubernetes client >= 36 reads "BearerToken", older ones "authorization"
        cfg.api_key = {"BearerToken": self.token(), "authorization": self.token()}
        cfg.api_key_prefix = {"BearerToken": "Bearer", "authorization": "Bearer"}
        return KubeClient(client.ApiClient(cfg), namespace=namespace, **client_options)

    def fault_proxy(self):
        """A FaultProxy in front of this cluster's API server."""
        from tests.support.faultproxy import FaultProxy

        cfg = self.admin().api.configuration
        return FaultProxy(cfg.host, cfg.ssl_ca_cert)

    def token(self) -> str:
        if self._token is None:
            self._token = mint_token(self.admin())
        return self._token

    def restart_apiserver(self) -> None:
        if not self.local_workdir:
            raise ClusterUnavailable("restarting kube-apiserver needs the local control plane")
        subprocess.run([str(K8S_LOCAL), "restart-apiserver"], check=True, timeout=180)
        self.wait_until_jobs_run()

    def wait_until_jobs_run(self, timeout: float = 180) -> None:
        """The controllers reconnect to a restarted API server in their own time (client-go
        backs off: measured up to ~55 s before the Job controller made a pod again): wait
        until a Job runs to Complete, so that what comes next starts on a whole cluster (and
        a control plane that never recovers says so here)."""
        import time

        from dlc_airflow.k8s.kinds import JOB
        from dlc_airflow.status import condition

        admin = self.admin(SA_NAMESPACE)
        name = f"probe-{uuid.uuid4().hex[:8]}"
        admin.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": {
            "backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
                                                     "containers": [{"name": "probe", "image": "probe"}]}}}})
        try:
            deadline = time.monotonic() + timeout
            while not condition(admin.get(JOB, name) or {}, "Complete"):
                if time.monotonic() > deadline:
                    raise AssertionError(f"no Job completes {timeout:.0f} s after the API server restart: "
                                         f"{admin.get(JOB, name)}")
                time.sleep(0.3)
        finally:
            admin.delete(JOB, name)


@contextmanager
def clear_of_outages(cluster: TestCluster) -> Iterator[None]:
    """Hold the cluster's outage lock shared: no restart-apiserver runs meanwhile (one that runs
    is waited for first)."""
    if not cluster.outage_lock:
        yield
        return
    with open(cluster.outage_lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield


def ensure_service_account(admin: KubeClient) -> None:
    from dlc_airflow.k8s.errors import Conflict

    for obj in (
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SA_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SA_NAME, "namespace": SA_NAMESPACE}},
    ):
        try:
            admin.request("POST", _kind(obj).path(obj["metadata"].get("namespace")), body=obj)
        except Conflict:
            pass


def mint_token(admin: KubeClient, hours: int = 6) -> str:
    ensure_service_account(admin)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": hours * 3600}}
    data = admin.request("POST", SERVICE_ACCOUNT.path(SA_NAMESPACE, SA_NAME, "token"), body=body)
    return data["status"]["token"]


def _kind(obj: dict) -> ResourceKind:
    return NAMESPACE if obj["kind"] == "Namespace" else SERVICE_ACCOUNT


def create_test_namespace(admin: KubeClient, prefix: str = "t") -> str:
    """A fresh namespace where the ServiceAccount holds the job-runner Role, with Kueue's
    LocalQueues team-a and team-b when Kueue runs."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.request("POST", NAMESPACE.path(), body={
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"dlc-airflow/test": "true"}}})
    # the rules of this checkout's k8s/rbac/role.yaml, as a Role of the namespace: the tests hold
    # exactly what the repository grants, whatever ClusterRole the cluster was set up with
    admin.request("POST", ROLE.path(name), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": RUNNER_ROLE, "namespace": name}, "rules": runner_rules()})
    admin.request("POST", ROLE_BINDING.path(name), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "dlc-airflow", "namespace": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RUNNER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": SA_NAME, "namespace": SA_NAMESPACE}]})
    if controllers_running()["kueue"]:
        create_local_queues(admin, name)
    wait_until_allowed(admin, name)
    return name


@functools.cache
def runner_rules() -> list[dict]:
    """The rules of k8s/rbac/role.yaml (the job runner's ClusterRole)."""
    import yaml

    return yaml.safe_load((REPO / "k8s" / "rbac" / "role.yaml").read_text())["rules"]


def wait_until_allowed(admin: KubeClient, namespace: str, timeout: float = 30.0) -> None:
    """RBAC takes a moment to see a new RoleBinding: ask the authorizer until it does."""
    import time

    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SA_NAMESPACE}", "system:authenticated"],
        "resourceAttributes": {"namespace": namespace, "verb": "create", "group": "batch", "resource": "jobs"}}}
    deadline = time.monotonic() + timeout
    while True:
        answer = admin.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=review)
        if answer.get("status", {}).get("allowed"):
            return
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"the RoleBinding in {namespace} never took effect: {answer.get('status')}")
        time.sleep(0.1)


def delete_namespace(admin: KubeClient, name: str) -> None:
    try:
        admin.delete(NAMESPACE, name)
    except NotFound:
        pass


def _local_env() -> dict[str, str]:
    out = subprocess.run([str(K8S_LOCAL), "env"], check=True, capture_output=True, text=True).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value
    return env


def _ready(kubeconfig: str) -> bool:
    try:
        KubeClient.from_kubeconfig(kubeconfig, retries=0, timeout=5).request("GET", "/readyz", text=True)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        return False


def _binaries_cached() -> bool:
    out = subprocess.run(["bash", "-c", f"source {REPO}/scripts/k8s-versions.env; "
                          "c=${DLC_K8S_CACHE:-$HOME/.cache/dlc-airflow/k8s}; "
                          "test -f $c/kubernetes-$K8S_VERSION/.complete -a -f $c/etcd-$ETCD_VERSION/.complete "
                          "-a -f $c/kwok-$KWOK_VERSION/.complete"])
    return out.returncode == 0


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-not-found]

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # noqa: BLE001
        return False


def acquire_cluster(in_ci: bool) -> TestCluster:
    own = os.environ.get("DLC_TEST_KUBECONFIG")
    if own:
        if not _ready(own):
            raise ClusterUnavailable(f"DLC_TEST_KUBECONFIG={own}: the API server does not answer /readyz")
        return TestCluster(own, source=f"DLC_TEST_KUBECONFIG ({own})")

    env = _local_env()
    admin = env["DLC_K8S_ADMIN_KUBECONFIG"]
    if not (Path(admin).exists() and _ready(admin)) and (in_ci or _binaries_cached()):
        # CI builds the control plane when the cache is empty; a developer's first run
        # does too once the binaries exist (scripts/k8s-build, ~30 min cold).
        proc = subprocess.run([str(K8S_LOCAL), "up"], capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise ClusterUnavailable(f"scripts/k8s-local up failed:\n{proc.stderr[-3000:]}")
    if Path(admin).exists() and _ready(admin):
        return TestCluster(admin, source="local control plane (scripts/k8s-local)",
                           local_workdir=env.get("DLC_K8S_WORKDIR"), outage_lock=env.get("DLC_K8S_OUTAGE_LOCK"))

    if _docker_answers():
        return _k3s_cluster()
    raise ClusterUnavailable(
        "no Kubernetes cluster: run `scripts/k8s-local up` (builds the control plane from Go "
        "modules once), or set DLC_TEST_KUBECONFIG to your own cluster's kubeconfig"
    )


_k3s = None


def _k3s_cluster() -> TestCluster:
    """k3s through testcontainers (only where a Docker engine answers), with our CRDs and Role."""
    global _k3s
    import yaml
    try:
        from testcontainers.community.k3s import K3SContainer  # type: ignore[import-not-found]
    except ImportError:
        from testcontainers.k3s import K3SContainer  # type: ignore[import-not-found]

    _k3s = K3SContainer().start()
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"dlc-k3s-{uuid.uuid4().hex[:6]}.kubeconfig"
    path.write_text(_k3s.config_yaml())
    admin = KubeClient.from_kubeconfig(str(path))
    manifests = sorted((REPO / "k8s" / "crds").rglob("*.yaml")) + [REPO / "k8s" / "rbac" / "role.yaml"]
    for manifest in manifests:
        for obj in yaml.safe_load_all(manifest.read_text()):
            if obj:
                admin.request("POST", CLUSTER_SCOPED[obj["kind"]].path(), body=obj)
    return TestCluster(str(path), source="k3s (testcontainers)")


CLUSTER_SCOPED = {
    "CustomResourceDefinition": ResourceKind("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                             "customresourcedefinitions", namespaced=False),
    "ClusterRole": ResourceKind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False),
}


K8S_CONTROLLERS = REPO / "scripts" / "k8s-controllers"
CONTROLLERS = ("kueue", "jobset", "training-operator", "trainer", "kuberay")


@functools.cache
def controllers_running() -> dict[str, bool]:
    """Which of the local control plane's job controllers run (scripts/k8s-controllers status;
    asked once a session)."""
    out = subprocess.run([str(K8S_CONTROLLERS), "status"], capture_output=True, text=True, timeout=30).stdout
    running = {line.split()[0]: ": running" in line for line in out.splitlines() if line.strip()}
    return {name: running.get(name, False) for name in CONTROLLERS}


LOCAL_QUEUE = ResourceKind("kueue.x-k8s.io/v1beta2", "LocalQueue", "localqueues")


def ensure_local_queue(admin: KubeClient, namespace: str, cluster_queue: str) -> None:
    """A Kueue LocalQueue named after its ClusterQueue, in a namespace (kept if it exists)."""
    body = {"apiVersion": LOCAL_QUEUE.api_version, "kind": "LocalQueue",
            "metadata": {"name": cluster_queue, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}
    try:
        admin.request("POST", LOCAL_QUEUE.path(namespace), body=body)
    except Conflict:
        pass


def create_local_queues(admin: KubeClient, namespace: str, timeout: float = 60.0) -> None:
    """Kueue LocalQueues team-a and team-b (k8s/cluster/kueue.yaml's ClusterQueues) in a namespace,
    once Kueue has taken them in (their Active condition): a job Kueue sees before its queue
    is never admitted (after an API server restart, Kueue's caches fill in a few seconds)."""
    for team in ("team-a", "team-b"):
        ensure_local_queue(admin, namespace, team)
    wait_local_queues_active(admin, namespace, ("team-a", "team-b"), timeout)


def wait_local_queues_active(admin: KubeClient, namespace: str, names: tuple[str, ...], timeout: float = 60.0) -> None:
    """Until Kueue has taken in the LocalQueues `names` of a namespace (their Active condition)."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        queues, _ = admin.list(LOCAL_QUEUE, namespace)
        active = {q["metadata"]["name"] for q in queues
                  if any(c.get("type") == "Active" and c.get("status") == "True"
                         for c in (q.get("status") or {}).get("conditions") or [])}
        if active >= set(names):
            return
        if time.monotonic() > deadline:
            raise ClusterUnavailable(f"Kueue did not take in the LocalQueues {list(names)} of {namespace} "
                                     f"in {timeout:.0f}s")
        time.sleep(0.2)


def pod_logs(admin: KubeClient, namespace: str, path) -> Callable[[], None]:
    """Every pod of the namespace 'prints' the file at `path` (kwok ClusterLogs; lines as the
    kubelet serves them: `<RFC 3339 time> stdout F <line>`); returns the undo."""
    name = f"logs-{namespace}"
    admin.request("POST", "/apis/kwok.x-k8s.io/v1alpha1/clusterlogs", body={
        "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs", "metadata": {"name": name},
        "spec": {"selector": {"matchNamespaces": [namespace]},
                 "logs": [{"containers": [], "logsFile": str(path), "follow": False}]}})
    return lambda: admin.request("DELETE", f"/apis/kwok.x-k8s.io/v1alpha1/clusterlogs/{name}")
