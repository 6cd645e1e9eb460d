"""Every job type on every backend that runs it, against the real API server (CRDs installed).

1. Accepted: each (type, backend) pair the backend's own `check` allows, in a minimal and a
   fully-featured spec, is sent with server-side dry-run (strict field validation: an unknown
   field is an error, not a silently pruned warning), then created for real through
   KubeRunner.submit, as the restricted identity holding only dlc-airflow's Role. The server's
   copy keeps every field we sent. Pod templates are checked as pods too: the native Job
   controller must create every pod (the Priority and ServiceAccount admission plugins see
   them), once Kueue admits a queued one; the pod templates inside CRDs are also sent as Pods
   with dry-run, as their controllers would create them (tests/cluster/test_controllers.py
   runs them through the controllers).
2. Unsupported pairs are refused before any API call, in one line naming type and backend.
3. Native jobs of every type run to Complete on kwok nodes through the real Job controller,
   and the real pod objects carry the env each framework reads (resolved as the kubelet and
   the container's shell would: tests/cluster/podenv.py); every rendezvous host names a pod
   hostname.subdomain that exists behind the job's headless Service.
"""

from __future__ import annotations

import json

import pytest

from dlc_airflow import naming, registry
from dlc_airflow.errors import BackendError
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.k8s.kinds import CONFIG_MAP, EVENT, JOB, POD, SERVICE, kind_of
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.cluster.podenv import container_env
from tests.cluster.polling import wait_all_terminal, wait_for
from tests.cluster.specs import (
    ACCEPTANCE_QUEUE,
    COMMAND,
    IDENTITY,
    IMAGE,
    NOT_ON_TRAINER,
    PRIORITY_CLASS,
    RICH_ROLES,
    SUPPORTED,
    UNSUPPORTED,
    dry_run_strict,
    ensure_cluster_queue,
    ensure_priority_class,
    ensure_service_account,
    full,
    minimal,
    missing_fields,
    pod_templates,
    unique_name,
)
from tests.support.cluster import create_test_namespace, delete_namespace, ensure_local_queue


@pytest.fixture(scope="module")
def priority_class(admin):
    ensure_priority_class(admin)
    return PRIORITY_CLASS


@pytest.fixture(scope="module")
def acceptance_queue(admin):
    """The full specs' Kueue queue: a ClusterQueue of their own, quota for all (their pods never
    run: the PVC does not exist), so what other tests hold cannot starve them. It stays (Kueue
    keeps a ClusterQueue in use until its last Workload is gone)."""
    ensure_cluster_queue(admin, ACCEPTANCE_QUEUE)
    return ACCEPTANCE_QUEUE


# -- 1. accepted by the real API server -----------------------------------------------------------


def _pair_id(pair) -> str:
    return f"{pair[0]}-on-{pair[1]}"


@pytest.mark.parametrize("variant", ["minimal", "full"])
@pytest.mark.parametrize("job_type, backend", SUPPORTED, ids=[_pair_id(p) for p in SUPPORTED])
def test_accepted_with_dry_run_then_created(job_type, backend, variant, kube, admin, namespace, priority_class,
                                           acceptance_queue):
    ensure_service_account(admin, namespace)
    ensure_local_queue(admin, namespace, acceptance_queue)
    job = minimal(job_type) if variant == "minimal" else full(job_type, backend)
    name = unique_name(f"{job_type[:4]}-{backend[:4]}-{variant[:3]}")
    objects = get_backend(backend).render(job, name, IDENTITY, 1)

    rejected = []
    for obj in objects:
        try:
            dry_run_strict(kube, obj)
        except KubeError as exc:
            rejected.append(f"{obj['kind']} {obj['metadata']['name']}: {exc}")
    assert rejected == [], "\n".join(rejected)
    # the runner's Role may create Secrets but not read them: the admin reads those
    def stored_as(obj: dict) -> dict | None:
        if obj["kind"] == "Secret":
            return admin.get(kind_of(obj), obj["metadata"]["name"], namespace)
        return kube.get(kind_of(obj), obj["metadata"]["name"])

    assert all(stored_as(o) is None for o in objects), "dry-run persisted objects"

    runner = KubeRunner(kube, get_backend(backend))
    ref, created = runner.submit(job, name, IDENTITY, 1)
    assert created and ref.uid
    for obj in objects:
        stored = stored_as(obj)
        assert stored is not None, f"{obj['kind']} {obj['metadata']['name']} was not created"
        for part in ("spec", "data"):
            if part in obj:
                missing = missing_fields(obj[part], stored[part], part)
                # Kueue resumes a queued job it admits (and may have done so already)
                admitted = "spec.suspend: sent True, stored False"
                assert [m for m in missing if not (job.scheduling.queue and m == admitted)] == []
        assert stored["metadata"]["labels"] == obj["metadata"]["labels"]
    assert runner.objects(ref), "the waiting side does not find the job by its labels"
    assert runner.status(ref).state is not JobState.STOPPED

    if backend == "native":
        _native_pods_are_created(kube, admin, objects)
    else:
        _pod_templates_are_admitted(admin, namespace, objects)


