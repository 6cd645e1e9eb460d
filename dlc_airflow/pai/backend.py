"""The pai backend's pure half: what a DLCJob becomes on the managed DLC service.

    PaiBackend().check(job)                        # BackendError naming what DLC cannot express
    fields = render(job, name, identity, attempt)  # CreateJobRequest fields (the API's names)
    state = status(job_map)                        # GetJob body / ListJobs item -> JobStatus

`render` returns a plain dict keyed as the API documents its fields (DisplayName, JobType,
JobSpecs...), which the client turns into the SDK's CreateJobRequest. Nothing here talks to
the service or imports its SDK.

What DLC wires itself: it runs each framework's operator, so MASTER_ADDR / RANK /
WORLD_SIZE (PyTorchJob, XGBoostJob), TF_CONFIG (TFJob) and the MPI hostfile (MPIJob) come
from the service. We add only what it does not set: our DLC_* variables and, per role, a
short shell prelude in the role's UserCommand (DLC_ROLE, the replica index read from the
pod's hostname, SHARD_INDEX / SHARD_COUNT for batch, PET_* for torchrun).
"""

from __future__ import annotations

import json
import math
import re
import shlex
from datetime import datetime
from typing import Any, ClassVar

from dlc_airflow import naming, reasons, wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runner import Replica, replica_order
from dlc_airflow.spec import CSIMount, DLCJob, NFSMount, is_templated
from dlc_airflow.status import JobState, JobStatus, RoleCounts, parse_time

NAME = "pai"

# Our job type -> DLC JobType. DeepSpeed and Megatron run as PyTorch jobs on DLC; batch
# (data-parallel shards) is DLC's ElasticBatchJob; custom (one role, nothing wired) is a
# PyTorchJob of workers, the plainest multi-pod job DLC has.
JOB_TYPE_MAP: dict[JobType, str] = {
    JobType.pytorch: "PyTorchJob",
    JobType.deepspeed: "PyTorchJob",
    JobType.megatron: "PyTorchJob",
    JobType.tensorflow: "TFJob",
    JobType.mpi: "MPIJob",
    JobType.xgboost: "XGBoostJob",
    JobType.ray: "RayJob",
    JobType.batch: "ElasticBatchJob",
    JobType.custom: "PyTorchJob",
}
# Another engineer adds the slurm job type: map it when (and only when) it exists.
_SLURM = getattr(JobType, "slurm", None)
if _SLURM is not None:
    JOB_TYPE_MAP[_SLURM] = "SlurmJob"

# Our role -> DLC JobSpec Type (the names the CreateJob reference lists per JobType).
ROLE_TYPES = {
    "master": "Master", "worker": "Worker", "chief": "Chief", "ps": "PS", "evaluator": "Evaluator",
    "launcher": "Launcher", "head": "Head",
}

# DLC Status -> (our state, the reason we report). "...Reserving": the job has finished and
# DLC keeps its nodes for JobReservedMinutes; the task has its answer already.
STATUS_MAP: dict[str, tuple[JobState, str]] = {
    "Creating": (JobState.PENDING, reasons.CREATED),
    "Queuing": (JobState.QUEUED, "Queuing"),
    "Bidding": (JobState.QUEUED, "Bidding"),
    "EnvPreparing": (JobState.PENDING, "EnvPreparing"),
    "SanityChecking": (JobState.PENDING, "SanityChecking"),
    "Running": (JobState.RUNNING, reasons.RUNNING),
    "Restarting": (JobState.RESTARTING, reasons.RESTARTING),
    "Stopping": (JobState.RUNNING, "Stopping"),
    "SucceededReserving": (JobState.SUCCEEDED, reasons.COMPLETED),
    "FailedReserving": (JobState.FAILED, "Failed"),
    "Succeeded": (JobState.SUCCEEDED, reasons.COMPLETED),
    "Failed": (JobState.FAILED, "Failed"),
    "Stopped": (JobState.STOPPED, reasons.STOPPED),
}
TERMINAL_STATUSES = frozenset(s for s, (state, _) in STATUS_MAP.items() if state.terminal)
# DLC reason codes we report under the shared names (reasons.py)
REASON_CODES = {"JobMaxRunningTimeExceeded": reasons.DEADLINE_EXCEEDED, "StoppedByUser": reasons.STOPPED}

