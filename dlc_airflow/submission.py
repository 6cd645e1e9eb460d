"""Submit-or-adopt: the one place that decides what a task does with the jobs it made.

For a task instance (its TaskIdentity) and its job spec:
- a live job of this task -> adopt it: complete whatever part of it is missing (a try
  killed between two creates) and keep waiting on it;
- a succeeded one -> take its result (reuse_succeeded);
- a failed or stopped one -> submit the next attempt (after an OOM kill with more memory,
  when the spec allows it: dlc_airflow.retrying.next_attempt_job);
- none, but the task state store remembers one -> take its recorded result, or submit the
  attempt after the recorded one (the same way);
- nothing at all -> submit attempt 1.
Whichever try submits or adopts the job claims it (runner.claim), so an older try that is
told to stop (on_kill) can tell the job is no longer its own; a job that ends while a try
adopts it (an older try stopped it just before the claim) is decided as an ended job, never
taken as this try's verdict. Never two live jobs for one
task instance: names are deterministic per attempt, and creating one that exists is an
adoption after the ownership check (OwnershipError otherwise).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.retrying import next_attempt_job
from dlc_airflow.runner import GuardedStop, JobRunner, Log
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus


class Action(str, Enum):
    SUBMITTED = "submitted"  # a new attempt was created
    ADOPTED = "adopted"  # this task's live job (completed if a part was missing)
    REUSED = "reused"  # this task's succeeded job: its result is taken
    RECORDED = "recorded"  # the job is gone; the task state store has its result


@dataclass(frozen=True)
class Submission:
    action: Action
    ref: JobRef | None  # None only for RECORDED
    status: JobStatus | None
    recorded_result: JSONObject | None = None


def submit_or_adopt(runner: JobRunner, job: DLCJob, identity: TaskIdentity, *, base_name: str,
                    reuse_succeeded: bool = True, recorded: JSONObject | None = None,
                    log: Log | None = None) -> Submission:
    """See the module docstring. `recorded` is the task state store's entry for the job
    ({JobRef fields, "state", "result"?}); SubmitError / OwnershipError propagate."""
    log = log or logging.getLogger(__name__)
    attempt, previous_reason = 1, ""
    existing = runner.find(identity, job)
    if existing:
        newest = existing[-1]
        status = runner.status(newest)
        if not status.terminal:
            ref, created = runner.submit(job, newest.name, identity, newest.attempt)
            _claim(runner, ref, identity, log)
            # read after the claim: an older try that stops the job from now on sees this try's
            # claim; one that stopped or deleted it before (a superseded try's on_kill) has ended
            # the job under this try, which is no verdict: it is decided as an ended job below
            status = runner.status(ref)
            if not status.terminal:
                log.info("adopting job %s (attempt %d), which this task started earlier%s: %s", ref.name,
                         ref.attempt, " (created its missing parts)" if created else "", status.summary())
                return Submission(Action.ADOPTED, ref, status)
            log.warning("job %s (attempt %d) ended while this try adopted it: %s", ref.name, ref.attempt,
                        status.summary())
            newest = ref
        if status.state is JobState.SUCCEEDED and reuse_succeeded:
            log.info("job %s (attempt %d) already succeeded: taking its result", newest.name, newest.attempt)
            return Submission(Action.REUSED, newest, status)
        log.warning("job %s (attempt %d) ended %s; submitting attempt %d", newest.name,
                    newest.attempt, status.summary(), newest.attempt + 1)
        attempt, previous_reason = newest.attempt + 1, status.reason
    elif recorded:
        if recorded.get("state") == JobState.SUCCEEDED.value and reuse_succeeded and recorded.get("result"):
            log.info("job %s already succeeded (recorded in the task state store)", recorded.get("name"))
            return Submission(Action.RECORDED, None, None, recorded["result"])
        attempt = int(recorded.get("attempt", 0)) + 1
        result = recorded.get("result")
        previous_reason = str(result.get("reason") or "") if isinstance(result, dict) else ""
    raised = next_attempt_job(job, previous_reason)
    if raised is not job:
        log.warning("the previous attempt was OOM-killed: attempt %d runs every replica with %s "
                    "(fault_tolerance.oom_retry_memory)", attempt, raised.resources.memory)
        job = raised
    name = job_name(base_name, identity, attempt)
    ref, created = runner.submit(job, name, identity, attempt)
    _claim(runner, ref, identity, log)
    log.info("%s job %s (attempt %d) in %s", "submitted" if created else "adopted", ref.name, attempt, ref.place)
    return Submission(Action.SUBMITTED if created else Action.ADOPTED, ref, runner.status(ref))


def _claim(runner: JobRunner, ref: JobRef, identity: TaskIdentity, log: Log) -> None:
    try:
        runner.claim(ref, identity.try_number)
    except Exception as exc:  # noqa: BLE001 - the job runs fine without; say what is at stake
        log.warning("could not mark job %s as adopted by try %d (%s): an older try that is killed "
                    "now could stop it", ref.name, identity.try_number, exc)


def stop_if_owner(runner: JobRunner, ref: JobRef, try_number: int, log: Log | None = None) -> bool:
    """Stop the job unless a newer try has adopted it (a superseded try must not stop its
    successor's job); True if it was stopped."""
    log = log or logging.getLogger(__name__)
    if isinstance(runner, GuardedStop):  # the claim check and the stop in one step
        stopped, owner = runner.stop_unless_claimed(ref, try_number)
    else:  # a claim may land between the check and the stop: the newer try then submits anew
        owner = runner.owner_try(ref)
        stopped = owner is None or owner <= try_number
        if stopped:
            runner.stop(ref)
    if not stopped:
        log.info("not stopping job %s: try %d adopted it (this is try %d)", ref.name, owner, try_number)
        return False
    log.info("stopped job %s", ref.name)
    return True