def _native_pods_are_created(kube, admin, objects) -> None:
    """The Job controller creates every pod: the pod-level admission accepted the template."""
    jobs = [o for o in objects if o["kind"] == "Job"]  # a queued job's: once Kueue admits them
    expected = {j["metadata"]["name"]: j["spec"]["completions"] for j in jobs}

    def all_created():
        pods = kube.list(POD, labels={naming.LABEL_JOB: jobs[0]["metadata"]["labels"][naming.LABEL_JOB]})[0]
        made = {}
        for pod in pods:
            owner = pod["metadata"]["ownerReferences"][0]["name"]
            made[owner] = made.get(owner, 0) + 1
        return all(made.get(j, 0) >= n for j, n in expected.items()) and made

    try:
        wait_for(all_created, timeout=60, what="the Job controller to create every pod")
    except AssertionError:
        events = [e["message"] for e in kube.list(EVENT)[0] if e.get("reason") == "FailedCreate"]
        raise AssertionError(f"pods not created; FailedCreate events: {events}") from None


def _pod_templates_are_admitted(admin, namespace, objects) -> None:
    """Pods from the CRDs' templates, as their operators would create them, pass admission."""
    rejected = []
    for obj in objects:
        for role, template in pod_templates(obj):
            # (a name of its own: the controller creates the real pods beside it)
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {**template["metadata"], "name": f"{obj['metadata']['name']}-{role}-admission"},
                   "spec": template["spec"]}
            try:
                admin.create(pod, namespace, dry_run=True)
            except KubeError as exc:
                rejected.append(f"{obj['kind']} role {role}: {exc}")
    assert rejected == [], "\n".join(rejected)


# -- 2. unsupported pairs ---------------------------------------------------------------------------


@pytest.mark.parametrize("job_type, backend", UNSUPPORTED, ids=[_pair_id(p) for p in UNSUPPORTED])
def test_unsupported_pair_is_refused_in_one_line(job_type, backend):
    rich = DLCJob(type=job_type, image=IMAGE, command=list(COMMAND), roles=RICH_ROLES[job_type])
    for job in (minimal(job_type), rich):
        with pytest.raises(BackendError) as refused:
            get_backend(backend).render(job, "demo-0123abcd-1")
        assert f"'{job_type}'" in str(refused.value) and f"{backend} backend" in str(refused.value)
        with pytest.raises(BackendError) as err:  # every caller checks through the registry first
            registry.check(backend, job)
        message = str(err.value)
        assert "\n" not in message
        assert f"'{job_type}'" in message and f"{backend} backend" in message
        assert "backend=" in message  # says what to use instead


def test_trainer_refuses_what_trainjob_cannot_express_in_one_line():
    job = DLCJob(type="pytorch", image=IMAGE, command=list(COMMAND), roles={"worker": 2}, **NOT_ON_TRAINER)
    with pytest.raises(BackendError):
        get_backend("trainer").render(job, "demo-0123abcd-1")
    with pytest.raises(BackendError) as err:  # the registry names the backends that run it
        registry.check("trainer", job)
    message = str(err.value)
    assert "\n" not in message and "trainer backend" in message and "backend=" in message
    for what in ("code", "health_check", "fault_tolerance.max_restarts"):
        assert what in message