# Annotations this backend reads (DLC has no annotations; these say what DLCJob has no field for)
ECS_SPEC = "pai/ecs-spec"  # instance type of every role (public resources); pai/ecs-spec-<role> per role
IDLE_RESOURCES = "pai/idle-resources"  # "true": DLC's idle ("tide") resources
CODE_SOURCE = "pai/code-source"  # the CodeSourceId under which the workspace registered code.repo
ANNOTATIONS = (ECS_SPEC, IDLE_RESOURCES, CODE_SOURCE)

# Tags: DLC allows 20 per job; ours take 11 (naming.job_labels, the claimed try, a custom role).
MAX_TAGS = 20
OUR_TAGS = 11
CLAIMED_TRY = naming.PREFIX + "claimed-try"
CUSTOM_ROLE = naming.PREFIX + "role"
DATA_URI = ("oss://", "nas://", "cpfs://", "bmcpfs://")
OSS_CSI = "ossplugin.csi.alibabacloud.com"
HOSTNAME_INDEX = "${HOSTNAME##*-}"  # DLC pods are named <job>-<role>-<index>


class PaiBackend:
    """The pure half the registry knows (`name`, `job_types`, `check`)."""

    name: ClassVar[str] = NAME
    job_types: ClassVar[frozenset[JobType]] = frozenset(JOB_TYPE_MAP)

    def check(self, job: DLCJob) -> None:
        check(job)

    def render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int,
               **defaults: Any) -> JSONObject:
        return render(job, name, identity, attempt, **defaults)

    def preview(self, job: DLCJob, name: str) -> list[JSONObject]:
        """What `dlc-airflow render` prints: the CreateJob request (the workspace is the
        connection's, filled in at submit)."""
        return [{"request": "CreateJob", "body": render(job, name, None, 1, workspace_id="<the connection's workspace>")}]

    def status(self, data: JSONObject) -> JobStatus:
        return status(data)


def _refuse(field: str, why: str) -> BackendError:
    return BackendError(f"pai backend: {field}: {why}")


# -- check ---------------------------------------------------------------------------------
def check(job: DLCJob) -> None:
    """Raise BackendError (one line, the field named) for what DLC cannot express.

    Templated strings are checked once rendered (the runner checks again before submitting).
    """
    if job.type not in JOB_TYPE_MAP:
        raise _refuse("type", f"{job.type.value!r} has no DLC job type; DLC runs {', '.join(sorted(t.value for t in JOB_TYPE_MAP))}")
    if job.launcher != "torchrun":
        raise _refuse("launcher", "DLC's PyTorchJob writes no MPI hostfile: use launcher='torchrun' (or type='mpi')")
    if job.elastic is not None:
        raise _refuse("elastic", "DLC's CreateJob takes no elastic range (ElasticSpec is not supported): "
                      "set roles.worker.replicas and drop elastic")
    if job.port is not None:
        raise _refuse("port", "DLC picks the rendezvous port and sets MASTER_PORT itself: drop port")
    if job.type is JobType.mpi and job.slots_per_worker != 1:
        raise _refuse("slots_per_worker", "DLC's MPIJob has no slots setting (it writes the hostfile itself): drop it")
    if job.ttl_after_finished is not None:
        raise _refuse("ttl_after_finished", "DLC keeps finished jobs itself (JobReservedMinutes keeps nodes "
                      "alive, the opposite): drop it, or use on_finish='delete'")
    _check_env(job)
    _check_roles(job)
    _check_storage(job)
    _check_code(job)
    _check_scheduling(job)
    _check_fault_tolerance(job)
    _check_metadata(job)


# What DLC offers instead of a secret in a job's env: its RAM role credential injection.
_INSTEAD = ("use the job's RAM role instead (DLC's credential injection, CredentialConfig: temporary STS "
            "credentials in the job) and read the secret inside the job, e.g. from KMS or a read-only data source")


