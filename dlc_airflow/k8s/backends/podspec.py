"""Pod templates from a DLCJob role: containers, env, resources, volumes, scheduling.

Shared by every backend that puts our pod template into its objects (native Jobs, JobSet,
Kubeflow replica specs, KubeRay groups; Trainer v2 uses the pieces through runtime patches).

Index-dependent env (`wiring.IndexExpr`) becomes, per value:
- the plain replica index: a Downward API reference to the index (the Job's completion-index
  annotation on native/JobSet, the replica-index label on Kubeflow);
- anything else (an offset such as RANK of a worker after the master, or an index embedded
  in a string such as TF_CONFIG): a one-line shell prelude that computes it at start, with the
  constant parts passed in env vars (never pasted into shell source):
      /bin/sh -c 'export RANK=$((JOB_COMPLETION_INDEX + 1)); exec "$@"' dlc-airflow <argv...>
  Images therefore need /bin/sh when such values exist (every framework image has one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dlc_airflow import wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.backends.jobsecret import pod_env
from dlc_airflow.spec import DLCJob, Resources
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.wiring import Addressing, IndexExpr, PodValue

# Spot / preemptible capacity. Nodes of spot capacity carry SPOT_LABEL=SPOT_VALUE (the label
# Karpenter puts on spot nodes; label your own spot pools the same way) and, so that only jobs
# that asked for spot land there, the taint SPOT_TAINT_KEY=SPOT_TAINT_VALUE:SPOT_TAINT_EFFECT.
# scheduling.spot="prefer" tolerates the taint and prefers the label (falls back to on-demand);
# "require" tolerates it and requires the label.
SPOT_LABEL = "karpenter.sh/capacity-type"
SPOT_VALUE = "spot"
SPOT_TAINT_KEY = "dlc-airflow/spot"
SPOT_TAINT_VALUE = "true"
SPOT_TAINT_EFFECT = "NoSchedule"

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA GPU feature discovery
RDMA_RESOURCE = "rdma/hca"
HOSTNAME_LABEL = "kubernetes.io/hostname"

# Kueue's topology-aware scheduling (TAS): on each pod set's template, the level its pods share.
TAS_REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
TAS_SLICE_LEVEL_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
TAS_SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
# Pod sets of one group share one domain; Kueue groups exactly two, one of them a single pod.
TAS_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
TAS_GROUP = "job"

# The runtime writes the job's outputs/metrics JSON here; the kubelet copies it into the
# container's terminated state, where the waiting side reads it without logs or exec.
OUTPUT_FILE = "/dev/termination-log"
SHM_PATH = "/dev/shm"
PRELUDE_ARGV0 = "dlc-airflow"

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

_SHELL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class IndexSource:
    """Where a pod finds its replica index: an env var, filled from a Downward API field."""

    env: str
    field_path: str


# batch/v1 Indexed Jobs (native, JobSet, Trainer's JobSet): the completion index annotation.
JOB_INDEX = IndexSource("JOB_COMPLETION_INDEX", f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']")


# -- env ----------------------------------------------------------------------------------------


def index_env_name(name: str, part: str) -> str:
    return f"DLC_{name}_{part}"


def pod_role_env(job: DLCJob, name: str, role: str, addr: Addressing | None,
                 framework: bool = True) -> dict[str, PodValue]:
    """A pod's env (wiring.role_env) with the user's hidden values as references to the job's
    own Secret (jobsecret.pod_env): no value of theirs sits in a pod template."""
    env = wiring.role_env(job, name, role, addr, framework)
    env.update(pod_env(job, name, role))
    return env


def env_and_exports(
    env: dict[str, PodValue], index: IndexSource | None
) -> tuple[list[Manifest], list[str]]:
    """Container env entries, and the shell exports for computed index-dependent values."""
    entries: list[Manifest] = []
    exports: list[str] = []
    needs_index = any(isinstance(v, IndexExpr) for v in env.values())
    if needs_index and index is not None:
        entries.append({"name": index.env, "valueFrom": {"fieldRef": {"fieldPath": index.field_path}}})
    for key, value in env.items():
        if index is not None and key == index.env:
            continue  # the index itself is defined above
        if isinstance(value, SecretKeyRef):  # the kubelet reads it: the value is in no object of ours
            entries.append({"name": key, "valueFrom": {"secretKeyRef": {"name": value.secret, "key": value.key}}})
            continue
        if isinstance(value, str):
            entries.append({"name": key, "value": value})
            continue
        if not isinstance(value, IndexExpr):  # pragma: no cover - wiring.role_env made it a reference
            raise BackendError(f"env {key}: {value.describe()} must be resolved before rendering")
        if index is None:
            if value.is_plain_index:
                continue  # no replica index on this backend (e.g. Ray pods): leave it unset
            raise BackendError(f"env {key} depends on the replica index, which this backend does not expose")
        if value.is_plain_index:
            entries.append({"name": key, "valueFrom": {"fieldRef": {"fieldPath": index.field_path}}})
            continue
        if not _SHELL_NAME.match(key):
            raise BackendError(f"env {key}: an index-dependent variable must be a shell name ([A-Za-z_][A-Za-z0-9_]*)")
        number = f"${{{index.env}}}" if value.offset == 0 else f"$(({index.env} + {value.offset}))"
        parts = []
        if value.prefix:
            entries.append({"name": index_env_name(key, "PREFIX"), "value": value.prefix})
            parts.append(f"${{{index_env_name(key, 'PREFIX')}}}")
        parts.append(number)
        if value.suffix:
            entries.append({"name": index_env_name(key, "SUFFIX"), "value": value.suffix})
            parts.append(f"${{{index_env_name(key, 'SUFFIX')}}}")
        value_src = "".join(parts)
        exports.append(f"export {key}={value_src}" if len(parts) == 1 else f'export {key}="{value_src}"')
    # One entry per name (the last wins): CRDs declare env a list-map keyed by name.
    unique = {e["name"]: e for e in entries}
    return list(unique.values()), exports


def wrap_command(argv: list[str], exports: list[str]) -> list[str]:
    """argv, run after the exports: /bin/sh -c '<exports>; exec "$@"' dlc-airflow argv..."""
    if not exports:
        return list(argv)
    return ["/bin/sh", "-c", "; ".join(exports) + '; exec "$@"', PRELUDE_ARGV0, *argv]


# -- resources ----------------------------------------------------------------------------------


def resource_list(res: Resources) -> dict[str, str]:
    out: dict[str, str] = {}
    if res.cpu is not None:
        out["cpu"] = str(res.cpu)
    if res.memory is not None:
        out["memory"] = str(res.memory)
    if res.ephemeral_storage is not None:
        out["ephemeral-storage"] = str(res.ephemeral_storage)
    if res.gpu:
        out[GPU_RESOURCE] = str(res.gpu)
    if res.rdma:
        out[RDMA_RESOURCE] = str(res.rdma)
    return out


def resources(res: Resources) -> Manifest:
    """requests = limits: guaranteed resources, and extended resources must match anyway."""
    values = resource_list(res)
    return {"requests": dict(values), "limits": dict(values)} if values else {}


# -- volumes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Volumes:
    volumes: list[Manifest]
    mounts: list[Manifest]  # for every container of the job (init containers included)


def _mount(name: str, path: str, read_only: bool = False, sub_path: str | None = None) -> Manifest:
    mount: Manifest = {"name": name, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    if sub_path:
        mount["subPath"] = sub_path
    return mount


def storage_volumes(job: DLCJob) -> Volumes:
    """Storage mounts, code and shared memory. Names are `<kind>-<n>`: stable and DNS-safe."""
    volumes: list[Manifest] = []
    mounts: list[Manifest] = []
    for i, m in enumerate(job.storage):
        source: JSONObject
        if m.type == "pvc":
            name, source = f"pvc-{i}", {"persistentVolumeClaim": {"claimName": m.claim_name}}
            if m.read_only:
                source["persistentVolumeClaim"]["readOnly"] = True
        elif m.type == "nfs":
            name, source = f"nfs-{i}", {"nfs": {"server": m.server, "path": m.path}}
            if m.read_only:
                source["nfs"]["readOnly"] = True
        elif m.type == "host_path":
            name, source = f"hostpath-{i}", {"hostPath": {"path": m.path}}
        elif m.type == "csi":
            csi: Manifest = {"driver": m.driver}
            if m.volume_attributes:
                csi["volumeAttributes"] = dict(m.volume_attributes)
            if m.secret_name:
                csi["nodePublishSecretRef"] = {"name": m.secret_name}
            if m.read_only:
                csi["readOnly"] = True
            name, source = f"csi-{i}", {"csi": csi}
        elif m.type == "config_map":
            name, source = f"configmap-{i}", {"configMap": {"name": m.name}}
        elif m.type == "secret":
            name, source = f"secret-{i}", {"secret": {"secretName": m.name}}
        elif m.type == "empty_dir":
            empty: Manifest = {}
            if m.memory:
                empty["medium"] = "Memory"
            if m.size_limit:
                empty["sizeLimit"] = str(m.size_limit)
            name, source = f"emptydir-{i}", {"emptyDir": empty}
        else:  # pragma: no cover - the spec's discriminated union has no other types
            raise BackendError(f"storage[{i}]: unknown mount type {m.type!r}")
        volumes.append({"name": name, **source})
        mounts.append(_mount(name, m.mount_path, m.read_only, m.sub_path))
    if job.code:
        volumes.append({"name": "code", "emptyDir": {}})
        mounts.append(_mount("code", job.code.mount_path))
    return Volumes(volumes, mounts)


def shm_volume(res: Resources) -> Volumes:
    if not res.shared_memory:
        return Volumes([], [])
    return Volumes(
        [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": str(res.shared_memory)}}],
        [_mount("dshm", SHM_PATH)],
    )


# -- scheduling ---------------------------------------------------------------------------------


def node_selector(job: DLCJob, res: Resources) -> dict[str, str]:
    selector = dict(job.scheduling.node_selector)
    if res.gpu_type:
        selector[GPU_PRODUCT_LABEL] = res.gpu_type
    return selector


def tolerations(job: DLCJob) -> list[Manifest]:
    out = [dict(t) for t in job.scheduling.tolerations]
    if job.scheduling.spot != "none":
        out.append(
            {"key": SPOT_TAINT_KEY, "operator": "Equal", "value": SPOT_TAINT_VALUE, "effect": SPOT_TAINT_EFFECT}
        )
    return out


def affinity(job: DLCJob) -> Manifest:
    s = job.scheduling
    required = []
    if s.include_nodes:
        required.append({"key": HOSTNAME_LABEL, "operator": "In", "values": list(s.include_nodes)})
    if s.exclude_nodes:
        required.append({"key": HOSTNAME_LABEL, "operator": "NotIn", "values": list(s.exclude_nodes)})
    spot = {"key": SPOT_LABEL, "operator": "In", "values": [SPOT_VALUE]}
    if s.spot == "require":
        required.append(spot)
    node: Manifest = {}
    if required:
        # One term: its expressions are ANDed (several terms would be ORed).
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": [{"matchExpressions": required}]}
    if s.spot == "prefer":
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 100, "preference": {"matchExpressions": [spot]}}]
    return {"nodeAffinity": node} if node else {}


def scheduling_fields(job: DLCJob, res: Resources) -> Manifest:
    """Pod spec fields for placement: nodeSelector, tolerations, affinity, priority, SA."""
    spec: Manifest = {}
    if sel := node_selector(job, res):
        spec["nodeSelector"] = sel
    if tol := tolerations(job):
        spec["tolerations"] = tol
    if aff := affinity(job):
        spec["affinity"] = aff
    if job.scheduling.priority_class:
        spec["priorityClassName"] = job.scheduling.priority_class
    if job.scheduling.service_account:
        spec["serviceAccountName"] = job.scheduling.service_account
    return spec


# -- init containers ----------------------------------------------------------------------------

# Static shell; the repository, revision and credentials come in through env.
_CLONE_SCRIPT = (
    "set -eu; "
    "if [ -n \"${GIT_PASSWORD:-}\" ]; then "
    "set -- -c 'credential.helper=!f() { echo \"username=${GIT_USERNAME:-git}\"; echo \"password=${GIT_PASSWORD}\"; }; f'; "
    "else set --; fi; "
    'git "$@" clone --quiet "$DLC_GIT_REPO" "$DLC_CODE_DIR"; '
    'git -C "$DLC_CODE_DIR" checkout --quiet "$DLC_GIT_REVISION"'
)


def git_safe_directory(job: DLCJob) -> dict[str, str]:
    """Git config (by env, git >= 2.31) that trusts the cloned code's folder: the emptyDir
    under it belongs to root, the clone and the job run as the image's user, and git refuses
    a repository owned by another user ("dubious ownership") - in the clone's checkout and in
    the job's own git commands alike. Left out when the job sets git config by env itself."""
    if job.code is None or "GIT_CONFIG_COUNT" in job.env:
        return {}
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": job.code.mount_path}