def test_unsupported_jobs_submit_nothing(kube):
    created_before = {k.kind: len(kube.list(k)[0]) for k in (JOB, SERVICE, CONFIG_MAP)}
    for job_type, backend in UNSUPPORTED:
        runner = KubeRunner(kube, get_backend(backend))
        with pytest.raises(BackendError):
            runner.submit(minimal(job_type), unique_name(f"{job_type[:5]}-{backend}"), IDENTITY, 1)
    assert {k.kind: len(kube.list(k)[0]) for k in (JOB, SERVICE, CONFIG_MAP)} == created_before


# -- 3. native jobs run to Complete; the pods carry each framework's env --------------------------


GPU_NODES = {"gpu-a100-0", "gpu-a100-1"}
SPOT_NODES = {"gpu-spot-0", "gpu-spot-1"}

RUNS: dict[str, dict] = {
    "pytorch": {"type": "pytorch", "roles": {"master": 1, "worker": 2}, "nproc_per_node": 2},
    "pytorch-elastic": {"type": "pytorch", "roles": {"worker": 3},
                        "elastic": {"min_replicas": 2, "max_replicas": 4, "max_restarts": 2}},
    "deepspeed-mpi": {"type": "deepspeed", "roles": {"worker": 2}, "launcher": "mpi", "nproc_per_node": 2},
    "megatron": {"type": "megatron", "roles": {"worker": 3}, "port": 29400,
                 "resources": {"cpu": "2", "memory": "4Gi", "gpu": 1, "gpu_type": "NVIDIA-A100-SXM4-80GB",
                               "rdma": 1, "shared_memory": "1Gi"}},
    "tensorflow": {"type": "tensorflow", "roles": {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1}},
    "mpi": {"type": "mpi", "roles": {"launcher": 1, "worker": 2}, "slots_per_worker": 4},
    "xgboost": {"type": "xgboost", "roles": {"master": 1, "worker": 2}},
    "batch": {"type": "batch", "roles": {"worker": 4}, "scheduling": {"spot": "require"}},
    "custom": {"type": "custom", "roles": {"trainer": 2},
               "code": {"repo": "https://git.example.com/ml/train.git", "revision": "v1"},
               "health_check": {"command": ["dlc-airflow", "sanity-check"]},
               "storage": [{"type": "empty_dir", "mount_path": "/scratch"}],
               "checkpoint": {"uri": "file:///scratch/ckpt"},
               "fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [137]},
               "scheduling": {"priority_class": PRIORITY_CLASS}, "max_running_time": "1h",
               "ttl_after_finished": "1h", "labels": {"team": "ml"}},
}


def expected_env(case: str, name: str, role: str, index: int) -> dict[str, str]:
    """What each framework's users read, written down from DESIGN.md (not from wiring.py)."""
    spec = RUNS[case]
    roles = spec["roles"]
    env = {"DLC_JOB_NAME": name, "DLC_JOB_TYPE": spec["type"], "DLC_ROLE": role,
           "DLC_ROLE_INDEX": str(index), "DLC_ROLE_REPLICAS": str(roles[role])}

    def host(r: str, i: int) -> str:
        return f"{name}-{r}-{i}.{name}"

    if case == "pytorch":  # master + 2 workers, 2 processes each: node ranks 0..2
        rank = 0 if role == "master" else 1 + index
        env.update(MASTER_ADDR=host("master", 0), MASTER_PORT="23456", WORLD_SIZE="6", RANK=str(rank),
                   PET_MASTER_ADDR=host("master", 0), PET_MASTER_PORT="23456", PET_NNODES="3",
                   PET_NODE_RANK=str(rank), PET_NPROC_PER_NODE="2", PYTHONUNBUFFERED="1")
    elif case == "pytorch-elastic":
        env.update(MASTER_ADDR=host("worker", 0), MASTER_PORT="23456", RANK=str(index), WORLD_SIZE="3",
                   PET_NNODES="2:4", PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"{host('worker', 0)}:23456",
                   PET_RDZV_ID=name, PET_MAX_RESTARTS="2", PET_NODE_RANK=str(index), PET_NPROC_PER_NODE="1")
    elif case == "deepspeed-mpi":
        env.update(MASTER_ADDR=host("worker", 0), MASTER_PORT="23456", WORLD_SIZE="4", RANK=str(index),
                   PET_NNODES="2", PET_NPROC_PER_NODE="2", NCCL_DEBUG="WARN",
                   DLC_HOSTFILE="/etc/deepspeed/hostfile")
    elif case == "megatron":
        env.update(MASTER_ADDR=host("worker", 0), MASTER_PORT="29400", WORLD_SIZE="3", RANK=str(index),
                   PET_NNODES="3", PET_NODE_RANK=str(index), CUDA_DEVICE_MAX_CONNECTIONS="1")
    elif case == "mpi":
        env.update(OMPI_MCA_orte_default_hostfile="/etc/mpi/hostfile", OMPI_MCA_orte_set_default_slots="4",
                   WORLD_SIZE="8", DLC_HOSTFILE="/etc/mpi/hostfile")
    elif case == "xgboost":
        env.update(MASTER_ADDR=host("master", 0), MASTER_PORT="9999", WORLD_SIZE="3",
                   RANK=str(0 if role == "master" else 1 + index))
    elif case == "batch":
        env.update(SHARD_INDEX=str(index), SHARD_COUNT="4", JOB_COMPLETION_INDEX=str(index))
    elif case == "custom":
        env.update(DLC_CHECKPOINT_DIR="/scratch/ckpt", DLC_CHECKPOINT_URI="file:///scratch/ckpt")
    return env