def _check_env(job: DLCJob) -> None:
    """No secret reaches DLC's request: Envs and UserCommand are readable by the whole
    workspace (there is no store of ours to point at, as a Kubernetes Secret)."""
    from dlc_airflow.secrets.resolve import entries

    for entry in entries(job):
        if not isinstance(entry.value, str):
            raise _refuse(entry.field, f"secret references are not supported on DLC (the value would be "
                          f"visible in the job's details): {_INSTEAD}")
        if entry.hidden():
            raise _refuse(entry.field, f"a secret-looking name: its value would be in the job's Envs, readable by "
                          f"the whole workspace: {_INSTEAD} (or rename it if it is not a secret)")


def _check_roles(job: DLCJob) -> None:
    ecs = _ecs_specs(job)
    for role in job.roles:
        res = job.role_resources(role)
        where = f"roles.{role}.resources" if job.roles[role].resources else "resources"
        if res.ephemeral_storage:
            raise _refuse(f"{where}.ephemeral_storage", "DLC has no ephemeral storage setting: drop it")
        if ecs.get(role) and (res.cpu or res.memory or res.gpu or res.gpu_type):
            raise _refuse(where, f"the instance type {ecs[role]!r} ({ECS_SPEC}) fixes cpu, memory and gpu: "
                          "drop them, or use a quota (scheduling.queue) and no instance type")


def _check_storage(job: DLCJob) -> None:
    for i, mount in enumerate(job.storage):
        where = f"storage[{i}]"
        if isinstance(mount, NFSMount):
            continue
        if isinstance(mount, CSIMount):
            if mount.secret_name:
                raise _refuse(f"{where}.secret_name", "DLC reads data sources with the workspace's RAM role, "
                              "not a Kubernetes Secret: drop secret_name")
            uri = mount.volume_attributes.get("uri")
            if uri is not None:
                if not is_templated(uri) and not uri.startswith(DATA_URI):
                    raise _refuse(f"{where}.volume_attributes.uri", f"{uri!r} is not a DLC data source URI "
                                  f"({', '.join(DATA_URI)})")
            elif mount.driver != OSS_CSI or not mount.volume_attributes.get("bucket"):
                raise _refuse(where, f"a csi mount on DLC is an OSS bucket (driver {OSS_CSI} with "
                              "volume_attributes bucket, url, path) or names its uri (volume_attributes.uri: "
                              "oss://, nas://, cpfs://)")
            continue
        raise _refuse(f"{where}.type", f"DLC mounts data sources (OSS, NAS, CPFS), not {mount.type!r} volumes: "
                      "use an nfs mount (NAS) or a csi mount with an oss:// / cpfs:// uri")


def _check_code(job: DLCJob) -> None:
    code = job.code
    if code is None:
        return
    if not job.annotations.get(CODE_SOURCE):
        raise _refuse("code.repo", f"DLC clones only code sources registered in the workspace, not a URL "
                      f"({code.repo!r}): register it as a code source and set annotations[{CODE_SOURCE!r}] "
                      "to its CodeSourceId")
    if code.secret_name:
        raise _refuse("code.secret_name", "the code source keeps its own credentials: drop secret_name")
    if "image" in code.model_fields_set:
        raise _refuse("code.image", "DLC clones the code source itself: drop image")


def _check_scheduling(job: DLCJob) -> None:
    sched = job.scheduling
    if sched.node_selector:
        raise _refuse("scheduling.node_selector", "DLC schedules by quota and node names, not node labels: "
                      "use include_nodes / exclude_nodes")
    if sched.tolerations:
        raise _refuse("scheduling.tolerations", "DLC takes no tolerations: drop them")
    if sched.service_account:
        raise _refuse("scheduling.service_account", "DLC jobs run with the workspace's RAM role, not a "
                      "ServiceAccount: drop it")
    if sched.spot == "prefer":
        raise _refuse("scheduling.spot", "DLC's spot jobs do not fall back to regular instances: use spot='require'")
    if sched.queue_priority is not None:
        raise _refuse("scheduling.queue_priority", "a Kueue priority; DLC's is priority_class (1-9)")
    if sched.topology is not None:
        raise _refuse("scheduling.topology", "Kueue's topology-aware placement; DLC places a job's nodes "
                      "itself: drop it")
    if sched.priority_class is not None:
        priority(sched.priority_class)


