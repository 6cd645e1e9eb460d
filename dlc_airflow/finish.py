"""The steps after a verdict, written once for the sync wait, the trigger and the sensor.

    outcome = finish(runner, ref, verdict, replicas, on_finish=OnFinish.KEEP, log=log, record=store_set,
                     owner_try=try_number)

`finish_plan` decides (pure): stop a job that ran out of time (unless a newer try of the
task has adopted it), settle the leftovers of one that finished (parameter servers...),
delete it when asked. `finish` performs the plan in that order, collects what the job
reported, records the result (task state store), and returns the Outcome the caller turns
into a task result or failure. Every backend stops the same way (the job ends, what there is
to read stays), so `on_finish` decides alone whether a job that ran out of time is kept. `outcome_of` is the one rule for that Outcome, also used
where a wait that ended elsewhere is read back (dlc_airflow.airflow.event).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from dlc_airflow import eta
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.progress import Verdict, VerdictKind
from dlc_airflow.runner import JobRunner, Log, Outputs, Replica, Settler, merge_outputs
from dlc_airflow.status import JobState, JobStatus


class OnFinish(str, Enum):
    KEEP = "keep"  # the job's objects stay (TTL, if set, removes them)
    DELETE = "delete"  # removed once the task has its result

    @classmethod
    def parse(cls, value: Any, where: str) -> OnFinish:
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"{where}: on_finish must be 'keep' or 'delete', not {value!r}") from None


@dataclass(frozen=True)
class FinishPlan:
    stop: bool  # the job did not finish in time: stop it (unless a newer try adopted it)
    settle: bool  # it finished: stop what still runs of it
    delete: bool  # on_finish=delete, whether it finished or was stopped
    ok: bool  # the task succeeds


def finish_plan(verdict: Verdict, on_finish: OnFinish, owner: bool = True) -> FinishPlan:
    """`owner`: the waiting task made the job (an operator); a sensor only watches it and
    never stops, settles or deletes it."""
    finished = verdict.kind is VerdictKind.FINISHED
    return FinishPlan(
        stop=owner and not finished,
        settle=owner and finished,
        delete=owner and on_finish is OnFinish.DELETE,
        ok=succeeded(verdict),
    )


@dataclass(frozen=True)
class Outcome:
    ok: bool
    result: JSONObject  # the task's XCom return_value
    error: str | None  # why the task fails (None when ok)


Record = Callable[[JSONObject], None]


def succeeded(verdict: Verdict) -> bool:
    """The outcome rule: a task succeeds when its job finished and succeeded."""
    return verdict.kind is VerdictKind.FINISHED and verdict.status.state is JobState.SUCCEEDED


def outcome_of(ref: JobRef, verdict: Verdict, outputs: Outputs | None) -> Outcome:
    """The task's outcome for a verdict (pure)."""
    result = job_result(ref, verdict.status, outputs)
    if succeeded(verdict):
        return Outcome(True, result, None)
    return Outcome(False, result, verdict.message)


def finish(runner: JobRunner, ref: JobRef, verdict: Verdict, replicas: Sequence[Replica] | None, *,
           on_finish: OnFinish, log: Log, owner_try: int | None, record: Record | None = None) -> Outcome:
    """`replicas`: as the wait's follower last reported them (none: the runner reads them);
    `owner_try`: the try of the task that made (or adopted) the job; None for a sensor, which
    only watches it."""
    from dlc_airflow.submission import stop_if_owner

    plan = finish_plan(verdict, on_finish, owner=owner_try is not None)
    if plan.stop and owner_try is not None:
        log.error("%s; stopping the job", verdict.message)
        if not stop_if_owner(runner, ref, owner_try, log):
            plan = replace(plan, delete=False)  # a newer try adopted it: not ours to remove either
    outcome = outcome_of(ref, verdict, runner.outputs(ref, replicas or None))
    result = outcome.result
    if plan.settle and isinstance(runner, Settler):
        for name in runner.settle(ref):
            log.info("stopped %s: still running after the job finished", name)
    if record is not None:
        record({**ref.to_dict(), "state": verdict.status.state.value, "result": result})
    if plan.delete:
        log.info("deleting job %s (on_finish='delete')", ref.name)
        runner.delete(ref)
    if outcome.ok:
        log.info("job %s succeeded (queued %ss, ran %ss, %d restarts)", ref.name,
                 _round(result["queued_seconds"]), _round(result["running_seconds"]), verdict.status.restarts)
    elif not plan.stop:  # (a stopped job's message was logged with the stop)
        log.error("%s", verdict.message)
    return outcome


def job_result(ref: JobRef, status: JobStatus, outputs: Outputs | None) -> JSONObject:
    """What a finished task returns (its XCom): where the job ran, how it went, what it reported.
    `namespace` is the job's place (a namespace, Slurm partition, DLC workspace, local job root)."""
    durations = status.durations()
    reported = outputs or merge_outputs([])
    return {
        "job_name": ref.name,
        "namespace": ref.place,
        "backend": ref.backend,
        "uid": ref.uid,
        "attempt": ref.attempt,
        "state": status.state.value,
        "reason": status.reason,
        "message": status.message,
        "restarts": status.restarts,
        "queued_seconds": durations["queued_seconds"],
        "running_seconds": durations["running_seconds"],
        "roles": {role: counts.model_dump() for role, counts in status.roles.items()},
        "metrics": reported["metrics"],
        "outputs": reported["outputs"],
        "progress": final_progress(status, reported["metrics"]),
    }


def final_progress(status: JobStatus, metrics: JSONObject) -> JSONObject | None:
    """The job's last progress ({"current", "total", "unit", "percent", "eta_seconds"}): what its
    last metrics say (dlc_airflow.runtime.log_progress), else what its backend kept (Kubeflow
    Trainer's status); None when it reported none."""
    done = status.state is JobState.SUCCEEDED
    if (found := eta.final(metrics, done)) is not None:
        return found
    if status.progress is not None:
        return eta.of_percent(status.progress.percent, 0.0 if done else status.progress.eta_seconds).to_dict()
    return None


def _round(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"