def expected_tf_config(name: str, role: str, index: int) -> dict:
    def hosts(r: str, n: int) -> list[str]:
        return [f"{name}-{r}-{i}.{name}:2222" for i in range(n)]

    return {"cluster": {"chief": hosts("chief", 1), "ps": hosts("ps", 1), "worker": hosts("worker", 2)},
            "task": {"type": role, "index": index}}


EXPECTED_HOSTFILES = {
    "deepspeed-mpi": ("/etc/deepspeed/hostfile", lambda name: "".join(
        f"{name}-worker-{i}.{name} slots=2\n" for i in range(2))),
    "mpi": ("/etc/mpi/hostfile", lambda name: "".join(f"{name}-worker-{i}.{name} slots=4\n" for i in range(2))),
}


class Run:
    def __init__(self, case: str, job: DLCJob, name: str):
        self.case, self.job, self.name = case, job, name
        self.ref = self.status = None
        self.pods: list[dict] = []


@pytest.fixture(scope="module")
def runs(cluster, admin):
    """Every RUNS case submitted at once in one namespace, then waited for together."""
    ensure_priority_class(admin)
    ns = create_test_namespace(admin, prefix="run")
    kube = cluster.restricted(ns)
    runner = KubeRunner(kube, get_backend("native"))
    try:
        out = {}
        for case, spec in RUNS.items():
            job = DLCJob(image=IMAGE, command=list(COMMAND), **spec)
            out[case] = Run(case, job, unique_name(case))
            out[case].ref, _ = runner.submit(job, out[case].name, IDENTITY, 1)
        statuses = wait_all_terminal(runner, {c: r.ref for c, r in out.items()}, timeout=150)
        for case, run in out.items():
            run.status = statuses[case]
            run.pods = runner.pods(run.ref)
        yield kube, out
    finally:
        delete_namespace(admin, ns)


def _replica(pod: dict) -> tuple[str, int]:
    meta = pod["metadata"]
    return meta["labels"][naming.LABEL_ROLE], int(meta["annotations"]["batch.kubernetes.io/job-completion-index"])


@pytest.mark.parametrize("case", list(RUNS))
def test_native_job_runs_to_complete(case, runs):
    _, out = runs
    run = out[case]
    status = run.status
    assert status.state is JobState.SUCCEEDED, status.summary()
    assert status.reason == "Completed" and status.restarts == 0
    counts = {r: (c.replicas, c.succeeded, c.failed) for r, c in status.roles.items()}
    lead = {"tensorflow": "chief", "mpi": "launcher"}.get(case)
    if lead:  # the chief decides (as TFJob), the launcher (as MPIJob); the others may still run then
        assert counts[lead] == (1, 1, 0) and {r: c[0] for r, c in counts.items()} == RUNS[case]["roles"]
    else:
        assert counts == {r: (n, n, 0) for r, n in RUNS[case]["roles"].items()}
    assert status.created and status.started and status.finished and status.created <= status.finished
    assert sorted(_replica(p) for p in run.pods) == sorted(
        (r, i) for r, n in RUNS[case]["roles"].items() for i in range(n))
    finished = ("Succeeded", "Running") if lead else ("Succeeded",)
    assert all(p["status"]["phase"] in finished and p["spec"].get("nodeName") for p in run.pods)