def priority(value: str | None) -> int | None:
    """DLC's Priority (1 lowest .. 9 highest) from scheduling.priority_class."""
    if value is None or is_templated(value):
        return None
    if not (value.isdigit() and 1 <= int(value) <= 9):
        raise _refuse("scheduling.priority_class", f"{value!r}: DLC priorities are 1 (lowest) to 9 (highest): "
                      "write e.g. priority_class='5'")
    return int(value)


def _check_fault_tolerance(job: DLCJob) -> None:
    ft = job.fault_tolerance
    if ft.retryable_exit_codes:
        raise _refuse("fault_tolerance.retryable_exit_codes", "DLC restarts by its own rules (AIMaster, restart "
                      "policies), not by a list of exit codes: drop them")
    if not ft.restart_on_preemption:
        raise _refuse("fault_tolerance.restart_on_preemption", "DLC decides how preempted pods are replaced: "
                      "drop it")


def _check_metadata(job: DLCJob) -> None:
    for key in job.annotations:
        if key not in ANNOTATIONS and not key.startswith(ECS_SPEC + "-"):
            raise _refuse(f"annotations.{key}", f"DLC jobs have no annotations; this backend reads "
                          f"{', '.join(ANNOTATIONS)} and {ECS_SPEC}-<role>: use labels (DLC tags) instead")
        if key.startswith(ECS_SPEC + "-") and key[len(ECS_SPEC) + 1:] not in job.roles:
            raise _refuse(f"annotations.{key}", f"there is no role {key[len(ECS_SPEC) + 1:]!r} "
                          f"(roles: {', '.join(job.roles)})")
    idle = job.annotations.get(IDLE_RESOURCES)
    if idle is not None and not is_templated(idle) and idle not in ("true", "false"):
        raise _refuse(f"annotations.{IDLE_RESOURCES}", f"{idle!r}: write 'true' or 'false'")
    if len(job.labels) > MAX_TAGS - OUR_TAGS:
        raise _refuse("labels", f"{len(job.labels)} labels: DLC keeps {MAX_TAGS} tags per job and dlc-airflow "
                      f"uses {OUR_TAGS}: keep at most {MAX_TAGS - OUR_TAGS}")
    for key in job.labels:
        if key.lower().startswith(("aliyun", "acs:")):
            raise _refuse(f"labels.{key}", "DLC tag keys may not start with 'aliyun' or 'acs:'")


# -- render --------------------------------------------------------------------------------
def render(job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int, *,
           workspace_id: str | None = None, resource_id: str | None = None) -> JSONObject:
    """The CreateJobRequest fields for `job` (the API's names; see docs/pai.md).

    `resource_id` is the connection's default quota, used when scheduling.queue is unset.
    """
    check(job)
    quota = job.scheduling.queue or resource_id
    ecs = _ecs_specs(job)
    roles = ordered_roles(job.roles)
    specs = [_job_spec(job, role, quota, ecs.get(role)) for role in roles]
    fields: JSONObject = {
        "DisplayName": name,
        "JobType": JOB_TYPE_MAP[job.type],
        "JobSpecs": specs,
        # the job-level command is required; every role carries its own (with its prelude)
        "UserCommand": specs[0]["UserCommand"],
        "Envs": job_envs(job, name),
        "Settings": _settings(job, name, identity, attempt),
        "Description": _description(identity),
    }
    if workspace_id:
        fields["WorkspaceId"] = workspace_id
    if quota:
        fields["ResourceId"] = quota
    if (prio := priority(job.scheduling.priority_class)) is not None:
        fields["Priority"] = prio
    if job.max_running_time is not None:
        fields["JobMaxRunningTimeMinutes"] = max(1, math.ceil(job.max_running_time.total_seconds() / 60))
    if sources := data_sources(job):
        fields["DataSources"] = sources
    if job.code is not None or job.annotations.get(CODE_SOURCE):
        fields["CodeSource"] = code_source(job)
    if job.type is JobType.tensorflow and "chief" in job.roles:
        fields["SuccessPolicy"] = "ChiefWorker"  # as Kubeflow's TFJob: the chief decides
    return fields


