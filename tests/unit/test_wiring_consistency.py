"""One source of truth for framework wiring: every backend hands a replica the same thing.

For a representative job of every type, rendered on every Kubernetes backend that runs it and
planned on the local backend (dlc_airflow.local.plan), compare
(a) the hostfile: present or not, its line count and the slots of each line (hostnames differ
    per backend); where an operator writes the hostfile itself (Kubeflow's MPIJob, Trainer's
    MPI runtimes), the slots and worker count we give it;
(b) the wired env names (`wiring.is_wired`) each replica's program sees: the container env plus
    what the shell prelude exports, less the prelude's helper variables. Backends whose
    operator injects the framework env (Kubeflow, Trainer, KubeRay) are compared on what we
    inject there: the DLC_* variables.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dlc_airflow import wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends import backends_running, get_backend, podspec
from dlc_airflow.k8s.backends.kubeflow import REPLICA_INDEX
from dlc_airflow.local.plan import plan_replicas
from dlc_airflow.slurm.backend import SlurmBackend
from dlc_airflow.spec import DLCJob, hostfile_spec

NAME = "wire-0123abcd-1"
IMAGE = "registry.example.com/train:1"
COMMAND = ["python", "train.py"]

CASES: dict[str, dict] = {
    "pytorch": {"type": "pytorch", "roles": {"master": 1, "worker": 2}, "nproc_per_node": 4,
                "checkpoint": {"uri": "file:///ckpt"}},
    "pytorch-workers": {"type": "pytorch", "roles": {"worker": 3}, "nproc_per_node": 2},
    "pytorch-elastic": {"type": "pytorch", "roles": {"worker": 2},
                        "elastic": {"min_replicas": 1, "max_replicas": 4, "max_restarts": 2}},
    "deepspeed": {"type": "deepspeed", "roles": {"worker": 2}, "nproc_per_node": 2},
    # one process per GPU: 8 slots per worker unless slots_per_worker says otherwise
    "deepspeed-mpi": {"type": "deepspeed", "roles": {"worker": 3}, "launcher": "mpi", "nproc_per_node": 8},
    "deepspeed-mpi-slots": {"type": "deepspeed", "roles": {"worker": 2}, "launcher": "mpi", "nproc_per_node": 8,
                            "slots_per_worker": 2},
    "megatron-mpi": {"type": "megatron", "roles": {"worker": 2}, "launcher": "mpi", "nproc_per_node": 4},
    "mpi": {"type": "mpi", "roles": {"launcher": 1, "worker": 3}, "slots_per_worker": 4},
    "tensorflow": {"type": "tensorflow", "roles": {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}},
    "xgboost": {"type": "xgboost", "roles": {"master": 1, "worker": 2}},
    "xgboost-workers": {"type": "xgboost", "roles": {"worker": 3}},
    "batch": {"type": "batch", "roles": {"worker": 4}},
    "custom": {"type": "custom", "roles": {"trainer": 2}},
    "ray": {"type": "ray", "roles": {"head": 1, "worker": 2}},
    # a Slurm batch script: no framework wiring (it starts its own srun steps), on Slurm only
    "slurm": {"type": "slurm", "roles": {"worker": 2}},
}

# Backends that put our framework wiring into the pods (the others' operators do it).
WIRED_BY_US = {"native", "jobset"}
# What a backend cannot give, by design (documented in its module).
KNOWN_GAPS = {"ray": {"DLC_ROLE_INDEX"}}  # KubeRay pods have no replica index
# How the replica index reaches a pod where the operator wires the rest: a transport, not part
# of the wiring compared (on Trainer's Indexed Jobs the Job controller sets it too).
INDEX_TRANSPORT = {"kubeflow": {REPLICA_INDEX.env}, "trainer": {podspec.JOB_INDEX.env}}


def job_of(case: str) -> DLCJob:
    return DLCJob(image=IMAGE, command=list(COMMAND), **CASES[case])


def runs(backend: str, job: DLCJob) -> bool:
    try:
        get_backend(backend).check(job)
    except BackendError:
        return False
    return True


PAIRS = [(case, backend) for case in CASES for backend in backends_running(job_of(case).type)
         if runs(backend, job_of(case))]


def test_the_cases_cover_every_type_and_backend():
    assert {job_of(c).type for c in CASES} == set(JobType)
    assert {b for _, b in PAIRS} == {"native", "jobset", "kubeflow", "trainer", "ray"}
    for case in CASES:  # every case runs somewhere we wire ourselves (ray: on KubeRay)
        if job_of(case).type is JobType.slurm:
            from dlc_airflow.registry import backends_running as all_running

            assert "slurm" in all_running(JobType.slurm)  # compared below, with the prelude
            continue
        assert {b for c, b in PAIRS if c == case} & (WIRED_BY_US | {"ray"}), case


# -- what the local backend runs (the reference) ---------------------------------------------------


def local_plan(job: DLCJob, tmp_path: Path):
    return plan_replicas(job, NAME, tmp_path / NAME)


def local_names(plan) -> dict[str, set[str]]:
    """role -> the wired names its replicas get (the same for every index)."""
    out: dict[str, set[str]] = {}
    for replica in plan.replicas:
        names = {n for n in replica.env if wiring.is_wired(n)}
        assert out.setdefault(replica.role, names) == names, f"{replica.key} differs from its role"
    return out


# -- what the Kubernetes backends render -----------------------------------------------------------


def containers(backend: str, objects: list[dict]) -> list[tuple[str, dict]]:
    """(role, main container) of every pod template; Trainer: its trainer (role worker)."""
    out = []
    for obj in objects:
        spec, kind = obj.get("spec") or {}, obj["kind"]
        if kind == "Job":
            templates = [spec["template"]]
        elif kind == "JobSet":
            templates = [rj["template"]["spec"]["template"] for rj in spec["replicatedJobs"]]
        elif kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob"):
            field = next(k for k in spec if k.endswith("ReplicaSpecs"))
            templates = [r["template"] for r in spec[field].values()]
        elif kind == "RayJob":
            cluster = spec["rayClusterSpec"]
            templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster.get("workerGroupSpecs", [])]
        elif kind == "TrainJob":
            out.append(("worker", {"env": spec["trainer"]["env"], "command": spec["trainer"]["command"]}))
            continue
        else:
            continue
        for t in templates:
            out.append((t["metadata"]["labels"]["dlc-airflow/role"], t["spec"]["containers"][0]))
    assert out, f"{backend}: no pod templates"
    return out


def seen_names(container: dict) -> set[str]:
    """Wired names the program sees: env entries and the prelude's exports, not its helpers."""
    names = {e["name"] for e in container.get("env", [])}
    command = container.get("command") or []
    if command[:2] == ["/bin/sh", "-c"] and len(command) > 3 and command[3] == podspec.PRELUDE_ARGV0:
        exported = set(re.findall(r"export (\w+)=", command[2]))
        names |= exported
        names -= {podspec.index_env_name(n, part) for n in exported for part in ("PREFIX", "SUFFIX")}
    return {n for n in names if wiring.is_wired(n)}


