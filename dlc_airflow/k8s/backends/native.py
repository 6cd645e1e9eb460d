"""The native backend (default): batch/v1 Indexed Jobs and a headless Service, no CRDs.

Objects, in creation order:
1. the coordinator role's Job `<name>-<coordinator>` (the primary: the client makes it the
   owner of everything else, so deleting it deletes the job);
2. a headless Service `<name>` selecting every pod of the job, so that pods resolve as
   `<name>-<role>-<i>.<name>` (Indexed Job pods get hostname `<job>-<i>`; each pod template
   sets `subdomain: <name>`);
3. for MPI (and DeepSpeed/Megatron with launcher="mpi"), a ConfigMap `<name>-hostfile`
   mounted at the hostfile path in every pod, and the job's SSH key Secret `<name>-ssh`;
4. the other roles' Jobs.

Each role Job: completionMode Indexed, completions = parallelism = replicas,
restartPolicy Never. Fault tolerance: `backoffLimitPerIndex = fault_tolerance.max_restarts`
(each replica is restarted up to that many times), `maxFailedIndexes = 0` (a replica that
runs out of restarts fails the job), and `podFailurePolicy` rules, first match wins:
  1. Ignore pods with condition DisruptionTarget (preemption, eviction, node drain) when
     `restart_on_preemption`: replaced without counting a restart;
  2. FailJob when the main container exits with a code NotIn `retryable_exit_codes` (when
     that list is set): no restart for a permanent error. The API wants the values sorted,
     unique, at most 255 (0 is only forbidden with In); the spec normalises them so.
`activeDeadlineSeconds` = max_running_time, `ttlSecondsAfterFinished` = ttl_after_finished
(on every role Job; when the primary goes, the garbage collector takes the rest with it).

Kueue: each Job carries `kueue.x-k8s.io/queue-name` and is created with `suspend: true`,
as Kueue's own samples do: Kueue's webhook would suspend it anyway, and creating it suspended
means nothing starts outside the quota if the webhook is briefly unavailable. Kueue admits
each role Job on its own (no all-or-nothing across roles), so a queue on a multi-role job is
refused with a pointer to the jobset backend (one Workload for the whole job).

TensorFlow, as TFJob: the job succeeds when the chief's Job completes (index 0 of the workers
without a chief), whatever parameter servers (which never exit), evaluators and the other
workers do; MPI, as MPIJob: when the launcher's Job completes (its workers serve sshd until
stopped; the job's SSH keys and the launcher's wait for its workers are in sshkeys.py). The
runner then stops the Jobs still running (`leftovers`), as it stops the other roles' Jobs
when one role's Job fails. It stops them without deleting them, since deleting the primary
would delete the whole job, the failed Job too: `settle_patch` gives the Job a deadline
already past, so the Job controller stops its pods and marks it Failed (DeadlineExceeded;
ttlSecondsAfterFinished then applies as to any finished Job), and an annotation tells the
status mapping that this failure is ours, not the job's.

The batch/v1 pieces (addressing, hostfile ConfigMap, role JobSpec, status of role Jobs) are in
batchjob.py, shared with the jobset backend. Failure reasons (reasons.py): a replica out of
restarts (MaxFailedIndexesExceeded, FailedIndexes, BackoffLimitExceeded) is
RestartLimitExceeded, the FailJob rule PodFailurePolicy, the deadline DeadlineExceeded; the Job
controller's wording stays in the message.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc_airflow import naming, wiring
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import ordered_roles
from dlc_airflow.k8s.api import Manifest, Pod
from dlc_airflow.k8s.backends.base import (
    CONFIG_MAP,
    JOB,
    SERVICE,
    Backend,
    ResourceKind,
    apply_pods,
    not_found,
    object_annotations,
    object_labels,
    queue_labels,
)
from dlc_airflow.k8s.backends.batchjob import (
    JOB_TYPES,
    MAIN_CONTAINER,
    NO_RAY,
    SETTLED_ANNOTATION,
    job_addressing,
    jobs_status,
    launcher_files,
    replaced_failures,
    role_job_spec,
    settled,
)
from dlc_airflow.k8s.backends.podspec import JOB_INDEX, pod_role_env, pod_template
from dlc_airflow.k8s.backends.sshkeys import setup_lines
from dlc_airflow.spec import DLCJob, hostfile_spec
from dlc_airflow.status import JobState, JobStatus, condition


class NativeBackend(Backend):
    """batch/v1 Indexed Jobs + headless Service: runs on any conformant cluster."""

    name = "native"
    job_types = JOB_TYPES
    refusal = NO_RAY

    def check_options(self, job: DLCJob) -> None:
        if job.scheduling.queue and len(job.roles) > 1:
            # Kueue admits each role's Job as a Workload of its own: the job could start in part
            # and hold quota while the rest waits. JobSet, Kubeflow and Trainer jobs are one Workload.
            raise BackendError(
                f"native backend: Kueue would admit each of the roles {', '.join(ordered_roles(job.roles))} on its "
                f"own (part of the job could start while the rest waits for quota); for a queued multi-role job "
                f"use backend='jobset' (admitted whole), or drop scheduling.queue"
            )

    def kind(self, job: DLCJob) -> ResourceKind:
        return JOB

    def kinds(self, job: DLCJob) -> list[ResourceKind]:
        kinds = [JOB, SERVICE]
        if hostfile_spec(job):
            kinds.append(CONFIG_MAP)
        return kinds

    def _render(self, job: DLCJob, name: str, identity: naming.TaskIdentity | None,
                attempt: int | None) -> list[Manifest]:
        addr = job_addressing(name, job)
        labels = object_labels(job, name, identity, attempt)
        annotations = object_annotations(job, identity)
        files, extra = launcher_files(job, name, addr, labels, annotations)

        lead = wiring.coordinator(job)
        roles = [lead] + [r for r in ordered_roles(job.roles) if r != lead]
        jobs = []
        for role in roles:
            role_labels = object_labels(job, name, identity, attempt, role)
            template = pod_template(
                job,
                role,
                pod_role_env(job, name, role, addr),
                labels=role_labels,
                annotations=annotations,
                container_name=MAIN_CONTAINER,
                index=JOB_INDEX,
                subdomain=name,
                extra=extra,
                setup=setup_lines(job, role, lead),
            )
            metadata: Manifest = {"name": naming.child_name(name, role), "labels": {**role_labels, **queue_labels(job)}}
            if annotations:
                metadata["annotations"] = annotations
            jobs.append(
                {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": role_job_spec(job, role, template)}
            )
        return [jobs[0], self._service(job, name, labels, annotations), *files, *jobs[1:]]

    @staticmethod
    def _service(job: DLCJob, name: str, labels: Manifest, annotations: Manifest) -> Manifest:
        spec: Manifest = {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # peers must resolve before they are Ready
            "selector": {naming.LABEL_JOB: name},
        }
        if port := wiring.rendezvous_port(job):
            spec["ports"] = [{"name": "rendezvous", "port": port, "targetPort": port, "protocol": "TCP"}]
        metadata: Manifest = {"name": name, "labels": labels}
        if annotations:
            metadata["annotations"] = annotations
        return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}

    def leftovers(self, objects: list[Manifest]) -> list[str]:
        """Role Jobs still running after the job finished: parameter servers after success,
        the other roles' Jobs after one role's Job failed."""
        # FailureTarget / SuccessCriteriaMet: the Job controller is already finishing it
        done = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")
        return [o["metadata"]["name"] for o in objects
                if not settled(o) and not any(condition(o, c) for c in done)]

    def settle_patch(self) -> Manifest:
        return {"metadata": {"annotations": {SETTLED_ANNOTATION: "true"}},
                "spec": {"activeDeadlineSeconds": 1}}

    def stop_patch(self) -> Manifest:
        """A deadline already past: the Job controller ends the pods and keeps the Job (it does not
        count while Kueue keeps the Job suspended: the runner deactivates a queued job's Workloads)."""
        return {"spec": {"activeDeadlineSeconds": 1}}

    def _status(self, objects: list[Manifest], pods: Sequence[Pod] | None) -> JobStatus:
        jobs = [o for o in objects if o.get("kind", "Job") == "Job"]
        if not jobs:
            return not_found()
        status = apply_pods(jobs_status(jobs), pods)
        if status.state is JobState.FAILED and pods:
            # The pods tell which failures were replaced, whatever ended the job.
            status = status.model_copy(update={"restarts": replaced_failures(pods)})
        return status