@pytest.mark.parametrize("case", list(RUNS))
def test_real_pods_carry_the_framework_env(case, runs):
    _, out = runs
    run = out[case]
    assert run.pods
    for pod in run.pods:
        role, index = _replica(pod)
        env = container_env(pod)
        expected = expected_env(case, run.name, role, index)
        wrong = {k: (env.get(k), v) for k, v in expected.items() if env.get(k) != v}
        assert wrong == {}, f"pod {pod['metadata']['name']}: (got, expected) {wrong}"
        if case == "tensorflow":
            assert json.loads(env["TF_CONFIG"]) == expected_tf_config(run.name, role, index)
        if case in ("custom", "batch", "mpi", "tensorflow"):
            assert not {"MASTER_ADDR", "RANK"} & set(env), "no torch wiring for this type"


def _hosts(case: str, env: dict[str, str]) -> set[str]:
    hosts = {env[k] for k in ("MASTER_ADDR", "PET_MASTER_ADDR") if k in env}
    if "PET_RDZV_ENDPOINT" in env:
        hosts.add(env["PET_RDZV_ENDPOINT"].rsplit(":", 1)[0])
    if "TF_CONFIG" in env:
        hosts |= {a.rsplit(":", 1)[0] for addrs in json.loads(env["TF_CONFIG"])["cluster"].values() for a in addrs}
    return hosts


@pytest.mark.parametrize("case", list(RUNS))
def test_rendezvous_hosts_are_real_pods_behind_the_headless_service(case, runs):
    kube, out = runs
    run = out[case]
    hosts = set()
    for pod in run.pods:
        hosts |= _hosts(case, container_env(pod))
    if case in EXPECTED_HOSTFILES:
        cm = kube.get(CONFIG_MAP, f"{run.name}-hostfile")
        hosts |= {line.split()[0] for line in cm["data"]["hostfile"].splitlines()}
    if case in ("custom", "batch"):
        assert hosts == set()
        return
    assert hosts, "no rendezvous host in the env"
    by_host = {(p["spec"].get("hostname"), p["spec"].get("subdomain")): p for p in run.pods}
    for host in sorted(hosts):
        hostname, _, subdomain = host.partition(".")
        pod = by_host.get((hostname, subdomain))
        assert pod is not None, f"{host}: no pod with hostname {hostname} and subdomain {subdomain}"
        service = kube.get(SERVICE, subdomain)
        assert service is not None, f"{host}: no Service {subdomain}"
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    ports = {e.get("MASTER_PORT") for e in (container_env(p) for p in run.pods)} - {None}
    service = kube.get(SERVICE, run.name)
    if ports:
        assert {str(p["port"]) for p in service["spec"].get("ports", [])} == ports


@pytest.mark.parametrize("case", list(EXPECTED_HOSTFILES))
def test_hostfile_configmap_is_mounted_in_every_pod(case, runs):
    kube, out = runs
    run = out[case]
    path, content = EXPECTED_HOSTFILES[case]
    cm = kube.get(CONFIG_MAP, f"{run.name}-hostfile")
    assert cm["data"]["hostfile"] == content(run.name)
    assert cm["metadata"]["ownerReferences"][0]["kind"] == "Job"  # goes with the job
    for pod in run.pods:
        main = pod["spec"]["containers"][0]
        mount = next(m for m in main["volumeMounts"] if m["mountPath"] == path)
        assert mount["subPath"] == "hostfile"
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        assert container_env(pod)["DLC_HOSTFILE"] == path


def test_gpu_rdma_and_spot_placement(runs):
    _, out = runs
    for pod in out["megatron"].pods:
        assert pod["spec"]["nodeName"] in GPU_NODES
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1" and limits["rdma/hca"] == "1"
        shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
        assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert {p["spec"]["nodeName"] for p in out["batch"].pods} <= SPOT_NODES


def test_init_containers_ran_before_the_main_container(runs):
    _, out = runs
    for pod in out["custom"].pods:
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["git-clone", "health-check"]
        assert pod["spec"]["priorityClassName"] == PRIORITY_CLASS and pod["spec"]["priority"] == 1000
        assert all(s["state"]["terminated"]["exitCode"] == 0 for s in pod["status"]["initContainerStatuses"])