def hostfile_slots(text: str) -> list[int]:
    """The slots of each line of a hostfile (`<host> slots=N`)."""
    lines = text.splitlines()
    slots = [re.fullmatch(r"\S+ slots=(\d+)", line) for line in lines]
    assert all(slots), text
    return [int(m.group(1)) for m in slots if m]


def rendered_hostfile(backend: str, job: DLCJob, objects: list[dict]) -> list[int] | None:
    """Slots per worker line of the hostfile the backend's pods get (None: no hostfile)."""
    primary = objects[0]
    if primary["kind"] == "MPIJob":  # the operator writes it: slotsPerWorker x Worker replicas
        workers = primary["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
        return [primary["spec"]["slotsPerWorker"]] * workers
    if primary["kind"] == "TrainJob":  # MPI runtimes write it from numProcPerNode x numNodes
        trainer = primary["spec"]["trainer"]
        mpi = primary["spec"]["runtimeRef"]["name"] == "deepspeed-distributed"
        return [trainer["numProcPerNode"]] * trainer["numNodes"] if mpi else None
    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    if not maps:
        return None
    (cm,) = maps
    return hostfile_slots(cm["data"]["hostfile"])


# -- the comparisons -------------------------------------------------------------------------------


@pytest.mark.parametrize("case, backend", PAIRS, ids=[f"{c}-{b}" for c, b in PAIRS])
def test_hostfile_matches_the_local_plan(case, backend, tmp_path):
    job = job_of(case)
    plan = local_plan(job, tmp_path)
    expected = hostfile_slots(plan.hostfile) if plan.hostfile is not None else None
    spec = hostfile_spec(job)
    assert (expected is None) == (spec is None)
    if spec is not None:
        assert expected == [spec.slots] * job.roles["worker"].replicas

    objects = get_backend(backend).render(job, NAME)
    if backend == "ray":
        assert expected is None
        return
    assert rendered_hostfile(backend, job, objects) == expected, f"{case} on {backend}"
    # where we mount it, DLC_HOSTFILE names the mount
    for _, c in containers(backend, objects):
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        if expected is None:
            assert "DLC_HOSTFILE" not in env
        elif backend in WIRED_BY_US or objects[0]["kind"] == "PyTorchJob":
            assert env["DLC_HOSTFILE"] == spec.path and spec.path in mounts


@pytest.mark.parametrize("case, backend", PAIRS, ids=[f"{c}-{b}" for c, b in PAIRS])
def test_wired_env_names_match_the_local_plan(case, backend, tmp_path):
    job = job_of(case)
    local = local_names(local_plan(job, tmp_path))
    rendered: dict[str, set[str]] = {}
    for role, c in containers(backend, get_backend(backend).render(job, NAME)):
        names = seen_names(c) - INDEX_TRANSPORT.get(backend, set())
        assert rendered.setdefault(role, names) == names, f"{backend}: {role} pods differ"

    for role, names in rendered.items():
        if backend == "ray" and role not in local:
            role_local = local["head"]  # only the head runs locally; a worker gets the same names
        else:
            # Kubeflow runs a worker-only xgboost job's first worker as Master
            role_local = local[role if role in local else "worker"]
        if backend in WIRED_BY_US:
            assert names == role_local, f"{case} {role} on {backend}"
        else:
            # the operator wires the framework; we add the DLC_* variables, as everywhere
            assert all(n.startswith("DLC_") for n in names), f"{backend} injects {names} itself"
            expected = {n for n in role_local if n.startswith("DLC_")} - KNOWN_GAPS.get(backend, set())
            assert names == expected, f"{case} {role} on {backend}"


# -- the slurm backend: what its prelude gives each task (dlc_airflow.slurm.prelude) ----------------

SLURM_CASES = [c for c in CASES if job_of(c).type in SlurmBackend.job_types and job_of(c).type is not JobType.slurm]


def test_slurm_cases_cover_its_types():
    assert {job_of(c).type for c in SLURM_CASES} | {JobType.slurm} == set(SlurmBackend.job_types)


@pytest.mark.parametrize("case", SLURM_CASES)
def test_slurm_prelude_env_and_hostfile_match_the_local_plan(case, tmp_path):
    """Task k of the srun step gets replica k's env, derived from SLURM_* at run time: the same
    wired names as the local plan's replica, and the same hostfile (slots per worker line)."""
    from dlc_airflow.slurm.prelude import plan_task, replicas

    job = job_of(case)
    plan = local_plan(job, tmp_path)
    local = local_names(plan)
    nodes = [f"n{i}" for i in range(len(replicas(job)))]
    environ = {"PATH": "/usr/bin", "SLURM_PROCID": "0", "RANK": "99", "DLC_SLURM_SPEC": "{}"}
    for procid, (role, index) in enumerate(replicas(job)):
        task = plan_task(job, NAME, procid, nodes, lambda node: node, f"/jobs/{NAME}", environ, job_id=42)
        assert (task.role, task.index) == (role, index)
        assert {n for n in task.env if wiring.is_wired(n)} == local[role], f"{case} {role}-{index} on slurm"
        if plan.hostfile is None:
            assert task.hostfile is None
        else:
            assert hostfile_slots(task.hostfile) == hostfile_slots(plan.hostfile)
            assert task.env["DLC_HOSTFILE"] == task.hostfile_path == f"/jobs/{NAME}/hostfile"


def test_slurm_batch_script_gets_no_framework_wiring():
    from dlc_airflow.slurm.backend import script_env

    env = script_env(job_of("slurm"), NAME, f"/jobs/{NAME}")
    assert {n for n in env if wiring.is_wired(n)} == {
        "DLC_JOB_NAME", "DLC_JOB_TYPE", "DLC_ROLE", "DLC_ROLE_REPLICAS", "DLC_ROLE_INDEX", "DLC_OUTPUT_FILE"}
