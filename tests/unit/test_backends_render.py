"""Rendering: every job type x backend, schema-checked offline; env wiring; pod details.

Manifests are checked against the upstream CRD schemas and the official client's models
(tests/unit/k8s_schema.py); the shell prelude that computes index-dependent env is run for
real with /bin/sh; the git clone init container's script is run against a local repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from dlc_airflow import naming, registry
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends import BACKENDS as BACKENDS_REGISTRY
from dlc_airflow.k8s.backends import ResourceKind, get_backend, podspec
from dlc_airflow.k8s.backends.kubeflow import FLAVORS
from dlc_airflow.k8s.backends.trainer import TrainerBackend
from dlc_airflow.spec import DEEPSPEED_HOSTFILE, MPI_HOSTFILE, DLCJob, EmptyDirMount
from tests.unit.k8s_schema import job_spec_errors, validate

NAME = "demo-0123abcd-1"
IDENTITY = naming.TaskIdentity("retrain_daily", "train", "scheduled__2026-12-01T00:00:00+00:00", map_index=3, try_number=2)
ATTEMPT = 1
BACKENDS = ["native", "jobset", "kubeflow", "trainer", "ray"]

# What each backend runs, written down independently of the code.
SUPPORT = {
    "native": {"pytorch", "deepspeed", "megatron", "tensorflow", "mpi", "xgboost", "batch", "custom"},
    "jobset": {"pytorch", "deepspeed", "megatron", "tensorflow", "mpi", "xgboost", "batch", "custom"},
    "kubeflow": {"pytorch", "deepspeed", "megatron", "tensorflow", "mpi", "xgboost"},
    "trainer": {"pytorch", "deepspeed", "megatron"},  # mpi: only with a runtime the admin installed
    "ray": {"ray"},
    "local": {t.value for t in JobType} - {"slurm"},  # every type as local processes, but a Slurm batch script
    "slurm": {"pytorch", "deepspeed", "megatron", "mpi", "xgboost", "batch", "custom", "slurm"},
    "pai": {t.value for t in JobType},  # the managed DLC service has a job type for each (docs/pai.md)
}

RICH_ROLES = {
    "pytorch": {"master": 1, "worker": 2},
    "deepspeed": {"master": 1, "worker": 2},
    "megatron": {"worker": 3},
    "tensorflow": {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1},
    "mpi": {"launcher": 1, "worker": 2},
    "xgboost": {"master": 1, "worker": 2},
    "ray": {"head": 1, "worker": 2},
    "batch": {"worker": 4},
    "custom": {"trainer": 2},
    "slurm": {"worker": 2},
}
# Trainer v2 maps identical worker nodes only.
TRAINER_ROLES = {"pytorch": {"worker": 3}, "deepspeed": {"worker": 2}, "megatron": {"worker": 2},
                 "mpi": {"launcher": 1, "worker": 2}}

FULL = {
    "storage": [
        {"type": "pvc", "claim_name": "datasets", "mount_path": "/data", "read_only": True},
        {"type": "nfs", "server": "nas.local", "path": "/export", "mount_path": "/nas"},
        {"type": "csi", "driver": "ossplugin.csi.alibabacloud.com", "volume_attributes": {"bucket": "b"},
         "secret_name": "oss-cred", "mount_path": "/oss"},
        {"type": "host_path", "path": "/mnt/cache", "mount_path": "/cache"},
        {"type": "config_map", "name": "train-cfg", "mount_path": "/etc/train"},
        {"type": "secret", "name": "api-keys", "mount_path": "/etc/keys", "read_only": True},
        {"type": "empty_dir", "size_limit": "2Gi", "memory": True, "mount_path": "/scratch", "sub_path": "s"},
    ],
    "resources": {"cpu": "8", "memory": "32Gi", "gpu": 2, "gpu_type": "NVIDIA-A100-SXM4-80GB",
                  "shared_memory": "16Gi", "rdma": 1, "ephemeral_storage": "50Gi"},
    "scheduling": {"queue": "team-a", "spot": "prefer", "exclude_nodes": ["bad-node-1"],
                   "node_selector": {"pool": "gpu"},
                   "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "service_account": "trainer"},
    "max_running_time": "2h",
    "ttl_after_finished": "1d",
    "labels": {"team": "ml"},
    "annotations": {"owner": "ml-platform@example.com"},
    "checkpoint": {"uri": "file:///data/ckpt"},
    "env": {"LOG_LEVEL": "debug"},
}
# What Trainer v2 cannot express is left out for it (tested separately).
FULL_EXTRA = {
    "code": {"repo": "https://git.example.com/ml/train.git", "revision": "v1.2", "secret_name": "git-cred"},
    "health_check": {"command": ["dlc-airflow", "sanity-check"]},
    "fault_tolerance": {"max_restarts": 3, "retryable_exit_codes": [137, 1, 143]},
}


def make(job_type: str, roles=None, **kw) -> DLCJob:
    kw.setdefault("command", ["python", "train.py", "--epochs", "3"])
    return DLCJob(type=job_type, image="registry.example.com/train:1", roles=roles or {}, **kw)


def full_job(job_type: str, backend: str) -> DLCJob:
    roles = TRAINER_ROLES[job_type] if backend == "trainer" else RICH_ROLES[job_type]
    extra = {} if backend == "trainer" else FULL_EXTRA
    return make(job_type, roles, **without_queue_on_native(FULL, backend, roles), **extra)


def without_queue_on_native(spec: dict, backend: str, roles: dict) -> dict:
    """The native backend refuses a Kueue queue on a multi-role job (each role would be admitted alone)."""
    if backend != "native" or len(roles) < 2:
        return spec
    return {**spec, "scheduling": {k: v for k, v in spec["scheduling"].items() if k != "queue"}}


def render(backend: str, job: DLCJob, name: str = NAME) -> list[dict]:
    return get_backend(backend).render(job, name, IDENTITY, ATTEMPT)


def pod_templates(obj: dict) -> list[tuple[str, dict]]:
    """(role label, pod template) of every pod template inside a manifest."""
    spec = obj.get("spec") or {}
    kind = obj["kind"]
    if kind == "Job":
        found = [spec["template"]]
    elif kind == "JobSet":
        found = [rj["template"]["spec"]["template"] for rj in spec["replicatedJobs"]]
    elif kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob"):
        field = next(k for k in spec if k.endswith("ReplicaSpecs"))
        found = [r["template"] for r in spec[field].values()]
    elif kind == "RayJob":
        cluster = spec["rayClusterSpec"]
        found = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster.get("workerGroupSpecs", [])]
    elif kind == "TrainJob":
        found = [rj["template"]["spec"]["template"] for patch in spec["runtimePatches"]
                 for rj in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]]
    else:
        found = []
    return [(t["metadata"]["labels"].get(naming.LABEL_ROLE), t) for t in found]


def containers(template: dict) -> list[dict]:
    spec = template["spec"]
    return spec.get("initContainers", []) + spec.get("containers", [])


def main(template: dict) -> dict:
    return template["spec"]["containers"][0]


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def by_kind(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def native_job(objects, role):
    return next(o for o in by_kind(objects, "Job") if o["metadata"]["name"] == f"{NAME}-{role}")


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# -- the matrix ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("job_type", [t.value for t in JobType])
def test_every_type_on_every_backend(job_type, backend):
    if job_type not in SUPPORT[backend]:
        job = make(job_type, RICH_ROLES[job_type])
        with pytest.raises(BackendError) as refused:
            render(backend, job)
        assert job_type in str(refused.value) and backend in str(refused.value)
        # every caller checks through the registry first, which names the backends that run it
        with pytest.raises(BackendError) as err:
            registry.check(backend, job)
        message = str(err.value)
        assert job_type in message and backend in message and "backend=" in message
        assert "\n" not in message
        # and the suggested backends really run it
        suggested = re.findall(r"'(\w+)'", message.split("backend=", 1)[1])
        assert suggested and all(job_type in SUPPORT[s] for s in suggested)
        return

    for job in (make(job_type, TRAINER_ROLES.get(job_type) if backend == "trainer" else None),
                full_job(job_type, backend)):
        objects = render(backend, job)
        assert objects, "nothing rendered"
        problems = [p for o in objects for p in validate(o)]
        assert problems == [], problems
        for obj in objects:
            name = obj["metadata"]["name"]
            assert len(name) <= 63 and _DNS_LABEL.match(name), name
            labels = obj["metadata"]["labels"]
            assert labels.items() >= naming.job_labels(NAME, IDENTITY, ATTEMPT).items()
            assert labels.items() >= job.labels.items()
            assert all(len(v) <= 63 and _LABEL_VALUE.match(v) for v in labels.values()), labels
            assert obj["metadata"].get("annotations", {}).items() >= naming.job_annotations(IDENTITY).items()
            for role, template in pod_templates(obj):
                assert role in job.roles or (backend == "kubeflow" and role == "master")
                tl = template["metadata"]["labels"]
                assert tl.items() >= {**naming.job_labels(NAME, IDENTITY, ATTEMPT), **job.labels}.items()
                assert template["metadata"].get("annotations", {}).items() >= job.annotations.items()
            if obj["kind"] == "Job":
                assert job_spec_errors(obj["spec"], name) == []
            if obj["kind"] == "JobSet":
                for rj in obj["spec"]["replicatedJobs"]:
                    assert job_spec_errors(rj["template"]["spec"], f"{name}-{rj['name']}-0") == []
        # pure and deterministic
        assert render(backend, job) == objects
        json.dumps(objects)


def test_each_backend_declares_its_job_types_once():
    from dlc_airflow.k8s.backends import backends_running

    for job_type in JobType:
        assert backends_running(job_type) == [b for b in BACKENDS_REGISTRY if job_type.value in SUPPORT[b]]
        for backend in BACKENDS:
            assert (job_type in type(get_backend(backend)).job_types) == (job_type.value in SUPPORT[backend])


def test_the_schema_check_catches_mistakes():
    job = make("pytorch", {"worker": 2})
    for backend in ("native", "kubeflow", "jobset"):
        obj = render(backend, job)[0]
        obj["spec"]["backoffLimitPerIdx"] = 1  # a typo
        assert any("backoffLimitPerIdx" in p for p in validate(obj)), backend
    native = render("native", job)[0]
    main(native["spec"]["template"])["resources"] = {"limit": {"cpu": "1"}}
    assert any("limit" in p for p in validate(native))
    ray = render("ray", make("ray", {"head": 1, "worker": 1}))[0]
    ray["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].pop("groupName")
    assert any("groupName" in p for p in validate(ray))


def test_unknown_backend_and_default():
    with pytest.raises(BackendError, match="unknown backend 'slurm'.*native"):
        get_backend("slurm")
    assert get_backend().name == "native" and get_backend(None).name == "native"
    assert {get_backend(b).name for b in BACKENDS} == set(BACKENDS)


@pytest.mark.parametrize("bad", ["Demo", "1demo", "demo_x", "demo-", "x" * 41, ""])
def test_job_name_must_be_a_short_dns_label(bad):
    with pytest.raises(BackendError, match="job name"):
        get_backend("native").render(make("pytorch"), bad)


def test_kinds_and_primary():
    mpi = make("mpi", RICH_ROLES["mpi"])
    native = get_backend("native")
    assert native.kind(mpi) == ResourceKind("batch/v1", "Job", "jobs")
    assert [k.kind for k in native.kinds(mpi)] == ["Job", "Service", "ConfigMap"]
    objects = native.render(mpi, NAME)
    assert objects[0]["metadata"]["name"] == f"{NAME}-launcher"  # the coordinator's Job first
    # and its SSH key Secret, owned by the primary: it goes with the job (the runner's Role
    # may create and delete Secrets, never list them)
    assert {o["kind"] for o in objects} == {k.kind for k in native.kinds(mpi)} | {"Secret"}
    backends = {"kubeflow": get_backend("kubeflow"), "jobset": get_backend("jobset"),
                "trainer": TrainerBackend(runtimes={"mpi": "site-mpi"})}
    for backend, kind in (("kubeflow", "MPIJob"), ("jobset", "JobSet"), ("trainer", "TrainJob")):
        b = backends[backend]
        objs = b.render(mpi, NAME)
        assert objs[0]["kind"] == kind == b.kind(mpi).kind
        assert objs[0]["apiVersion"] == b.kind(mpi).api_version
        assert {o["kind"] for o in objs} - {"Secret"} <= {k.kind for k in b.kinds(mpi)}
        assert all("ownerReferences" not in o["metadata"] for o in objs)
    ray = get_backend("ray")
    assert ray.kind(make("ray")) == ResourceKind("ray.io/v1", "RayJob", "rayjobs")
    # the client's kind (it builds REST paths from it)
    assert native.kind(mpi).path("ml") == "/apis/batch/v1/namespaces/ml/jobs"


def test_objects_share_no_dicts():
    objects = render("native", make("pytorch", {"master": 1, "worker": 2}, env={"A": "1"}))
    main(objects[0]["spec"]["template"])["env"].append({"name": "X", "value": "y"})
    assert "X" not in env_of(main(objects[2]["spec"]["template"]))


# -- env wiring ---------------------------------------------------------------------------------


def test_pytorch_env_on_native():
    objects = render("native", make("pytorch", {"master": 1, "worker": 2}, nproc_per_node=4))
    master, worker = native_job(objects, "master"), native_job(objects, "worker")
    for job in (master, worker):
        env = env_of(main(job["spec"]["template"]))
        assert env["MASTER_ADDR"]["value"] == f"{NAME}-master-0.{NAME}"
        assert env["MASTER_PORT"]["value"] == "23456"
        assert env["WORLD_SIZE"]["value"] == "12"
        assert env["PET_NNODES"]["value"] == "3"
        assert env["PET_NPROC_PER_NODE"]["value"] == "4"
        assert env["PET_MASTER_ADDR"]["value"] == f"{NAME}-master-0.{NAME}"
        assert env["PET_MASTER_PORT"]["value"] == "23456"
        assert env["PYTHONUNBUFFERED"]["value"] == "1"
    # master: RANK is the plain index (Downward API); workers: index + 1 (shell prelude)
    m_env = env_of(main(master["spec"]["template"]))
    assert m_env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == podspec.JOB_INDEX.field_path
    w = main(worker["spec"]["template"])
    assert "RANK" not in env_of(w)
    assert w["command"][:2] == ["/bin/sh", "-c"]
    assert "export RANK=$((JOB_COMPLETION_INDEX + 1))" in w["command"][2]
    assert w["command"][3:] == [podspec.PRELUDE_ARGV0, "python", "train.py", "--epochs", "3"]


def test_service_and_addressing_on_native():
    objects = render("native", make("pytorch", {"worker": 2}))
    svc = by_kind(objects, "Service")[0]
    assert svc["metadata"]["name"] == NAME
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {naming.LABEL_JOB: NAME}
    assert svc["spec"]["ports"][0]["port"] == 23456
    job = native_job(objects, "worker")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = job["spec"]["template"]
    assert pod["spec"]["subdomain"] == NAME and pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["enableServiceLinks"] is False
    assert pod["metadata"]["labels"][naming.LABEL_JOB] == NAME  # the Service selects it
    # no rendezvous port: headless Service without ports
    batch = render("native", make("batch", {"worker": 2}))
    assert "ports" not in by_kind(batch, "Service")[0]["spec"]


def test_jobset_addressing_and_structure():
    js = render("jobset", make("pytorch", {"master": 1, "worker": 2}))[0]
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": NAME, "publishNotReadyAddresses": True}
    assert [rj["name"] for rj in js["spec"]["replicatedJobs"]] == ["master", "worker"]
    assert all(rj["replicas"] == 1 for rj in js["spec"]["replicatedJobs"])
    worker = js["spec"]["replicatedJobs"][1]["template"]
    env = env_of(main(worker["spec"]["template"]))
    assert env["MASTER_ADDR"]["value"] == f"{NAME}-master-0-0.{NAME}"
    assert "subdomain" not in worker["spec"]["template"]["spec"]  # JobSet sets it
    assert js["spec"]["successPolicy"] == {"operator": "All"}


def test_tensorflow_chief_decides_success():
    """As TFJob: the chief decides (the workers without a chief); ps and evaluators never do."""
    js = render("jobset", make("tensorflow", RICH_ROLES["tensorflow"]))[0]
    assert js["spec"]["successPolicy"]["targetReplicatedJobs"] == ["chief"]
    js = render("jobset", make("tensorflow", {"ps": 1, "worker": 2}))[0]
    assert js["spec"]["successPolicy"]["targetReplicatedJobs"] == ["worker"]


def test_tf_config_cluster_and_task():
    objects = render("native", make("tensorflow", {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1}))
    w = main(native_job(objects, "worker")["spec"]["template"])
    env = env_of(w)
    prefix = env["DLC_TF_CONFIG_PREFIX"]["value"]
    suffix = env["DLC_TF_CONFIG_SUFFIX"]["value"]
    config = json.loads(prefix + "1" + suffix)
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"] == {
        "chief": [f"{NAME}-chief-0.{NAME}:2222"],
        "ps": [f"{NAME}-ps-0.{NAME}:2222"],
        "worker": [f"{NAME}-worker-0.{NAME}:2222", f"{NAME}-worker-1.{NAME}:2222"],
    }
    # the JSON never appears in shell source
    assert "cluster" not in w["command"][2]


def test_mpi_hostfile_configmap_and_mounts():
    job = make("mpi", {"launcher": 1, "worker": 3}, slots_per_worker=4)
    for backend, host in (("native", f"{NAME}-worker-{{i}}.{NAME}"), ("jobset", f"{NAME}-worker-0-{{i}}.{NAME}")):
        objects = render(backend, job)
        cm = by_kind(objects, "ConfigMap")[0]
        assert cm["metadata"]["name"] == f"{NAME}-hostfile"
        assert cm["data"]["hostfile"] == "".join(f"{host.format(i=i)} slots=4\n" for i in range(3))
        templates = [t for o in objects for t in pod_templates(o)]
        assert {r for r, _ in templates} == {"launcher", "worker"}
        for _, t in templates:
            mounts = {m["mountPath"]: m for m in main(t)["volumeMounts"]}
            assert mounts[MPI_HOSTFILE]["subPath"] == "hostfile"
            vol = next(v for v in t["spec"]["volumes"] if v["name"] == mounts[MPI_HOSTFILE]["name"])
            assert vol["configMap"]["name"] == f"{NAME}-hostfile"
            env = env_of(main(t))
            assert env["OMPI_MCA_orte_default_hostfile"]["value"] == MPI_HOSTFILE
            assert env["WORLD_SIZE"]["value"] == "12"


def test_deepspeed_mpi_launcher_hostfile():
    job = make("deepspeed", {"worker": 2}, launcher="mpi", nproc_per_node=8)
    cm = by_kind(render("native", job), "ConfigMap")[0]
    assert cm["data"]["hostfile"] == f"{NAME}-worker-0.{NAME} slots=8\n{NAME}-worker-1.{NAME} slots=8\n"
    t = native_job(render("native", job), "worker")["spec"]["template"]
    assert DEEPSPEED_HOSTFILE in {m["mountPath"] for m in main(t)["volumeMounts"]}
    # kubeflow: the operator's per-pod Services are the hosts
    objs = render("kubeflow", job)
    assert objs[0]["kind"] == "PyTorchJob"
    assert by_kind(objs, "ConfigMap")[0]["data"]["hostfile"].startswith(f"{NAME}-worker-0 slots=8\n")
    assert env_of(main(pod_templates(objs[0])[0][1]))["DLC_HOSTFILE"]["value"] == DEEPSPEED_HOSTFILE


def test_batch_shards():
    objects = render("native", make("batch", {"worker": 5}))
    env = env_of(main(native_job(objects, "worker")["spec"]["template"]))
    assert env["SHARD_COUNT"]["value"] == "5"
    assert env["SHARD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == podspec.JOB_INDEX.field_path
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == podspec.JOB_INDEX.field_path


def test_user_env_wins_and_outputs_file():
    objects = render("native", make("pytorch", {"worker": 2}, env={"MASTER_PORT": "29400", "RANK": "7"}))
    c = main(native_job(objects, "worker")["spec"]["template"])
    env = env_of(c)
    assert env["MASTER_PORT"]["value"] == "29400" and env["RANK"]["value"] == "7"
    assert env["DLC_OUTPUT_FILE"]["value"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "File" and c["terminationMessagePath"] == "/dev/termination-log"


# -- the shell prelude, evaluated for real ------------------------------------------------------


def _field(template: dict, path: str, index: int) -> str:
    m = re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path)
    assert m, path
    values = {**template["metadata"].get(m.group(1), {})}
    if m.group(2) == podspec.COMPLETION_INDEX_ANNOTATION:
        values[m.group(2)] = str(index)  # what the Job controller writes on pod `index`
    return values[m.group(2)]


def run_container(template: dict, container: dict, index: int) -> dict[str, str]:
    """The env the user's program sees in pod `index` (argv replaced by an env dump)."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = _field(template, e["valueFrom"]["fieldRef"]["fieldPath"], index)
    command = container["command"]
    dump = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    if command[:2] == ["/bin/sh", "-c"] and len(command) > 3 and command[3] == podspec.PRELUDE_ARGV0:
        command = command[:4] + dump
    else:
        command = dump
    out = subprocess.run(command, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("backend", ["native", "jobset"])
def test_shell_prelude_computes_index_values(backend):
    cases = {
        "pytorch": {"master": 1, "worker": 3},
        "tensorflow": {"chief": 1, "ps": 1, "worker": 3},
        "xgboost": {"master": 1, "worker": 3},
        "batch": {"worker": 4},
    }
    for job_type, roles in cases.items():
        objects = render(backend, make(job_type, roles))
        templates = dict(t for o in objects for t in pod_templates(o))
        t = templates["worker"]
        for index in range(roles["worker"]):
            env = run_container(t, main(t), index)
            assert env["DLC_ROLE_INDEX"] == str(index)
            if job_type in ("pytorch", "xgboost"):
                assert env["RANK"] == str(index + 1)  # the master is rank 0
            if job_type == "pytorch":
                assert env["PET_NODE_RANK"] == str(index + 1)
            if job_type == "tensorflow":
                config = json.loads(env["TF_CONFIG"])
                assert config["task"] == {"type": "worker", "index": index}
                assert len(config["cluster"]["worker"]) == 3
            if job_type == "batch":
                assert env["SHARD_INDEX"] == str(index) and env["SHARD_COUNT"] == "4"
        if "master" in templates:
            env = run_container(templates["master"], main(templates["master"]), 0)
            assert env["RANK"] == "0"
        if "chief" in templates:
            env = run_container(templates["chief"], main(templates["chief"]), 0)
            assert json.loads(env["TF_CONFIG"])["task"] == {"type": "chief", "index": 0}


def test_shell_prelude_keeps_argv_intact():
    argv = ["python", "-c", "import sys; print(sys.argv)", "a b", "$HOME", "'quoted'", '"dq"', "--x=$(rm -rf /)"]
    objects = render("native", make("pytorch", {"master": 1, "worker": 1}, command=argv))
    c = main(native_job(objects, "worker")["spec"]["template"])
    assert c["command"][4:] == argv
    env = {e["name"]: e.get("value", "0") for e in c["env"]}
    out = subprocess.run(c["command"][:4] + [sys.executable] + argv[1:], env={"PATH": os.environ["PATH"], **env},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == repr(["-c"] + argv[3:])


# -- resources, volumes, code, health check ----------------------------------------------------


def test_resources_requests_equal_limits():
    objects = render("native", full_job("pytorch", "native"))
    c = main(native_job(objects, "worker")["spec"]["template"])
    expected = {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "50Gi", "nvidia.com/gpu": "2", "rdma/hca": "1"}
    assert c["resources"] == {"requests": expected, "limits": expected}
    assert "resources" not in main(native_job(render("native", make("batch")), "worker")["spec"]["template"])


def test_role_resources_override():
    job = make("pytorch", {"master": {"replicas": 1, "resources": {"cpu": "2"}}, "worker": 2}, resources={"cpu": "8", "gpu": 1})
    objects = render("native", job)
    assert main(native_job(objects, "master")["spec"]["template"])["resources"]["limits"] == {"cpu": "2"}
    assert main(native_job(objects, "worker")["spec"]["template"])["resources"]["limits"] == {"cpu": "8", "nvidia.com/gpu": "1"}


def test_volumes_and_mounts():
    objects = render("native", full_job("pytorch", "native"))
    t = native_job(objects, "worker")["spec"]["template"]
    vols = {v["name"]: v for v in t["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in main(t)["volumeMounts"]}
    assert vols[mounts["/data"]["name"]]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
    assert mounts["/data"]["readOnly"] is True
    assert vols[mounts["/nas"]["name"]]["nfs"] == {"server": "nas.local", "path": "/export"}
    assert vols[mounts["/oss"]["name"]]["csi"] == {
        "driver": "ossplugin.csi.alibabacloud.com", "volumeAttributes": {"bucket": "b"},
        "nodePublishSecretRef": {"name": "oss-cred"}}
    assert vols[mounts["/cache"]["name"]]["hostPath"] == {"path": "/mnt/cache"}
    assert vols[mounts["/etc/train"]["name"]]["configMap"] == {"name": "train-cfg"}
    assert vols[mounts["/etc/keys"]["name"]]["secret"] == {"secretName": "api-keys"}
    assert vols[mounts["/scratch"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert mounts["/scratch"]["subPath"] == "s"
    assert vols[mounts["/dev/shm"]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert vols[mounts["/workspace/code"]["name"]]["emptyDir"] == {}
    assert len(vols) == len(t["spec"]["volumes"])  # unique names
    assert all(_DNS_LABEL.match(n) for n in vols)
    # the same names every time, and in every role
    assert [v["name"] for v in native_job(objects, "master")["spec"]["template"]["spec"]["volumes"]] == list(vols)


def test_code_clone_and_health_check_init_containers():
    objects = render("native", full_job("pytorch", "native"))
    t = native_job(objects, "worker")["spec"]["template"]
    init = t["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["git-clone", "health-check"]  # clone first
    clone, check = init
    env = env_of(clone)
    assert env["DLC_GIT_REPO"]["value"] == "https://git.example.com/ml/train.git"
    assert env["DLC_GIT_REVISION"]["value"] == "v1.2"
    assert env["GIT_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "git-cred", "key": "password"}
    assert env["GIT_USERNAME"]["valueFrom"]["secretKeyRef"] == {"name": "git-cred", "key": "username"}
    assert "git.example.com" not in " ".join(clone["command"])  # values come through env
    for c in containers(t):
        assert {"name": "code", "mountPath": "/workspace/code"} in c["volumeMounts"]
    assert check["image"] == main(t)["image"]
    assert check["command"][-2:] == ["dlc-airflow", "sanity-check"]
    assert check["resources"] == main(t)["resources"]
    assert env_of(check)["MASTER_ADDR"] == env_of(main(t))["MASTER_ADDR"]
    assert main(t)["workingDir"] == "/workspace/code"


@pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")
def test_clone_script_checks_out_the_revision(tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "train.py").write_text("v1\n")
    subprocess.run([*git, "-C", str(repo), "add", "."], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "-C", str(repo), "tag", "v1"], check=True)
    (repo / "train.py").write_text("v2\n")
    subprocess.run([*git, "-C", str(repo), "commit", "-qam", "two"], check=True)

    job = make("batch", code={"repo": str(repo), "revision": "v1", "mount_path": str(tmp_path / "code")})
    t = main(native_job(render("native", job), "worker")["spec"]["template"])
    clone = next(c for c in render("native", job)[0]["spec"]["template"]["spec"]["initContainers"])
    (tmp_path / "code").mkdir()  # the emptyDir
    env = {e["name"]: e["value"] for e in clone["env"]}
    subprocess.run(clone["command"], env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env}, check=True)
    assert (tmp_path / "code" / "train.py").read_text() == "v1\n"
    assert t["workingDir"] == str(tmp_path / "code")


# -- scheduling ---------------------------------------------------------------------------------


def _pod_spec(job: DLCJob, backend="native", role="worker") -> dict:
    objects = render(backend, job)
    return dict(t for o in objects for t in pod_templates(o))[role]["spec"]


def test_spot_prefer_and_require():
    toleration = {"key": podspec.SPOT_TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
    spot = {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}
    prefer = _pod_spec(make("batch", scheduling={"spot": "prefer"}))
    assert toleration in prefer["tolerations"]
    assert prefer["affinity"]["nodeAffinity"] == {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [spot]}}]}
    require = _pod_spec(make("batch", scheduling={"spot": "require"}))
    assert toleration in require["tolerations"]
    assert require["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [spot]}]}}
    none = _pod_spec(make("batch"))
    assert "tolerations" not in none and "affinity" not in none


def test_include_exclude_nodes_gpu_type_priority():
    spec = _pod_spec(make("batch", resources={"gpu": 1, "gpu_type": "Tesla-T4"},
                          scheduling={"include_nodes": ["n1", "n2"], "exclude_nodes": ["n3"], "spot": "require",
                                      "priority_class": "high", "node_selector": {"pool": "gpu"}}))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 1  # ANDed, not ORed
    exprs = terms[0]["matchExpressions"]
    assert {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]} in exprs
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n3"]} in exprs
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]} in exprs
    assert spec["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "Tesla-T4"}
    assert spec["priorityClassName"] == "high"


# -- fault tolerance, deadlines, ttl, queue ------------------------------------------------------


def test_native_fault_tolerance():
    job = make("pytorch", {"worker": 2}, fault_tolerance={"max_restarts": 3, "retryable_exit_codes": [143, 137, 1]})
    spec = native_job(render("native", job), "worker")["spec"]
    assert spec["backoffLimitPerIndex"] == 3 and spec["maxFailedIndexes"] == 0
    rules = spec["podFailurePolicy"]["rules"]
    # preemption first: a preempted pod killed with 137 must not count as a permanent error
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1] == {"action": "FailJob",
                        "onExitCodes": {"containerName": "main", "operator": "NotIn", "values": [1, 137, 143]}}
    assert job_spec_errors(spec, f"{NAME}-worker") == []

    plain = native_job(render("native", make("pytorch", {"worker": 1},
                                              fault_tolerance={"restart_on_preemption": False})), "worker")["spec"]
    assert "podFailurePolicy" not in plain and plain["backoffLimitPerIndex"] == 0


def test_jobset_fault_tolerance():
    job = make("pytorch", {"worker": 2}, fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [137]},
               max_running_time=600)
    js = render("jobset", job)[0]
    fp = js["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 2
    assert fp["rules"] == [{"name": "FailOnPermanentError", "action": "FailJobSet",
                            "onJobFailureReasons": ["PodFailurePolicy", "DeadlineExceeded"]}]
    child = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert child["backoffLimit"] == 0 and "backoffLimitPerIndex" not in child
    assert child["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"] == [137]
    assert child["activeDeadlineSeconds"] == 600


def test_deadline_ttl_and_queue_everywhere():
    for backend in BACKENDS:
        job_type = "ray" if backend == "ray" else "pytorch"
        job = make(job_type, TRAINER_ROLES["pytorch"] if backend == "trainer" else None,
                   max_running_time="1h30m", ttl_after_finished=120, scheduling={"queue": "team-a"})
        objects = render(backend, job)
        primary = objects[0]
        assert primary["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a", backend
        spec = primary["spec"]
        if backend == "native":
            for j in by_kind(objects, "Job"):
                assert j["spec"]["suspend"] is True and j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
                assert j["spec"]["activeDeadlineSeconds"] == 5400 and j["spec"]["ttlSecondsAfterFinished"] == 120
            assert "kueue.x-k8s.io/queue-name" not in by_kind(objects, "Service")[0]["metadata"]["labels"]
        elif backend == "jobset":
            assert spec["suspend"] is True and spec["ttlSecondsAfterFinished"] == 120
            assert all(rj["template"]["spec"]["activeDeadlineSeconds"] == 5400 for rj in spec["replicatedJobs"])
        elif backend == "kubeflow":
            rp = spec["runPolicy"]
            assert rp["suspend"] is True and rp["activeDeadlineSeconds"] == 5400 and rp["ttlSecondsAfterFinished"] == 120
            assert rp["schedulingPolicy"]["queue"] == "team-a"
        elif backend == "trainer":
            assert spec["suspend"] is True and spec["activeDeadlineSeconds"] == 5400
        elif backend == "ray":
            assert spec["suspend"] is True and spec["shutdownAfterJobFinishes"] is True
            assert spec["activeDeadlineSeconds"] == 5400 and spec["ttlSecondsAfterFinished"] == 120
    # no queue: nothing suspended
    assert "suspend" not in native_job(render("native", make("batch")), "worker")["spec"]


# -- kubeflow -----------------------------------------------------------------------------------


def test_kubeflow_kinds_containers_and_replica_types():
    cases = {
        "pytorch": ("PyTorchJob", "pytorchReplicaSpecs", "pytorch", {"Master": 1, "Worker": 2}, "pytorchjob-port"),
        "tensorflow": ("TFJob", "tfReplicaSpecs", "tensorflow", {"Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}, "tfjob-port"),
        "mpi": ("MPIJob", "mpiReplicaSpecs", "mpi", {"Launcher": 1, "Worker": 2}, None),
        "xgboost": ("XGBoostJob", "xgbReplicaSpecs", "xgboost", {"Master": 1, "Worker": 2}, "xgboostjob-port"),
    }
    for job_type, (kind, field, container, replicas, port) in cases.items():
        job = make(job_type, RICH_ROLES[job_type])
        obj = render("kubeflow", job)[0]
        assert obj["apiVersion"] == "kubeflow.org/v1" and obj["kind"] == kind
        specs = obj["spec"][field]
        assert {t: s["replicas"] for t, s in specs.items()} == replicas
        for rtype, s in specs.items():
            c = s["template"]["spec"]["containers"][0]
            assert c["name"] == container == FLAVORS[job.type].container
            assert "restartPolicy" not in s["template"]["spec"] and s["restartPolicy"] == "Never"
            env = env_of(c)
            # the operator wires the framework: none of ours
            assert not {"MASTER_ADDR", "RANK", "TF_CONFIG", "WORLD_SIZE"} & set(env)
            if rtype == "Launcher":  # the operator labels no index on its single launcher
                assert env["DLC_ROLE_INDEX"] == {"name": "DLC_ROLE_INDEX", "value": "0"}
            else:
                assert env["DLC_ROLE_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
                    "metadata.labels['training.kubeflow.org/replica-index']"
            if port:
                assert c["ports"][0]["name"] == port
    mpi = render("kubeflow", make("mpi", RICH_ROLES["mpi"], slots_per_worker=8))[0]
    assert mpi["spec"]["slotsPerWorker"] == 8 and mpi["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_kubeflow_restart_policy_and_elastic():
    def rp(**ft):
        obj = render("kubeflow", make("pytorch", {"worker": 2}, fault_tolerance=ft))[0]
        return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"], obj["spec"]["runPolicy"]["backoffLimit"]

    assert rp() == ("Never", 0)
    assert rp(max_restarts=3) == ("OnFailure", 3)
    assert rp(max_restarts=3, retryable_exit_codes=[137]) == ("ExitCode", 3)
    obj = render("kubeflow", make("pytorch", {"worker": 2}, nproc_per_node=4,
                                  elastic={"min_replicas": 1, "max_replicas": 4, "max_restarts": 5}))[0]
    assert obj["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 4, "maxRestarts": 5, "rdzvBackend": "c10d"}
    assert obj["spec"]["nprocPerNode"] == "4"


def test_kubeflow_xgboost_without_master_promotes_worker_zero():
    obj = render("kubeflow", make("xgboost", {"worker": 3}))[0]
    specs = obj["spec"]["xgbReplicaSpecs"]
    assert {t: s["replicas"] for t, s in specs.items()} == {"Master": 1, "Worker": 2}
    assert specs["Master"]["template"]["metadata"]["labels"][naming.LABEL_ROLE] == "master"


# -- trainer ------------------------------------------------------------------------------------


def test_trainer_runtime_and_trainer_fields():
    obj = render("trainer", make("pytorch", {"worker": 4}, nproc_per_node=8, resources={"cpu": "16", "gpu": 8}))[0]
    spec = obj["spec"]
    assert spec["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                  "name": "torch-distributed"}
    t = spec["trainer"]
    assert t["numNodes"] == 4 and t["numProcPerNode"] == 8
    assert t["command"] == ["python", "train.py", "--epochs", "3"] and t["image"] == "registry.example.com/train:1"
    assert t["resourcesPerNode"]["limits"] == {"cpu": "16", "nvidia.com/gpu": "8"}
    names = {e["name"] for e in t["env"]}
    assert "DLC_JOB_NAME" in names and "MASTER_ADDR" not in names  # the runtime wires torchrun
    runtimes = {jt: render("trainer", make(jt, TRAINER_ROLES[jt]))[0]["spec"]["runtimeRef"]["name"]
                for jt in TRAINER_ROLES if jt != "mpi"}
    assert runtimes == {"pytorch": "torch-distributed", "deepspeed": "torch-distributed",
                        "megatron": "torch-distributed"}
    ds = render("trainer", make("deepspeed", {"worker": 2}, launcher="mpi"))[0]
    assert ds["spec"]["runtimeRef"]["name"] == "deepspeed-distributed"
    # Trainer v2.3.0 ships no MPI runtime: mpi runs only on one the admin names
    mpi_job = make("mpi", {"launcher": {"replicas": 1, "command": ["mpirun", "x"]}, "worker": 3})
    with pytest.raises(BackendError, match=r"ships no MPI runtime.*runtimes=\{'mpi'"):
        render("trainer", mpi_job)
    mpi = TrainerBackend(runtimes={"mpi": "site-mpi"}).render(mpi_job, NAME, IDENTITY, ATTEMPT)[0]
    assert mpi["spec"]["runtimeRef"]["name"] == "site-mpi"
    assert mpi["spec"]["trainer"]["command"] == ["mpirun", "x"] and mpi["spec"]["trainer"]["numNodes"] == 3


def test_trainer_refuses_what_its_webhooks_would():
    """Trainer's webhook refuses env its runtimes own, and a patch manager without a domain."""
    with pytest.raises(BackendError, match="env PET_NNODES, PET_X"):
        render("trainer", make("pytorch", {"worker": 2}, env={"PET_NNODES": "3", "PET_X": "1"}))
    patch = render("trainer", make("pytorch", {"worker": 2}))[0]["spec"]["runtimePatches"][0]
    assert "/" in patch["manager"]  # the webhook requires a domain-prefixed manager name


def test_trainer_runtime_override():
    backend = TrainerBackend(runtimes={"pytorch": "my-torch"})
    obj = backend.render(make("pytorch", {"worker": 2}), NAME)[0]
    assert obj["spec"]["runtimeRef"]["name"] == "my-torch"


@pytest.mark.parametrize("kw, what", [
    ({"roles": {"master": 1, "worker": 2}}, "master"),
    ({"roles": {"worker": 2}, "code": {"repo": "https://x/y.git"}}, "code"),
    ({"roles": {"worker": 2}, "health_check": {"command": ["true"]}}, "health_check"),
    ({"roles": {"worker": 2}, "fault_tolerance": {"max_restarts": 1}}, "max_restarts"),
    ({"roles": {"worker": 2}, "scheduling": {"priority_class": "high"}}, "priority_class"),
    ({"roles": {"worker": 2}, "elastic": {"min_replicas": 1, "max_replicas": 2}}, "elastic"),
])
def test_trainer_refuses_what_it_cannot_express(kw, what):
    with pytest.raises(BackendError) as err:
        render("trainer", make("pytorch", **kw))
    assert what in str(err.value) and "trainer" in str(err.value)
    with pytest.raises(BackendError) as err:  # the registry names the backends that run it
        registry.check("trainer", make("pytorch", **kw))
    assert what in str(err.value) and "trainer" in str(err.value) and "backend=" in str(err.value)


def test_trainer_pod_patches():
    obj = render("trainer", full_job("pytorch", "trainer"))[0]
    patch = obj["spec"]["runtimePatches"][0]
    assert patch["manager"] == "dlc-airflow.io/manager"
    (rj,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rj["name"] == "node"
    pod = rj["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][naming.LABEL_ROLE] == "worker"
    assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert pod["spec"]["containers"][0]["name"] == "node"
    assert {m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]} >= {"/data", "/dev/shm"}


# -- ray ----------------------------------------------------------------------------------------


def test_rayjob():
    job = make("ray", {"head": 1, "worker": 3}, command=["python", "job.py", "--name", "a b"],
               resources={"cpu": "4", "memory": "8Gi"}, fault_tolerance={"max_restarts": 2})
    obj = render("ray", job)[0]
    spec = obj["spec"]
    assert spec["entrypoint"] == "python job.py --name 'a b'"
    assert spec["submissionMode"] == "K8sJobMode" and spec["shutdownAfterJobFinishes"] is True
    assert spec["backoffLimit"] == 2
    head = spec["rayClusterSpec"]["headGroupSpec"]
    (group,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    for t in (head["template"], group["template"]):
        c = main(t)
        assert "command" not in c and "args" not in c  # KubeRay writes `ray start`
        assert c["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}
        assert "RAY_HEAD_ADDRESS" not in env_of(c)
    assert main(head["template"])["name"] == "ray-head"
    shell = render("ray", make("ray", command=None, shell="python job.py && echo done"))[0]
    assert shell["spec"]["entrypoint"] == "python job.py && echo done"
    assert "workerGroupSpecs" not in shell["spec"]["rayClusterSpec"]


def test_ray_refuses_worker_command():
    with pytest.raises(BackendError, match="roles.worker.command"):
        render("ray", make("ray", {"head": 1, "worker": {"replicas": 2, "command": ["x"]}}))


def test_jobset_refuses_pod_names_over_63():
    long_name = "a" * 40
    job = make("custom", {"abcdefghij": 10000})
    with pytest.raises(BackendError, match="63"):
        get_backend("jobset").render(job, long_name)
    get_backend("native").render(job, long_name)  # <name>-<role>-<index> still fits


def test_mount_path_clash_is_refused():
    # The spec refuses it at parse time; render keeps its own check for specs built otherwise.
    with pytest.raises(ValueError, match="/dev/shm"):
        make("batch", resources={"shared_memory": "1Gi"}, storage=[{"type": "empty_dir", "mount_path": "/dev/shm"}])
    job = make("batch", roles={"worker": {"replicas": 1, "resources": {"shared_memory": "1Gi"}}})
    job.storage.append(EmptyDirMount(mount_path="/dev/shm"))  # past validation
    with pytest.raises(BackendError, match="/dev/shm"):
        render("native", job)


def test_env_names_are_unique():
    job = make("tensorflow", {"worker": 2}, env={"JOB_COMPLETION_INDEX": "x", "DLC_TF_CONFIG_PREFIX": "y"})
    for backend in ("native", "jobset"):
        for _, t in pod_templates(render(backend, job)[0]):
            names = [e["name"] for e in main(t)["env"]]
            assert len(names) == len(set(names))


def test_native_refuses_a_queue_on_a_multi_role_job():
    """Kueue admits each role's Job on its own: a queued multi-role native job could start in part."""
    with pytest.raises(BackendError, match=r"roles master, worker on its own.*backend='jobset'"):
        render("native", make("pytorch", {"master": 1, "worker": 2}, scheduling={"queue": "team-a"}))
    (job,) = by_kind(render("native", make("batch", {"worker": 4}, scheduling={"queue": "team-a"})), "Job")
    assert job["spec"]["suspend"] is True and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    jobset = render("jobset", make("pytorch", {"master": 1, "worker": 2}, scheduling={"queue": "team-a"}))[0]
    assert jobset["spec"]["suspend"] is True


# -- Kueue's topology-aware scheduling -----------------------------------------------------------

TOPOLOGY_CASES = [("native", "batch", {"worker": 3}), ("jobset", "pytorch", RICH_ROLES["pytorch"]),
                  ("jobset", "mpi", RICH_ROLES["mpi"]), ("kubeflow", "tensorflow", RICH_ROLES["tensorflow"]),
                  ("trainer", "pytorch", TRAINER_ROLES["pytorch"]), ("ray", "ray", RICH_ROLES["ray"])]


@pytest.mark.parametrize(("backend", "job_type", "roles"), TOPOLOGY_CASES)
def test_topology_goes_on_every_pod_set_kueue_reads(backend, job_type, roles):
    rack, host = "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
    required = make(job_type, roles, scheduling={"queue": "team-a", "topology": {"required": rack}})
    sliced = make(job_type, roles, scheduling={"queue": "team-a", "topology": {
        "preferred": rack, "slice_level": host, "slice_size": 1}})  # 1: a whole number of every role
    for job, expected in ((required, {podspec.TAS_REQUIRED_ANNOTATION: rack}),
                          (sliced, {podspec.TAS_PREFERRED_ANNOTATION: rack, podspec.TAS_SLICE_LEVEL_ANNOTATION: host,
                                    podspec.TAS_SLICE_SIZE_ANNOTATION: "1"})):
        objects = render(backend, job)
        templates = [t for obj in objects for _, t in pod_templates(obj)]
        assert templates, f"{backend}: no pod template found"
        for template in templates:
            annotations = template["metadata"].get("annotations") or {}
            assert {k: annotations.get(k) for k in expected} == expected
        assert [p for o in objects for p in validate(o)] == []


def test_without_topology_no_tas_annotation():
    objects = render("jobset", make("pytorch", RICH_ROLES["pytorch"], scheduling={"queue": "team-a"}))
    text = json.dumps(objects)
    assert "podset-required-topology" not in text and "podset-preferred-topology" not in text


def test_slices_must_divide_every_roles_replicas():
    job = make("pytorch", {"master": 1, "worker": 4}, scheduling={"queue": "team-a", "topology": {
        "required": "cloud.provider.com/topology-rack", "slice_level": "kubernetes.io/hostname", "slice_size": 2}})
    for backend in ("jobset", "kubeflow"):
        with pytest.raises(BackendError, match=r"slice_size 2: every role's replicas must be a multiple of it, "
                                               r"and \{'master': 1\} are not"):
            render(backend, job)
