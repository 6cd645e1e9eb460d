"""What a failed job's reason means for the task's next try (pure; Airflow's side is
dlc_airflow.airflow.retry).

    decide(reasons.OOM_KILLED, "8Gi")     -> RETRY: the next try runs with 8Gi
    decide(reasons.OOM_KILLED, None)      -> FAIL at once: raise resources.memory
    decide(reasons.PREEMPTED, None)       -> RETRY after PREEMPTION_DELAY
    decide(reasons.NON_RETRYABLE_EXIT, _) -> FAIL at once
    decide(reasons.FORBIDDEN, _)          -> FAIL at once, on every Airflow (FAILS_FOR_GOOD)
    decide("anything else", _)            -> DEFAULT (Airflow's retries)

`next_attempt_job` is how the next try learns the memory: when the task submits its next
attempt, it reads the previous attempt's reason (through the runner, or the task state store
when the job is gone) and, after an OOM kill, gives every replica fault_tolerance.oom_retry_memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from dlc_airflow import reasons
from dlc_airflow.spec import DLCJob

# Airflow's retry policies cannot add tries: a preemption still uses one of the task's
# retries, and comes back after this short delay instead of the task's retry_delay.
PREEMPTION_DELAY = 30.0
# A namespace's ResourceQuota refused the job's objects: quota frees as other jobs end.
QUOTA_DELAY = 300.0
QUOTA_EXCEEDED = reasons.QUOTA_EXCEEDED
# Reasons no try of the task can help, on Airflow versions without retry policies too: the
# connection's credentials were refused while waiting (fix them, then clear the task: it adopts its job).
FAILS_FOR_GOOD = frozenset({reasons.FORBIDDEN})


class Action(str, Enum):
    RETRY = "retry"
    FAIL = "fail"
    DEFAULT = "default"


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str
    delay: float | None = None  # seconds before the retry (None: the task's retry_delay)


def decide(reason: str, oom_retry_memory: str | None) -> Decision:
    """The decision for a job that ended with `reason` (a dlc_airflow.reasons name)."""
    if reason == reasons.OOM_KILLED:
        if oom_retry_memory:
            return Decision(Action.RETRY, f"OOM kill: the next try runs every replica with {oom_retry_memory} "
                                          "(fault_tolerance.oom_retry_memory)")
        return Decision(Action.FAIL, "OOM kill: no retry runs with more memory; raise resources.memory "
                                     "(or set fault_tolerance.oom_retry_memory)")
    if reason in (reasons.PREEMPTED, reasons.NODE_FAIL):
        return Decision(Action.RETRY, f"{reason}: not the job's fault; retrying in {PREEMPTION_DELAY:.0f}s",
                        PREEMPTION_DELAY)
    if reason == QUOTA_EXCEEDED:
        return Decision(Action.RETRY, f"the namespace's quota is used up; retrying in {QUOTA_DELAY:.0f}s",
                        QUOTA_DELAY)
    if reason == reasons.NON_RETRYABLE_EXIT:
        return Decision(Action.FAIL, "an exit code not in fault_tolerance.retryable_exit_codes: no retry helps")
    if reason in FAILS_FOR_GOOD:
        return Decision(Action.FAIL, "the connection's credentials were refused: no retry helps until they are "
                                     "fixed (then clear the task: it adopts its job)")
    return Decision(Action.DEFAULT, reason or "no reason")


def next_attempt_job(job: DLCJob, previous_reason: str) -> DLCJob:
    """The spec of the attempt after one that ended with `previous_reason`: after an OOM kill,
    every replica (the job and each role that sets its own) gets oom_retry_memory."""
    memory = job.fault_tolerance.oom_retry_memory
    if previous_reason != reasons.OOM_KILLED or not memory:
        return job
    roles = {name: role.model_copy(update={"resources": role.resources.model_copy(update={"memory": memory})})
             if role.resources else role for name, role in job.roles.items()}
    # the raised copy no longer asks for more (the spec is validated again where it runs: Slurm's
    # prelude, `jobs clone`), and an OOM kill with it is the end (see decide's caller)
    fault_tolerance = job.fault_tolerance.model_copy(update={"oom_retry_memory": None})
    return job.model_copy(update={"resources": job.resources.model_copy(update={"memory": memory}),
                                  "roles": roles, "fault_tolerance": fault_tolerance})