def clone_container(job: DLCJob, mounts: list[Manifest]) -> Manifest | None:
    """Init container cloning job.code into its emptyDir (mounted in every container)."""
    code = job.code
    if code is None:
        return None
    env: list[JSONObject] = [
        {"name": "DLC_GIT_REPO", "value": code.repo},
        {"name": "DLC_GIT_REVISION", "value": code.revision},
        {"name": "DLC_CODE_DIR", "value": code.mount_path},
        *({"name": k, "value": v} for k, v in git_safe_directory(job).items()),
    ]
    if code.secret_name:
        for var, key in (("GIT_USERNAME", "username"), ("GIT_PASSWORD", "password")):
            env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": code.secret_name, "key": key}}})
    return {
        "name": "git-clone",
        "image": code.image,
        "command": ["/bin/sh", "-c", _CLONE_SCRIPT],
        "env": env,
        "volumeMounts": [m for m in mounts if m["name"] == "code"],
        # a failed clone's last lines (git's own error) become its termination message,
        # which the task's failure names
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


# -- the pod template ---------------------------------------------------------------------------


def pod_template(
    job: DLCJob,
    role: str,
    env: dict[str, PodValue],
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    container_name: str = "main",
    index: IndexSource | None = JOB_INDEX,
    restart_policy: str | None = "Never",
    subdomain: str | None = None,
    extra: Volumes | None = None,
    ports: Iterable[Manifest] = (),
    run_command: bool = True,
    setup: Sequence[str] = (),
) -> Manifest:
    """The pod template of `role`: main container, init containers, volumes, placement.

    `setup`: shell lines the command wrapper runs before the command (sshkeys.setup_lines).

    `run_command=False` leaves the container's command to the operator (KubeRay starts
    `ray start` itself); `restart_policy=None` leaves it to the replica spec (Kubeflow).
    The working directory is job.working_dir, else the cloned code's mount path.
    """
    res = job.role_resources(role)
    vols = storage_volumes(job)
    shm = shm_volume(res)
    volumes = vols.volumes + shm.volumes + (extra.volumes if extra else [])
    mounts = vols.mounts + shm.mounts + (extra.mounts if extra else [])
    paths = [m["mountPath"] for m in mounts]
    if clash := sorted({p for p in paths if paths.count(p) > 1}):
        raise BackendError(
            f"roles.{role}: mount path {clash} is used twice (a storage mount over shared memory "
            f"{SHM_PATH} or a hostfile?): move the storage mount"
        )

    entries, exports = env_and_exports({**git_safe_directory(job), **env, "DLC_OUTPUT_FILE": OUTPUT_FILE}, index)
    container: Manifest = {"name": container_name, "image": job.role_image(role)}
    if run_command:
        container["command"] = wrap_command(job.role_command(role), [*setup, *exports])
    elif exports:
        computed = sorted(k for k, v in env.items() if isinstance(v, IndexExpr) and not v.is_plain_index)
        raise BackendError(f"roles.{role}: env {computed} is computed at start by a command wrapper, "
                           "which this backend cannot add")
    working_dir = job.working_dir or (job.code.mount_path if job.code else None)
    if working_dir:
        container["workingDir"] = working_dir
    if entries:
        container["env"] = entries
    if ports := list(ports):
        container["ports"] = ports
    if r := resources(res):
        container["resources"] = r
    if mounts:
        container["volumeMounts"] = mounts
    container["terminationMessagePath"] = OUTPUT_FILE
    container["terminationMessagePolicy"] = "File"

    init = []
    if clone := clone_container(job, mounts):
        init.append(clone)
    if job.health_check:
        check = {
            "name": "health-check",
            "image": job.role_image(role),
            "command": wrap_command(list(job.health_check.command), exports),
        }
        for key in ("workingDir", "env", "resources", "volumeMounts"):
            if key in container:
                check[key] = container[key]
        init.append(check)

    spec: Manifest = {}
    if init:
        spec["initContainers"] = init
    spec["containers"] = [container]
    if volumes:
        spec["volumes"] = volumes
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if subdomain:
        spec["subdomain"] = subdomain
    spec["enableServiceLinks"] = False  # hundreds of *_SERVICE_* vars help no one, and slow starts
    spec.update(scheduling_fields(job, res))
    metadata: Manifest = {"labels": dict(labels)}
    if annotations := {**annotations, **topology_annotations(job)}:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def topology_annotations(job: DLCJob) -> dict[str, str]:
    """Kueue's TAS annotations of a pod set, from scheduling.topology. Every pod set gets the
    same, so each role's pods share a domain; a job of two roles, one a single pod (master +
    workers, head + workers, launcher + workers), is one group: all its pods share one domain.
    Kueue groups no more than two pod sets, and none with slices."""
    topology = job.scheduling.topology
    if topology is None:
        return {}
    out = {TAS_REQUIRED_ANNOTATION: topology.required} if topology.required else \
        {TAS_PREFERRED_ANNOTATION: str(topology.preferred)}
    if topology.slice_level and topology.slice_size:
        out[TAS_SLICE_LEVEL_ANNOTATION] = topology.slice_level
        out[TAS_SLICE_SIZE_ANNOTATION] = str(topology.slice_size)
    elif len(job.roles) == 2 and min(role.replicas for role in job.roles.values()) == 1:
        out[TAS_GROUP_ANNOTATION] = TAS_GROUP
    return out
