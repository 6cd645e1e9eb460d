"""FakeRunner: the runner contract in memory, for the unit tests of what is written once above
the runners (lifecycle.start, submit_or_adopt, finish_plan / finish) and as the first subject
of the conformance suite (tests/conformance), which checks it behaves as the real runners do.

Not a mock: it keeps jobs (`by_name`, with the labels every backend gives them: task key, try,
attempt), walks them through their states, and answers every call of the contract and of
its capabilities (events, settle, the stored spec). A test drives it: `set_state` ends a job
as its backend would, a job whose spec has the annotation RUN_FOR succeeds that many seconds
after its submit, `refuse` makes the next submit fail, and `calls` records what was asked.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from dlc_airflow import reasons, specpack
from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.jobinfo import JobInfo, attempt_of
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONDict
from dlc_airflow.naming import LABEL_TASK_KEY, LABEL_TRY, TaskIdentity, job_annotations, job_labels
from dlc_airflow.polling import StatusFollower
from dlc_airflow.runner import Event, LogLine, LogPositions, Outputs, Reach, Replica, merge_outputs
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts

FAKE = "fake"
RUN_FOR = "fake.dlc-airflow/run-for"  # a job annotation: seconds until it succeeds by itself
SAYS = "fake.dlc-airflow/says"  # a job annotation: the line each of its replicas prints


@dataclass
class FakeJob:
    ref: JobRef
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: JSONDict
    roles: dict[str, int]
    submitted: float
    run_for: float | None
    state: JobState = JobState.RUNNING
    reason: str = reasons.RUNNING
    message: str = ""
    claimed: int | None = None
    logs: list[LogLine] = field(default_factory=list)
    outputs: dict[str, dict[str, object]] = field(default_factory=dict)  # by replica
    events: list[Event] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)


class FakeRunner:
    backend_name = FAKE

    def __init__(self, place: str = "memory") -> None:
        self.place = place
        self.by_name: dict[str, FakeJob] = {}
        self.calls: list[tuple[str, str]] = []  # (call, job name)
        self.refusal: SubmitError | None = None
        self._lock = threading.Lock()

    # -- what a test does ----------------------------------------------------------------
    def refuse(self, error: SubmitError) -> None:
        """The next submit fails with `error` (nothing is created)."""
        self.refusal = error

    def set_state(self, name: str, state: JobState, reason: str = "", message: str = "") -> None:
        job = self.by_name[name]
        job.state, job.reason, job.message, job.run_for = state, reason or state.value.title(), message, None

    def say(self, name: str, replica: str, line: str) -> None:
        self.by_name[name].logs.append(LogLine(replica, line))

    def report(self, name: str, replica: str, metrics: dict[str, object]) -> None:
        self.by_name[name].outputs[replica] = {"metrics": metrics}

    # -- the contract --------------------------------------------------------------------
    def ref(self, job: DLCJob | None, name: str, attempt: int = 1) -> JobRef:
        found = self.by_name.get(name)
        return found.ref if found is not None else JobRef(backend=FAKE, place=self.place, name=name, attempt=attempt)

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        self.calls.append(("find", identity.key))
        mine = [j.ref for j in self.by_name.values() if j.labels.get(LABEL_TASK_KEY) == identity.key]
        return sorted(mine, key=lambda r: r.attempt)

    def lookup(self, name: str) -> JobRef | None:
        found = self.by_name.get(name)
        return found.ref if found is not None else None

    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        self.calls.append(("submit", name))
        with self._lock:
            if self.refusal is not None:
                error, self.refusal = self.refusal, None
                raise error
            labels = job_labels(name, identity, attempt)
            existing = self.by_name.get(name)
            if existing is not None:
                if existing.labels.get(LABEL_TASK_KEY) != labels.get(LABEL_TASK_KEY):
                    raise OwnershipError(f"fake job {name} belongs to another task")
                return existing.ref, False
            ref = JobRef(backend=FAKE, place=self.place, name=name, attempt=attempt, uid=str(uuid.uuid4()))
            run_for = job.annotations.get(RUN_FOR)
            made = self.by_name[name] = FakeJob(
                ref, labels, job_annotations(identity), specpack.stored(job),
                {role: spec.replicas for role, spec in job.roles.items()}, time.time(),
                float(run_for) if run_for is not None else None)
            if SAYS in job.annotations:
                made.logs.extend(LogLine(f"{role}-{i}", job.annotations[SAYS])
                                 for role, n in made.roles.items() for i in range(n))
            return ref, True

    def status(self, ref: JobRef) -> JobStatus:
        job = self.by_name.get(ref.name)
        if job is None:
            return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND, message=f"no fake job {ref.name}")
        if job.run_for is not None and time.time() - job.submitted >= job.run_for and not JobStatus(
                state=job.state).terminal:
            job.state, job.reason = JobState.SUCCEEDED, reasons.COMPLETED
        running = job.state is JobState.RUNNING
        done = job.state is JobState.SUCCEEDED
        return JobStatus(state=job.state, reason=job.reason, message=job.message,
                         created=datetime.fromtimestamp(job.submitted, UTC), started=datetime.fromtimestamp(
                             job.submitted, UTC), roles={role: RoleCounts(replicas=n, active=n if running else 0,
                                                                         succeeded=n if done else 0)
                                                        for role, n in job.roles.items()})

    def follow(self, ref: JobRef) -> StatusFollower:
        return StatusFollower(self, ref, interval=0.02)

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        job = self.by_name.get(ref.name)
        start = (since or {}).get("next")
        start = start if isinstance(start, int) else 0
        lines = job.logs[start:] if job is not None else []
        return list(lines), {"next": start + len(lines)}

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        job = self.by_name.get(ref.name)
        if job is None:
            return merge_outputs([])
        return merge_outputs(job.outputs[r] for r in sorted(job.outputs, key=lambda r: r.endswith("-0")))

    def stop(self, ref: JobRef) -> int:
        self.calls.append(("stop", ref.name))
        job = self.by_name.get(ref.name)
        if job is None or self.status(ref).terminal:
            return 0
        job.state, job.reason, job.message, job.run_for = JobState.STOPPED, reasons.STOPPED, "stopped", None
        return 1

    def delete(self, ref: JobRef) -> None:
        self.calls.append(("delete", ref.name))
        self.stop(ref)
        self.by_name.pop(ref.name, None)

    def claim(self, ref: JobRef, try_number: int) -> None:
        self.calls.append(("claim", ref.name))
        self.by_name[ref.name].claimed = try_number

    def owner_try(self, ref: JobRef) -> int | None:
        job = self.by_name.get(ref.name)
        if job is None:
            return None
        tries = [int(v) for v in (job.labels.get(LABEL_TRY), job.claimed) if v is not None and str(v).isdigit()]
        return max(tries) if tries else None

    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        infos = [JobInfo.of(replace(j.ref, attempt=attempt_of(j.labels)), j.labels, j.annotations,
                            datetime.fromtimestamp(j.submitted, UTC)) for j in self.by_name.values()]
        return [i for i in infos if i.matches(dag_id, task_id, run_id)]

    def replicas(self, ref: JobRef) -> list[Replica]:
        job = self.by_name.get(ref.name)
        if job is None:
            return []
        state = {JobState.RUNNING: "Running", JobState.SUCCEEDED: "Succeeded"}.get(self.status(ref).state, "Failed")
        return [Replica(f"{role}-{i}", role, i, state) for role, n in job.roles.items() for i in range(n)]

    # -- capabilities: events, settle, the stored spec ------------------------------------
    def events(self, ref: JobRef, seen: Collection[str] = ()) -> list[Event]:
        job = self.by_name.get(ref.name)
        return [e for e in job.events if e.uid not in seen] if job is not None else []

    def settle(self, ref: JobRef) -> list[str]:
        self.calls.append(("settle", ref.name))
        job = self.by_name.get(ref.name)
        left, job.leftovers = (job.leftovers, []) if job is not None else ([], [])
        return left

    def spec(self, ref: JobRef) -> JSONDict | None:
        job = self.by_name.get(ref.name)
        return job.spec if job is not None else None


def make_runner(reach: Reach) -> FakeRunner:
    """A runner factory with the registry's signature (Reach -> runner)."""
    return FakeRunner(reach.place or "memory")