def role_type(job: DLCJob, role: str) -> str:
    if job.type is JobType.custom or role not in ROLE_TYPES:
        return "Worker"
    return ROLE_TYPES[role]


def _job_spec(job: DLCJob, role: str, quota: str | None, ecs_spec: str | None) -> JSONObject:
    spec: JSONObject = {
        "Type": role_type(job, role),
        "PodCount": job.roles[role].replicas,
        "Image": job.role_image(role),
        "UserCommand": role_command(job, role),
        # a failed pod is not restarted in place: AIMaster restarts the job (max_restarts)
        "RestartPolicy": "Never",
    }
    res = job.role_resources(role)
    if ecs_spec:
        spec["EcsSpec"] = ecs_spec
        if res.shared_memory:
            spec["ResourceConfig"] = {"SharedMemory": res.shared_memory}
    elif quota or res.cpu or res.memory or res.gpu or res.shared_memory:
        config = {"CPU": cpu(res.cpu) if res.cpu else None, "Memory": res.memory,
                  "GPU": str(res.gpu) if res.gpu else None, "GPUType": res.gpu_type,
                  "SharedMemory": res.shared_memory}
        spec["ResourceConfig"] = {k: v for k, v in config.items() if v is not None}
    if job.scheduling.spot == "require":
        spec["UseSpotInstance"] = True
    if job.scheduling.include_nodes or job.scheduling.exclude_nodes:
        nodes: JSONObject = {"EnableAssignNode": True}
        if job.scheduling.include_nodes:
            nodes["NodeNames"] = ",".join(job.scheduling.include_nodes)
        if job.scheduling.exclude_nodes:
            nodes["AntiAffinityNodeNames"] = ",".join(job.scheduling.exclude_nodes)
        spec["AssignNodeSpec"] = nodes
    return spec


def cpu(value: str) -> str:
    """A Kubernetes CPU quantity as DLC's vCPU count: '500m' -> '0.5', '4' -> '4'."""
    if value.endswith("m") and value[:-1].replace(".", "", 1).isdigit():
        cores = float(value[:-1]) / 1000
        return f"{cores:g}"
    return value


def _ecs_specs(job: DLCJob) -> dict[str, str]:
    """Role -> ECS instance type from the pai/ecs-spec[-<role>] annotations."""
    everyone = job.annotations.get(ECS_SPEC)
    found = {}
    for role in job.roles:
        spec = job.annotations.get(f"{ECS_SPEC}-{role}") or everyone
        if spec:
            found[role] = spec
    return found


def job_envs(job: DLCJob, name: str) -> dict[str, str]:
    """Job-level Envs: what every replica gets whatever its role (the user's env wins)."""
    env: dict[str, str] = dict(job.type_info.preset_env)
    env.update({"DLC_JOB_NAME": name, "DLC_JOB_TYPE": job.type.value})
    env.update(wiring.checkpoint_env(job))
    if job.type_info.torch:
        env["PET_NNODES"] = str(sum(job.roles[r].replicas for r in wiring.ranked_roles(job)))
        env["PET_NPROC_PER_NODE"] = str(job.nproc_per_node)
    env.update({k: v for k, v in job.env.items() if isinstance(v, str)})  # check() refused the others
    return env


def role_prelude(job: DLCJob, role: str) -> dict[str, str]:
    """Per-role variables, as shell words (values DLC's pod env supplies stay unquoted)."""
    q = shlex.quote
    env = {
        "DLC_ROLE": q(role),
        "DLC_ROLE_REPLICAS": str(job.roles[role].replicas),
        "DLC_ROLE_INDEX": f'"{HOSTNAME_INDEX}"',
    }
    if job.type is JobType.batch:
        # (one `export` expands every word before it assigns any: no "$DLC_ROLE_INDEX" here)
        env.update({"SHARD_INDEX": f'"{HOSTNAME_INDEX}"', "SHARD_COUNT": str(job.roles[role].replicas),
                    "JOB_COMPLETION_INDEX": f'"{HOSTNAME_INDEX}"'})
    if job.type_info.torch:  # torchrun reads PET_*; DLC's PyTorchJob sets RANK and MASTER_*
        env.update({"PET_NODE_RANK": '"$RANK"', "PET_MASTER_ADDR": '"$MASTER_ADDR"',
                    "PET_MASTER_PORT": '"$MASTER_PORT"'})
    env.update({k: q(v) for k, v in job.roles[role].env.items() if isinstance(v, str)})
    return env


