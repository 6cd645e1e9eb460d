"""LocalRunner: the local backend behind the runner contract (dlc_airflow.runner.JobRunner).

It works on the job folders of one job root through JobFolders (local/jobs.py: the folders
and their supervisors, by job name), as the other backends' runners work through their
clients. A JobRef's place is the job root, so any process that has the ref finds the job.
Capabilities: the stored spec (SpecKeeper) and the local stand-ins of Secrets (SecretReader);
no events (what happens to a replica is in its log), nothing to settle (the supervisor ends
every replica when the job ends).
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc_airflow.errors import BackendError, SecretSourceError, SubmitError
from dlc_airflow.jobinfo import JobInfo, attempt_of
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONDict
from dlc_airflow.local.backend import LocalBackend
from dlc_airflow.local.jobs import JobFolders
from dlc_airflow.local.secrets import local_secret
from dlc_airflow.naming import (
    LABEL_ATTEMPT,
    LABEL_JOB,
    MANAGED_BY,
    MANAGER,
    TaskIdentity,
    job_annotations,
    job_labels,
    task_labels,
)
from dlc_airflow.polling import StatusFollower
from dlc_airflow.runner import Log, LogLine, LogPositions, Outputs, Reach, Replica
from dlc_airflow.secrets.resolve import Entry
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef
from dlc_airflow.status import JobStatus, parse_time

LOCAL = LocalBackend.name


def make_runner(reach: Reach) -> LocalRunner:
    """The registry's runner factory: the job root the task names, else the default one."""
    return LocalRunner(reach.local_root)


class LocalRunner:
    backend_name = LOCAL

    def __init__(self, root: str | None = None):
        self.folders = JobFolders(root)
        self.place = str(self.folders.root)

    def ref(self, job: DLCJob | None, name: str, attempt: int = 1) -> JobRef:
        return JobRef(backend=LOCAL, place=self.place, name=name, attempt=attempt, uid=self.folders.uid(name))

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        refs = []
        for name in self.folders.find(task_labels(identity)):
            labels = self.folders.labels(name)
            refs.append(self.ref(job, labels.get(LABEL_JOB, name), int(labels.get(LABEL_ATTEMPT, "1"))))
        return sorted(refs, key=lambda r: r.attempt)

    def lookup(self, name: str) -> JobRef | None:
        found = self.folders.find({LABEL_JOB: name})
        if not found:
            return None
        return self.ref(None, name, int(self.folders.labels(name).get(LABEL_ATTEMPT, "1")))

    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        try:  # a job cloned outside Airflow lands here unchecked: refuse what cannot run locally
            LocalBackend().check(job)
        except BackendError as exc:
            raise SubmitError(str(exc), permanent=True) from None
        created = self.folders.submit(job, name, job_labels(name, identity, attempt), job_annotations(identity))
        return self.ref(job, name, attempt), created

    def status(self, ref: JobRef) -> JobStatus:
        return self.folders.status(ref.name)

    def follow(self, ref: JobRef) -> StatusFollower:
        """The job's state file, read every 50 ms (a local file: cheap)."""
        return StatusFollower(self, ref, interval=0.05)

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        return self.folders.read_logs(ref.name, since)

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        return self.folders.outputs(ref.name)

    def stop(self, ref: JobRef) -> int:
        return 1 if self.folders.stop(ref.name) else 0

    def delete(self, ref: JobRef) -> None:
        self.folders.delete(ref.name)

    def claim(self, ref: JobRef, try_number: int) -> None:
        self.folders.claim(ref.name, try_number)

    def owner_try(self, ref: JobRef) -> int | None:
        return self.folders.owner_try(ref.name)

    def stop_unless_claimed(self, ref: JobRef, try_number: int) -> tuple[bool, int | None]:
        """The GuardedStop capability (a lock on the job's claim)."""
        return self.folders.stop_unless_claimed(ref.name, try_number)

    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        found = []
        for name in self.folders.find({MANAGED_BY: MANAGER}):
            labels = self.folders.labels(name)
            ref = self.ref(None, name, attempt_of(labels))
            info = JobInfo.of(ref, labels, self.folders.annotations(name), self.folders.status(name).created)
            if info.matches(dag_id, task_id, run_id):
                found.append(info)
        return found

    def replicas(self, ref: JobRef) -> list[Replica]:
        """From the supervisor's record; a replica still marked running when the job ended was
        ended with it."""
        finished = self.folders.status(ref.name).finished
        found = []
        for key, data in self.folders.replica_states(ref.name).items():
            role, _, index = key.rpartition("-")
            phase = data.get("phase") or "pending"
            ended = parse_time(data.get("ended")) or (finished if phase in ("running", "health") else None)
            found.append(Replica(
                name=key, role=role, index=int(index) if index.isdigit() else 0, state=_REPLICA_STATES.get(phase, phase),
                started=parse_time(data.get("began")), finished=ended, exit_code=data.get("exit_code"),
                restarts=int(data.get("restarts") or 0), node="localhost", uid=str(data.get("pid") or "")))
        return found

    # -- capabilities: SpecKeeper, SecretReader ----------------------------------------------
    def spec(self, ref: JobRef) -> JSONDict | None:
        return self.folders.spec(ref.name)

    def secret_values(self, refs: Sequence[SecretKeyRef], log: Log) -> list[str]:
        """The local stand-ins of the Secret sources (those that exist)."""
        values = []
        for ref in refs:
            try:
                values.append(local_secret(Entry("env", "?", ref, "?"), ref, self.folders.root))
            except SecretSourceError:
                continue
        return values


# the supervisor's replica phases in the words pods use
_REPLICA_STATES = {"pending": "Pending", "health": "Running", "running": "Running", "backoff": "Pending",
                   "succeeded": "Succeeded", "failed": "Failed", "stopped": "Stopped"}
