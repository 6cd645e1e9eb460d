"""The trainer backend: a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1).

A TrainJob names a ClusterTrainingRuntime (the upstream ones, from kubeflow/trainer's
manifests/base/runtimes) and gives the trainer image, command, env, node count, processes
per node and resources per node; the runtime does the rest (a JobSet, PET_* env for torchrun,
the MPI hostfile and ssh keys).

| type                               | runtime (default)     | nodes      | command of     |
|------------------------------------|-----------------------|------------|----------------|
| pytorch, megatron                  | torch-distributed     | workers    | worker         |
| deepspeed (launcher torchrun)      | torch-distributed     | workers    | worker         |
| deepspeed (launcher mpi)           | deepspeed-distributed | workers    | worker         |
| mpi                                | (none upstream)       | workers    | launcher       |

Trainer v2.3.0 ships no MPI runtime: `mpi` runs only with one the cluster's admin installed,
named with `TrainerBackend(runtimes={"mpi": ...})`; otherwise it is refused. Only
single-node-role shapes map: identical worker nodes, no master (node 0 is rank 0), for
MPI the runtime's launcher plus worker nodes (the runtime's workers run sshd, so
roles.worker.command is not used). Runtime names can be overridden:
`TrainerBackend(runtimes={"pytorch": "my-torch-runtime"})`.

Pod-level settings go through `spec.runtimePatches` (manager "dlc-airflow.io/manager"; the
webhook wants a domain-prefixed name): labels,
annotations, nodeSelector, tolerations, affinity, volumes, service account, and env/volume
mounts of the trainer container. TrainJob v1alpha1 cannot express init containers, a
priority class, restart limits or retryable exit codes: jobs using code, health_check,
scheduling.priority_class or fault_tolerance.max_restarts/retryable_exit_codes are refused
(use native, jobset or kubeflow). ttl_after_finished has no TrainJob field and is not
applied (the job stays until deleted).

MPI runtimes (mpi, deepspeed with launcher="mpi") get numProcPerNode = the hostfile slots of
`spec.hostfile_spec` (what the other backends write into their hostfiles) and DLC_HOSTFILE =
the runtime's hostfile (/etc/mpi/hostfile, mounted in the launcher). Status: the conditions of
the TrainJob's JobSet, copied by the Trainer controller, mapped as on the jobset backend.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc_airflow import naming, reasons
from dlc_airflow.errors import BackendError, UnsupportedType, unsupported_type
from dlc_airflow.jobtypes import JobType
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    Backend,
    ResourceKind,
    apply_pods,
    deadline_seconds,
    earliest,
    latest,
    not_found,
    object_annotations,
    object_labels,
    pod_role_counts,
    queue_labels,
)
from dlc_airflow.k8s.backends.jobset import JOBSET_FAILURE_REASONS
from dlc_airflow.k8s.backends.podspec import (
    JOB_INDEX,
    OUTPUT_FILE,
    env_and_exports,
    pod_role_env,
    resource_list,
    scheduling_fields,
    shm_volume,
    storage_volumes,
    topology_annotations,
)
from dlc_airflow.k8s.kinds import TRAIN_JOB
from dlc_airflow.spec import MPI_HOSTFILE, DLCJob, hostfile_spec
from dlc_airflow.status import JobState, JobStatus, ReportedProgress, RoleCounts, condition

RUNTIME_GROUP = "trainer.kubeflow.org"
RUNTIME_KIND = "ClusterTrainingRuntime"
PATCH_MANAGER = "dlc-airflow.io/manager"
# The upstream runtimes run the trainer in container "node" of replicatedJob "node"; MPI
# runtimes add a replicatedJob "launcher" (with a container "node" too).
TRAINER_CONTAINER = "node"
NODE_JOB = "node"
LAUNCHER_JOB = "launcher"

DEFAULT_RUNTIMES: dict[str, str] = {
    "pytorch": "torch-distributed",
    "megatron": "torch-distributed",
    "deepspeed": "torch-distributed",
    "deepspeed-mpi": "deepspeed-distributed",
}
# Env the runtime's plugins own: Trainer's webhook refuses a TrainJob that sets them.
RESERVED_ENV_PREFIXES = ("PET_", "OMPI_MCA_")


class TrainerBackend(Backend):
    name = "trainer"
    # and mpi, given a runtime (check)
    job_types = frozenset({JobType.pytorch, JobType.deepspeed, JobType.megatron})
    refusal = "no Kubeflow Trainer runtime for it"

    def __init__(self, runtimes: dict[str, str] | None = None):
        """`runtimes` overrides runtime names by type ("deepspeed-mpi" for launcher="mpi")."""
        self.runtimes = {**DEFAULT_RUNTIMES, **(runtimes or {})}

    def _runtime_key(self, job: DLCJob) -> str:
        if job.type is JobType.deepspeed and job.launcher == "mpi":
            return "deepspeed-mpi"
        return job.type.value

    def runtime_name(self, job: DLCJob) -> str:
        return self.runtimes[self._runtime_key(job)]

    def check(self, job: DLCJob) -> None:
        if job.type is JobType.mpi:  # only on a runtime the cluster's admin installed
            if "mpi" not in self.runtimes:
                raise unsupported_type("mpi", self.name, "Kubeflow Trainer v2.3.0 ships no MPI runtime; name the "
                                       "cluster's with TrainerBackend(runtimes={'mpi': ...})")
            return self.check_options(job)
        super().check(job)

    @staticmethod
    def _is_mpi(job: DLCJob) -> bool:
        """Launched over MPI (the runtime's launcher + sshd nodes): the jobs with a hostfile."""
        return hostfile_spec(job) is not None

    def check_options(self, job: DLCJob) -> None:
        t = job.type.value
        if job.type is JobType.megatron and job.launcher == "mpi":
            raise UnsupportedType("trainer backend: megatron with launcher='mpi' has no upstream runtime", t, self.name,
                                  "; ")
        extra = sorted(set(job.roles) - ({"launcher", "worker"} if job.type is JobType.mpi else {"worker"}))
        if extra or "worker" not in job.roles:
            raise UnsupportedType(f"trainer backend runs {t} jobs as identical worker nodes only; roles "
                                  f"{extra or ['(no worker)']} cannot be mapped: drop them (node 0 is rank 0)", t,
                                  self.name, " or ")
        problems = []
        if job.elastic:
            problems.append("elastic")
        if job.code:
            problems.append("code (needs an init container)")
        if job.health_check:
            problems.append("health_check (needs an init container)")
        if job.scheduling.priority_class:
            problems.append("scheduling.priority_class")
        if job.fault_tolerance.max_restarts or job.fault_tolerance.retryable_exit_codes:
            problems.append("fault_tolerance.max_restarts/retryable_exit_codes")
        if job.type is JobType.mpi and job.role_image("worker") != job.role_image("launcher"):
            problems.append("a worker image other than the launcher's (the runtime's nodes share the trainer image)")
        reserved = sorted({k for role in job.roles for k in job.role_env(role) if k.startswith(RESERVED_ENV_PREFIXES)})
        if reserved:
            problems.append(f"env {', '.join(reserved)} (set by the runtime)")
        if problems:
            raise UnsupportedType(f"trainer backend: TrainJob v1alpha1 cannot express {', '.join(problems)} of this "
                                  f"{t} job", t, self.name, "; ")

    def kind(self, job: DLCJob) -> ResourceKind:
        return TRAIN_JOB

    def _render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None,
                attempt: int | None) -> list[Manifest]:
        command_role = "launcher" if job.type is JobType.mpi else "worker"
        node_role = "worker"
        res = job.role_resources(node_role)
        env = pod_role_env(job, name, node_role, None, framework=False)
        if self._is_mpi(job):  # the runtime's MPI plugin mounts its hostfile there
            env.setdefault("DLC_HOSTFILE", MPI_HOSTFILE)
        env["DLC_OUTPUT_FILE"] = OUTPUT_FILE
        entries, exports = env_and_exports(env, JOB_INDEX)
        if exports:  # pragma: no cover - only framework env has computed values
            raise BackendError("trainer backend: computed env needs a command wrapper TrainJob cannot add")

        trainer: Manifest = {
            "image": job.role_image(command_role),
            "command": job.role_command(command_role),
            "env": entries,
            "numNodes": job.roles[node_role].replicas,
        }
        # MPI runtimes write the hostfile from numProcPerNode: the slots of hostfile_spec.
        hostfile = hostfile_spec(job)
        trainer["numProcPerNode"] = hostfile.slots if hostfile else job.nproc_per_node
        if values := resource_list(res):
            trainer["resourcesPerNode"] = {"requests": dict(values), "limits": dict(values)}

        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        spec: Manifest = {
            "runtimeRef": {"apiGroup": RUNTIME_GROUP, "kind": RUNTIME_KIND, "name": self.runtime_name(job)},
            "trainer": trainer,
        }
        if (deadline := deadline_seconds(job)) is not None:
            spec["activeDeadlineSeconds"] = deadline
        if job.scheduling.queue:
            spec["suspend"] = True
        spec["runtimePatches"] = [self._patch(job, name, identity, attempt, annotations)]

        metadata: Manifest = {"name": name, "labels": {**labels, **queue_labels(job)}}
        if annotations:
            metadata["annotations"] = annotations
        return [{"apiVersion": TRAIN_JOB.api_version, "kind": "TrainJob", "metadata": metadata, "spec": spec}]

    def _patch(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None, attempt: int | None,
               annotations: dict[str, str]) -> Manifest:
        """Pod-level settings for every replicatedJob of the runtime."""
        res = job.role_resources("worker")
        vols, shm = storage_volumes(job), shm_volume(res)
        volumes, mounts = vols.volumes + shm.volumes, vols.mounts + shm.mounts
        jobs = []
        names = [LAUNCHER_JOB, NODE_JOB] if self._is_mpi(job) else [NODE_JOB]
        for rj in names:
            role = "launcher" if rj == LAUNCHER_JOB else "worker"
            pod_meta: Manifest = {"labels": object_labels(job, name, identity, attempt, role)}
            if pod_annotations := {**annotations, **topology_annotations(job)}:
                pod_meta["annotations"] = pod_annotations
            pod_spec: Manifest = dict(scheduling_fields(job, res))
            if volumes:
                pod_spec["volumes"] = volumes
                pod_spec["containers"] = [{"name": TRAINER_CONTAINER, "volumeMounts": mounts}]
            jobs.append({"name": rj, "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod_spec}}}})
        return {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": jobs}}}}

    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        if not objects:
            return not_found()
        return apply_pods(trainjob_status(objects[0], pods), pods)


_ROLE_OF_JOB = {NODE_JOB: "worker", LAUNCHER_JOB: "launcher"}


def trainjob_status(obj: Manifest, pods: Sequence[Pod] | None = None) -> JobStatus:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    nodes = int((spec.get("trainer") or {}).get("numNodes") or 1)
    roles: dict[str, RoleCounts] = {"worker": RoleCounts(replicas=nodes)}
    for js in st.get("jobsStatus") or []:
        role = _ROLE_OF_JOB.get(js.get("name"), js.get("name"))
        c = roles.setdefault(role, RoleCounts(replicas=1))
        # jobsStatus counts Jobs (one per replicatedJob here): a Job stands for its pods.
        c.active = c.replicas if int(js.get("active") or 0) else 0
        c.succeeded = c.replicas if int(js.get("succeeded") or 0) else 0
        c.failed = c.replicas if int(js.get("failed") or 0) else 0
    for role, counts in pod_role_counts(pods).items():
        roles[role] = counts.model_copy(update={"replicas": roles.get(role, RoleCounts()).replicas})

    meta = obj.get("metadata") or {}
    base: JSONObject = {
        "roles": roles,
        "created": earliest([meta.get("creationTimestamp")]),
        "started": earliest((p.get("status") or {}).get("startTime") for p in pods or []),
        "progress": trainer_progress(st),
    }
    if cond := condition(obj, "Failed"):
        # the condition of the TrainJob's JobSet, copied by the Trainer controller
        reason = cond.get("reason") or "Failed"
        return JobStatus(state=JobState.FAILED, reason=JOBSET_FAILURE_REASONS.get(reason, reason),
                         message=cond.get("message") or "", finished=latest([cond.get("lastTransitionTime")]), **base)
    if cond := condition(obj, "Complete"):
        return JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED,
                         message=cond.get("message") or "", finished=latest([cond.get("lastTransitionTime")]), **base)
    if (cond := condition(obj, "Suspended")) or spec.get("suspend"):
        return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED,
                         message=(cond or {}).get("message") or "suspended (waiting for admission, e.g. Kueue)", **base)
    statuses = st.get("jobsStatus") or []
    # The runtime's Jobs retry a failed pod (their backoffLimit): jobsStatus counts no failed
    # Job until they give up, the pods tell the restarts.
    failed_pods = sum(c.failed for c in roles.values())
    if failed_pods or any(int(s.get("failed") or 0) for s in statuses):
        return JobStatus(state=JobState.RESTARTING, reason=reasons.RESTARTING, restarts=failed_pods, **base)
    if any(int(s.get("ready") or 0) or int(s.get("succeeded") or 0) for s in statuses):
        return JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING, **base)
    return JobStatus(state=JobState.PENDING, reason=reasons.CREATED, **base)


def trainer_progress(status: JSONObject) -> ReportedProgress | None:
    """The progress the job's pods reported to the Trainer's status server (TrainJobStatus feature
    gate; dlc_airflow.runtime.trainer_status sends it): status.trainerStatus's progressPercentage
    and estimatedRemainingSeconds. None when the job reported no percentage."""
    reported = status.get("trainerStatus") or {}
    percent, remaining = reported.get("progressPercentage"), reported.get("estimatedRemainingSeconds")
    if not isinstance(percent, (int, float)) or isinstance(percent, bool):
        return None
    eta = float(remaining) if isinstance(remaining, (int, float)) and not isinstance(remaining, bool) else None
    return ReportedProgress(percent=max(0.0, min(100.0, float(percent))), eta_seconds=eta,
                            updated=latest([reported.get("lastUpdatedTime")]))