def role_command(job: DLCJob, role: str) -> str:
    """The role's UserCommand: its prelude, working dir, health check, then its command."""
    exports = " ".join(f"{k}={v}" for k, v in role_prelude(job, role).items())
    steps = [f"export {exports}"]
    chain = []
    if job.working_dir:
        chain.append(f"cd {shlex.quote(job.working_dir)}")
    if job.health_check is not None:  # our preflight command, before the main one
        chain.append(shlex.join(job.health_check.command))
    r = job.roles[role]
    argv = r.command or (None if r.shell else job.command)
    shell = r.shell if r.command is None else None
    if argv is None and shell is None:
        shell = job.shell
    if argv is not None:
        chain.append("exec " + shlex.join(argv))
    else:  # a shell line of the user's own: braces keep its ';' and '||' inside the chain
        chain.append("{\n" + (shell or "") + "\n}")
    steps.append(" && ".join(chain))
    return "; ".join(steps)


def data_sources(job: DLCJob) -> list[JSONObject]:
    sources = []
    for mount in job.storage:
        uri = _mount_uri(mount)
        if uri is None:  # check() refused it already
            continue
        if mount.sub_path:
            uri = uri.rstrip("/") + "/" + mount.sub_path.strip("/")
        source: JSONObject = {"Uri": uri, "MountPath": mount.mount_path,
                                  "MountAccess": "RO" if mount.read_only else "RW"}
        if isinstance(mount, CSIMount) and mount.volume_attributes.get("otherOpts"):
            source["Options"] = mount.volume_attributes["otherOpts"]
        sources.append(source)
    return sources


def _mount_uri(mount: Any) -> str | None:
    if isinstance(mount, NFSMount):
        return f"nas://{mount.server}{mount.path}"
    if isinstance(mount, CSIMount):
        attrs = mount.volume_attributes
        if attrs.get("uri"):
            return attrs["uri"]
        host = attrs["bucket"] + (f".{attrs['url']}" if attrs.get("url") else "")
        return f"oss://{host}/{attrs.get('path', '/').strip('/')}".rstrip("/") + "/"
    return None


_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def code_source(job: DLCJob) -> JSONObject:
    """CodeSource: the registered code source, at code.revision and code.mount_path when given
    (else the code source's own branch and mount path)."""
    source: JSONObject = {"CodeSourceId": job.annotations[CODE_SOURCE]}
    code = job.code
    if code is not None:
        source["MountPath"] = code.mount_path
        # a commit id is a commit; anything else (branch, tag) is what DLC calls the branch
        source["Commit" if _SHA.match(code.revision) else "Branch"] = code.revision
    return source


def tags(job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int) -> dict[str, str]:
    """The job's DLC tags: the user's labels under ours (ours find the job again)."""
    found = {**job.labels, **naming.job_labels(name, identity, attempt)}
    if job.type is JobType.custom:
        found[CUSTOM_ROLE] = next(iter(job.roles))
    return found


def find_tags(identity: naming.TaskIdentity) -> dict[str, str]:
    """The tags every job of a task instance carries (ListJobs' Tags filter)."""
    return naming.task_labels(identity)


def _settings(job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int) -> JSONObject:
    settings: JSONObject = {"Tags": tags(job, name, identity, attempt)}
    if job.fault_tolerance.max_restarts:
        # AIMaster watches the job and restarts it up to max_restarts times
        settings["EnableErrorMonitoringInAIMaster"] = True
        settings["ErrorMonitoringArgs"] = (f"--job-execution-mode=Sync --enable-job-restart=True "
                                           f"--max-num-of-job-restart={job.fault_tolerance.max_restarts}")
    if job.health_check is not None:
        settings["EnableSanityCheck"] = True
    if any(job.role_resources(r).rdma for r in job.roles):
        settings["EnableRDMA"] = True
    if job.annotations.get(IDLE_RESOURCES) == "true":
        settings["EnableTideResource"] = True
    return settings


