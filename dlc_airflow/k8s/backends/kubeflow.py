"""The kubeflow backend: Kubeflow Training Operator v1 jobs (kubeflow.org/v1).

| type                          | kind       | replica types                  | container  |
|-------------------------------|------------|--------------------------------|------------|
| pytorch, deepspeed, megatron  | PyTorchJob | Master, Worker                 | pytorch    |
| tensorflow                    | TFJob      | Chief, PS, Worker, Evaluator   | tensorflow |
| mpi                           | MPIJob     | Launcher, Worker               | mpi        |
| xgboost                       | XGBoostJob | Master, Worker                 | xgboost    |

The operator injects the framework env itself (MASTER_ADDR/PORT, WORLD_SIZE, RANK, PET_*,
TF_CONFIG, the MPI hostfile and OMPI_MCA_*), so the pods get only our generic env (DLC_*,
checkpoint, presets, the user's env) and the replica index from the operator's
`training.kubeflow.org/replica-index` label. DeepSpeed/Megatron with launcher="mpi" also get
our hostfile ConfigMap (`<name>-<role>-<i>` are the operator's per-pod Services).

XGBoostJob requires a Master: a worker-only xgboost job runs its first replica as Master and
the rest as Workers (the same ranks as on the native backend). So does a fixed-size
PyTorchJob of several workers: the operator sets MASTER_ADDR, RANK and WORLD_SIZE only when
there is a Master.

runPolicy: cleanPodPolicy Running (finished pods stay for logs and outputs), backoffLimit =
max_restarts, activeDeadlineSeconds, ttlSecondsAfterFinished, schedulingPolicy {queue,
priorityClass}, suspend when a Kueue queue is set (with the queue-name label).
Replica restartPolicy: Never without restarts; with restarts ExitCode when
retryable_exit_codes are set (the operator's ExitCode policy restarts on codes 128-255 and
fails on 1-127: exact code lists cannot be expressed), else OnFailure.

The operator's Failed reason is `<Kind>Failed` whatever the cause; its message tells:
"reached the specified backoff limit" (or, with restartPolicy Never, a replica failed) is
RestartLimitExceeded, "active longer than specified deadline" DeadlineExceeded, and with the
ExitCode policy a replica that failed is a permanent exit code: PodFailurePolicy (reasons.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlc_airflow import naming, reasons, wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    CONFIG_MAP,
    Backend,
    ResourceKind,
    apply_pods,
    deadline_seconds,
    earliest,
    latest,
    not_found,
    object_annotations,
    object_labels,
    queue_labels,
    ttl_seconds,
)
from dlc_airflow.k8s.backends.batchjob import hostfile_config_map
from dlc_airflow.k8s.backends.podspec import IndexSource, pod_role_env, pod_template
from dlc_airflow.k8s.kinds import MPI_JOB, PYTORCH_JOB, TF_JOB, XGBOOST_JOB
from dlc_airflow.spec import DLCJob, hostfile_spec
from dlc_airflow.status import JobState, JobStatus, RoleCounts, condition

API_VERSION = "kubeflow.org/v1"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_INDEX = IndexSource("DLC_REPLICA_INDEX", f"metadata.labels['{REPLICA_INDEX_LABEL}']")


@dataclass(frozen=True)
class Flavor:
    kind: ResourceKind
    specs_field: str  # e.g. pytorchReplicaSpecs
    container: str  # the container the operator wires
    port_name: str | None  # the container port the operator looks up
    replica_types: dict[str, str]  # our role -> replica type


TORCH = Flavor(
    PYTORCH_JOB,
    "pytorchReplicaSpecs",
    "pytorch",
    "pytorchjob-port",
    {"master": "Master", "worker": "Worker"},
)
TENSORFLOW = Flavor(
    TF_JOB,
    "tfReplicaSpecs",
    "tensorflow",
    "tfjob-port",
    {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"},
)
MPI = Flavor(
    MPI_JOB,
    "mpiReplicaSpecs",
    "mpi",
    None,
    {"launcher": "Launcher", "worker": "Worker"},
)
XGBOOST = Flavor(
    XGBOOST_JOB,
    "xgbReplicaSpecs",
    "xgboost",
    "xgboostjob-port",
    {"master": "Master", "worker": "Worker"},
)

FLAVORS: dict[JobType, Flavor] = {
    JobType.pytorch: TORCH,
    JobType.deepspeed: TORCH,
    JobType.megatron: TORCH,
    JobType.tensorflow: TENSORFLOW,
    JobType.mpi: MPI,
    JobType.xgboost: XGBOOST,
}
KINDS_BY_NAME = {f.kind.kind: f for f in FLAVORS.values()}


def restart_policy(job: DLCJob) -> str:
    ft = job.fault_tolerance
    if ft.max_restarts == 0:
        return "Never"
    return "ExitCode" if ft.retryable_exit_codes else "OnFailure"


def kubeflow_addressing(name: str, job: DLCJob) -> wiring.Addressing:
    """The operator makes a Service per pod: `<name>-<replica type lowercased>-<i>`."""
    port = wiring.rendezvous_port(job) or 0
    return wiring.Addressing(host=lambda role, i: f"{name}-{role}-{i}", port=lambda role, i: port)


class KubeflowBackend(Backend):
    name = "kubeflow"
    job_types = frozenset(FLAVORS)
    refusal = "the Training Operator has no kind for it"

    def check_options(self, job: DLCJob) -> None:
        if job.elastic is not None and "worker" not in job.roles:
            raise BackendError("kubeflow backend: an elastic PyTorchJob needs a worker role (roles.worker)")

    def kind(self, job: DLCJob) -> ResourceKind:
        self.check(job)
        return FLAVORS[job.type].kind

    def kinds(self, job: DLCJob) -> list[ResourceKind]:
        return [self.kind(job), CONFIG_MAP] if self._needs_hostfile(job) else [self.kind(job)]

    @staticmethod
    def _needs_hostfile(job: DLCJob) -> bool:
        # MPIJob's operator writes its own hostfile; PyTorchJob-based MPI launchers need ours.
        return job.type is not JobType.mpi and hostfile_spec(job) is not None

    def _replicas(self, job: DLCJob) -> dict[str, tuple[str, int]]:
        """our role -> (replica type, replicas); promotes worker 0 to Master for xgboost, and for a
        fixed-size PyTorchJob of several workers (the operator gives a worker-only PyTorchJob no
        MASTER_ADDR, RANK or WORLD_SIZE: its workers could not find each other)."""
        flavor = FLAVORS[job.type]
        out = {r: (flavor.replica_types[r], job.roles[r].replicas) for r in ordered_roles(job.roles)}
        workers = job.roles["worker"].replicas if "worker" in job.roles else 0
        several_torch_workers = flavor is TORCH and not job.elastic and workers > 1
        if "master" not in job.roles and (job.type is JobType.xgboost or several_torch_workers):
            out = {"master": ("Master", 1)}
            if workers > 1:
                out["worker"] = ("Worker", workers - 1)
        return out

    def _render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None,
                attempt: int | None) -> list[Manifest]:
        flavor = FLAVORS[job.type]
        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        extra, config_maps = None, []
        if self._needs_hostfile(job):
            found = hostfile_config_map(job, name, kubeflow_addressing(name, job), labels, annotations)
            if found:
                config_maps, extra = [found[0]], found[1]
        port = wiring.rendezvous_port(job)
        ports = [{"name": flavor.port_name, "containerPort": port}] if flavor.port_name and port else []
        # Where the hostfile is: ours (PyTorchJob launchers over MPI) or the MPIJob operator's,
        # which mounts it at the same path as we do (/etc/mpi/hostfile).
        hostfile = hostfile_spec(job)

        specs = {}
        for role, (rtype, replicas) in self._replicas(job).items():
            source_role = role if role in job.roles else "worker"  # xgboost's promoted master
            env = pod_role_env(job, name, source_role, None, framework=False)
            env["DLC_ROLE"] = role
            env["DLC_ROLE_REPLICAS"] = str(replicas)
            if hostfile is not None:
                env.setdefault("DLC_HOSTFILE", hostfile.path)
            index: IndexSource | None = REPLICA_INDEX
            if rtype == "Launcher":
                # the MPIJob operator gives its single launcher no replica-index label: index 0
                env = {k: v.at(0) if isinstance(v, wiring.IndexExpr) else v for k, v in env.items()}
                index = None
            template = pod_template(
                job,
                source_role,
                env,
                labels=object_labels(job, name, identity, attempt, role),
                annotations=annotations,
                container_name=flavor.container,
                index=index,
                restart_policy=None,  # the replica spec's restartPolicy governs
                extra=extra,
                ports=ports,
            )
            specs[rtype] = {"replicas": replicas, "restartPolicy": restart_policy(job), "template": template}

        run_policy: Manifest = {"cleanPodPolicy": "Running", "backoffLimit": job.fault_tolerance.max_restarts}
        if (deadline := deadline_seconds(job)) is not None:
            run_policy["activeDeadlineSeconds"] = deadline
        if (ttl := ttl_seconds(job)) is not None:
            run_policy["ttlSecondsAfterFinished"] = ttl
        scheduling: Manifest = {}
        if job.scheduling.queue:
            scheduling["queue"] = job.scheduling.queue
            run_policy["suspend"] = True
        if job.scheduling.priority_class:
            scheduling["priorityClass"] = job.scheduling.priority_class
        if scheduling:
            run_policy["schedulingPolicy"] = scheduling

        spec: Manifest = {"runPolicy": run_policy}
        if flavor is TORCH:
            spec["nprocPerNode"] = str(job.nproc_per_node)
            if job.elastic:
                spec["elasticPolicy"] = {
                    "minReplicas": job.elastic.min_replicas,
                    "maxReplicas": job.elastic.max_replicas,
                    "maxRestarts": job.elastic.max_restarts,
                    "rdzvBackend": "c10d",
                }
        if flavor is MPI and hostfile is not None:
            spec["slotsPerWorker"] = hostfile.slots
            spec["mainContainer"] = flavor.container
        spec[flavor.specs_field] = specs

        metadata: Manifest = {"name": name, "labels": {**labels, **queue_labels(job)}}
        if annotations:
            metadata["annotations"] = annotations
        obj = {"apiVersion": API_VERSION, "kind": flavor.kind.kind, "metadata": metadata, "spec": spec}
        return [obj, *config_maps]

    def stop_patch(self) -> Manifest:
        return {"spec": {"runPolicy": {"suspend": True}}}

    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        if not objects:
            return not_found()
        status = kubeflow_status(objects[0])
        in_place = container_restarts(pods or [])
        if in_place > status.restarts:  # OnFailure: the kubelet restarts containers in place
            status = status.model_copy(update={"restarts": in_place})
        return apply_pods(status, pods)


def container_restarts(pods: Sequence[Pod]) -> int:
    return sum(int(c.get("restartCount") or 0) for pod in pods
               for c in (pod.get("status") or {}).get("containerStatuses") or [])


# Kubeflow replica types back to our role names.
_ROLE_OF_TYPE = {"Master": "master", "Worker": "worker", "Chief": "chief", "PS": "ps",
                 "Evaluator": "evaluator", "Launcher": "launcher"}


def kubeflow_status(obj: Manifest) -> JobStatus:
    """PyTorchJob/TFJob/MPIJob/XGBoostJob status: conditions + replicaStatuses."""
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    flavor = KINDS_BY_NAME.get(obj.get("kind", ""))
    replica_specs = spec.get(flavor.specs_field if flavor else "", {}) or {}
    if not replica_specs:  # unknown kind: find the *ReplicaSpecs field
        replica_specs = next((v for k, v in spec.items() if k.endswith("ReplicaSpecs")), {}) or {}

    roles: dict[str, RoleCounts] = {}
    for rtype, rspec in replica_specs.items():
        roles[_ROLE_OF_TYPE.get(rtype, rtype.lower())] = RoleCounts(replicas=int((rspec or {}).get("replicas", 1)))
    # Restarts are not in the operator's status: replicaStatuses counts the pods that exist now,
    # and under the ExitCode policy a replica that exited 128-255 is deleted and created again.
    # What is known: a live or succeeded job's failed pods were replaced (at least that many
    # restarts), a Restarting job restarted at least once, and a failed job's failed pods are
    # the ones that failed it (the pods' own restart counts are added by KubeflowBackend.status).
    failed_pods = 0
    for rtype, rs in (st.get("replicaStatuses") or {}).items():
        c = roles.setdefault(_ROLE_OF_TYPE.get(rtype, rtype.lower()), RoleCounts())
        c.active = int(rs.get("active") or 0)
        c.succeeded = int(rs.get("succeeded") or 0)
        c.failed = int(rs.get("failed") or 0)
        failed_pods += c.failed

    meta = obj.get("metadata") or {}
    base: JSONObject = {
        "roles": roles,
        "created": earliest([meta.get("creationTimestamp")]),
        "started": earliest([st.get("startTime")]),
    }

    def result(state: JobState, ctype: str, cond: Manifest, **extra: Any) -> JobStatus:
        return JobStatus(
            state=state, reason=cond.get("reason") or ctype, message=cond.get("message") or "", **base, **extra
        )

    if cond := condition(obj, "Failed"):
        finished = latest([st.get("completionTime"), cond.get("lastTransitionTime")])
        failed = result(JobState.FAILED, "Failed", cond, finished=finished)
        return failed.model_copy(update={"reason": failure_reason(cond, replica_specs)})
    if cond := condition(obj, "Succeeded"):
        finished = latest([st.get("completionTime") or cond.get("lastTransitionTime")])
        succeeded = result(JobState.SUCCEEDED, reasons.COMPLETED, cond, finished=finished, restarts=failed_pods)
        return succeeded.model_copy(update={"reason": reasons.COMPLETED})  # not the operator's <Kind>Succeeded
    if cond := condition(obj, "Suspended"):
        return result(JobState.QUEUED, reasons.SUSPENDED, cond).model_copy(update={"reason": reasons.SUSPENDED})
    if cond := condition(obj, "Restarting"):
        return result(JobState.RESTARTING, reasons.RESTARTING, cond, restarts=max(1, failed_pods))
    if cond := condition(obj, "Running"):
        return result(JobState.RUNNING, reasons.RUNNING, cond, restarts=failed_pods)
    if (spec.get("runPolicy") or {}).get("suspend"):
        return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED,
                         message="suspended (waiting for admission, e.g. Kueue)", **base)
    cond = condition(obj, "Created") or {}
    return result(JobState.PENDING, reasons.CREATED, cond)


def failure_reason(cond: Manifest, replica_specs: Manifest) -> str:
    """Ours for the operator's Failed condition, whose reason is `<Kind>Failed` whatever the cause:
    its message tells (the operator's wording, kept in JobStatus.message)."""
    message = cond.get("message") or ""
    if "reached the specified backoff limit" in message:  # runPolicy.backoffLimit used up
        return reasons.RESTART_LIMIT_EXCEEDED
    if "active longer than specified deadline" in message:
        return reasons.DEADLINE_EXCEEDED
    policies = {(r or {}).get("restartPolicy") for r in replica_specs.values()}
    if "replica(s) failed" in message:
        if policies == {"Never"}:  # max_restarts 0: the first failure used up the restart budget
            return reasons.RESTART_LIMIT_EXCEEDED
        if "ExitCode" in policies:  # the ExitCode policy restarts on 128-255: this exit was permanent
            return reasons.NON_RETRYABLE_EXIT
    return cond.get("reason") or "Failed"
