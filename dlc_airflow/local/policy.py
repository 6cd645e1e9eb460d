"""What the local supervisor does when a replica ends, and when the job has succeeded. Pure.

The same rules as the native backend's per-index fault tolerance
(dlc_airflow.k8s.backends.native.pod_failure_rules, backoffLimitPerIndex), first match wins:

1. exit code 0: the replica succeeded;
2. preempted (with restart_on_preemption): replaced without counting a restart;
3. an exit code not in `retryable_exit_codes` (when that list is set): the job fails at
   once (reasons.NON_RETRYABLE_EXIT), as the FailJob rule;
4. otherwise the replica is restarted, after a backoff doubling from RESTART_BACKOFF up to
   MAX_BACKOFF, until it has been restarted `max_restarts` times; one more failure fails
   the job (reasons.RESTART_LIMIT_EXCEEDED).

A failed health check fails the job at once (HEALTH_CHECK_FAILED).

Success: every replica succeeded, except for TensorFlow, where the job succeeds when the
chief does (worker 0 without a chief), as Kubeflow's TFJob success policy; the replicas still
running then (parameter servers, evaluators, other workers) are stopped, not failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from dlc_airflow import reasons
from dlc_airflow.jobtypes import JobType
from dlc_airflow.spec import DLCJob, FaultTolerance

RESTART_BACKOFF = 0.2  # seconds before the first restart, doubling, at most MAX_BACKOFF
MAX_BACKOFF = 5.0
# A replica's phases: pending, health, running, backoff (waiting to restart), then one of these
# (stopped: still running when the job succeeded without it).
ENDED = frozenset({"succeeded", "failed", "stopped"})

# Reasons only the local backend has (the shared ones are in dlc_airflow.reasons).
HEALTH_CHECK_FAILED = "HealthCheckFailed"
CODE_SOURCE_FAILED = "CodeSourceFailed"
START_ERROR = "StartError"
INVALID_SPEC = "InvalidSpec"
SUPERVISOR_ERROR = "SupervisorError"


class Action(StrEnum):
    SUCCEED = "succeed"
    RESTART = "restart"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str = ""  # why the job fails (FAIL): a dlc_airflow.reasons name
    why: str = ""  # the same for people
    delay: float = 0.0  # seconds before the restart (RESTART)
    counted: bool = True  # whether the restart counts towards max_restarts (RESTART)


def backoff(restart: int) -> float:
    """Seconds before restart number `restart` (1 for the first)."""
    return float(min(MAX_BACKOFF, RESTART_BACKOFF * 2 ** max(0, restart - 1)))


def retryable(policy: FaultTolerance, code: int) -> bool:
    return not policy.retryable_exit_codes or code in policy.retryable_exit_codes


def after_exit(policy: FaultTolerance, code: int, restarts: int, *, preempted: bool = False) -> Decision:
    """What happens when a replica's main command exits with `code`, after `restarts`
    counted restarts of that replica."""
    if code == 0 and not preempted:
        return Decision(Action.SUCCEED)
    if preempted and policy.restart_on_preemption:
        return Decision(Action.RESTART, why="preempted", delay=0.0, counted=False)
    if not retryable(policy, code):
        return Decision(
            Action.FAIL,
            reasons.NON_RETRYABLE_EXIT,
            f"exit code {code} is not in retryable_exit_codes {policy.retryable_exit_codes}",
        )
    if restarts < policy.max_restarts:
        restart = restarts + 1
        return Decision(Action.RESTART, why=f"restart {restart} of {policy.max_restarts}",
                        delay=backoff(restart))
    return Decision(
        Action.FAIL,
        reasons.RESTART_LIMIT_EXCEEDED,
        f"restarted {restarts} of max_restarts {policy.max_restarts} times",
    )


def after_health_check(code: int) -> Decision:
    """A health check that exits 0 lets the main command start; any other code fails the job."""
    if code == 0:
        return Decision(Action.SUCCEED)
    return Decision(Action.FAIL, HEALTH_CHECK_FAILED, f"the health check exited with code {code}")


def success_decider(job: DLCJob) -> tuple[str, int] | None:
    """The replica whose success is the job's: TensorFlow's chief (worker 0 without one);
    None when every replica must succeed."""
    if job.type is JobType.tensorflow:
        return ("chief", 0) if "chief" in job.roles else ("worker", 0)
    return None


def job_succeeded(job: DLCJob, succeeded: Iterable[tuple[str, int]], replicas: Iterable[tuple[str, int]]) -> bool:
    """Whether the job has succeeded, given the replicas that have (`succeeded`) among all
    of them (`replicas`)."""
    done = set(succeeded)
    decider = success_decider(job)
    if decider is not None:
        return decider in done
    return all(key in done for key in replicas)


def leftovers(phases: Mapping[tuple[str, int], str]) -> list[tuple[str, int]]:
    """The replicas to stop once the job has succeeded (by phase): those that have not ended."""
    return [key for key, phase in phases.items() if phase not in ENDED]