def _description(identity: naming.TaskIdentity | None) -> str:
    if identity is None:
        return "dlc-airflow"
    return "dlc-airflow " + json.dumps(naming.job_annotations(identity), sort_keys=True)


# -- status --------------------------------------------------------------------------------
def status(data: JSONObject) -> JobStatus:
    """JobStatus from a GetJob response body or a ListJobs item (the API's field names)."""
    raw = data.get("Status") or ""
    state, reason = STATUS_MAP.get(raw, (JobState.PENDING, f"Unknown:{raw}"))
    code = data.get("ReasonCode") or ""
    message = data.get("ReasonMessage") or ""
    if raw not in STATUS_MAP:
        message = message or f"DLC reports status {raw!r}, which dlc-airflow does not know; still waiting"
    if state in (JobState.FAILED, JobState.STOPPED, JobState.QUEUED) and code:
        reason = REASON_CODES.get(code, code)
    if raw == "Stopping":
        message = message or "stopping"
    return JobStatus(
        state=state, reason=reason, message=message, roles=role_counts(data), restarts=restarts(data),
        created=_time(data.get("GmtCreateTime")), started=_time(data.get("GmtRunningTime")),
        finished=_time(data.get("GmtFinishTime") or data.get("GmtSuccessedTime") or data.get("GmtFailedTime")
                       or data.get("GmtStoppedTime")) if state.terminal else None,
    )


def _time(value: Any) -> datetime | None:
    try:
        return parse_time(value)
    except ValueError:
        return None


def role_name(data: JSONObject, dlc_type: str) -> str:
    """Our role name for a DLC JobSpec / pod Type."""
    custom = ((data.get("Settings") or {}).get("Tags") or {}).get(CUSTOM_ROLE)
    return custom or dlc_type.lower()


def role_counts(data: JSONObject) -> dict[str, RoleCounts]:
    counts: dict[str, RoleCounts] = {}
    for spec in data.get("JobSpecs") or []:
        role = role_name(data, spec.get("Type") or "worker")
        counts.setdefault(role, RoleCounts()).replicas += int(spec.get("PodCount") or 0)
    for pod in data.get("Pods") or []:
        c = counts.setdefault(role_name(data, pod.get("Type") or "worker"), RoleCounts())
        phase = pod.get("Status")
        if phase == "Running":
            c.active += 1
        elif phase == "Succeeded":
            c.succeeded += 1
        elif phase == "Failed":
            c.failed += 1
    return counts


def restarts(data: JSONObject) -> int:
    """RestartTimes reads '<used>/<max>' (or just '<used>'); else the restart records."""
    raw = str(data.get("RestartTimes") or "").split("/")[0].strip()
    if raw.isdigit():
        return int(raw)
    return len(data.get("RestartRecord") or [])


# Replica.detail keys: the pod's id and uid (GetPodLogs), and when it started (the first log read)
POD_ID, POD_UID, STARTED = "pod", "uid", "started"


def replicas(data: JSONObject) -> list[Replica]:
    """The job's pods (GetJob's Pods) as replicas, `<role>-<index>` (the index from the pod id's
    tail, else counted per role), coordinator first."""
    found = []
    seen: dict[str, int] = {}
    for pod in data.get("Pods") or []:
        role = role_name(data, pod.get("Type") or "worker")
        pod_id = pod.get("PodId") or ""
        tail = pod_id.rsplit("-", 1)[-1]
        index = int(tail) if tail.isdigit() else seen.get(role, 0)
        seen[role] = index + 1
        started = pod.get("GmtStartTime") or ""
        found.append(Replica(name=f"{role}-{index}", role=role, index=index, state=pod.get("Status") or "Pending",
                             started=_time(started), uid=pod.get("PodUid") or "",
                             detail={POD_ID: pod_id, POD_UID: pod.get("PodUid") or "", STARTED: started}))
    return sorted(found, key=replica_order)


def is_terminal(data: JSONObject) -> bool:
    return (data.get("Status") or "") in TERMINAL_STATUSES
