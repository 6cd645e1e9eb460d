"""DLCRetryPolicy: Airflow 3.3's retry policy (AIP-105) over the reason a job ended.

The operator raises JobDidNotSucceed (defined here, where it is read; operators.job exports it) with the job's reason and its spec's
fault_tolerance.oom_retry_memory (from `_ended`, the one end of the sync and the deferred
waits); this policy turns them into Airflow's RetryDecision by dlc_airflow.retrying.decide.
DLCJobOperator sets it when the task gives no retry_policy and this Airflow has them
(compat.OFFERS.retry_policy); on Airflow 3.1 and 3.2 the class exists but cannot be built:
a clear error at parse time. Airflow serializes only that a task has a policy; the worker
that runs the task reads it from the DAG file, so `serialize` / `deserialize` are for
Airflow's API and round trips only.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from dlc_airflow.airflow.compat import OFFERS
from dlc_airflow.retrying import Action, Decision, decide

if TYPE_CHECKING or OFFERS.retry_policy:
    from airflow.sdk import RetryAction, RetryDecision, RetryPolicy
else:  # Airflow 3.1, 3.2: no retry policies
    RetryPolicy = object


class JobDidNotSucceed(AirflowException):
    """The job ended without success (or ran out of time), raised by DLCJobOperator; Airflow
    retries as configured, or as DLCRetryPolicy decides from `reason` (the job's, a
    dlc_airflow.reasons name) and `oom_retry_memory` (what the spec allows a retry after an
    OOM kill)."""

    def __init__(self, message: str, reason: str = "", oom_retry_memory: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.oom_retry_memory = oom_retry_memory


def reason_of(exception: BaseException) -> tuple[str, str | None] | None:
    """(the job's reason, oom_retry_memory) of a task failure we know, looking through what
    raised it (a submit refused for quota: SubmitError.reason); None for others."""
    from dlc_airflow.errors import SubmitError

    seen: BaseException | None = exception
    while seen is not None:
        if isinstance(seen, JobDidNotSucceed):
            return seen.reason, seen.oom_retry_memory
        if isinstance(seen, SubmitError) and seen.reason:
            return seen.reason, None
        seen = seen.__cause__
    return None


def decision_for(exception: BaseException) -> Decision:
    """The decision for any task failure (pure): ours by its reason, others Airflow's."""
    known = reason_of(exception)
    if known is None:
        return Decision(Action.DEFAULT, type(exception).__name__)
    return decide(*known)


class DLCRetryPolicy(RetryPolicy):
    """Retries that know why the job failed (README "Retries that know the failure")."""

    def __init__(self) -> None:
        if not OFFERS.retry_policy:
            raise TypeError(f"DLCRetryPolicy needs Airflow 3.3 (retry policies, AIP-105); this is "
                            f"Airflow {OFFERS.version}: remove retry_policy= (failures use the task's retries)")

    def evaluate(self, exception: BaseException, try_number: int, max_tries: int,
                 context: Any = None) -> RetryDecision:
        decision = decision_for(exception)
        if decision.action is Action.FAIL:
            return RetryDecision.fail(decision.why)
        if decision.action is Action.RETRY:
            delay = timedelta(seconds=decision.delay) if decision.delay is not None else None
            return RetryDecision.retry(delay=delay, reason=decision.why)
        return RetryDecision(action=RetryAction.DEFAULT)

    def serialize(self) -> dict[str, Any]:
        return {"__type": "DLCRetryPolicy"}

    @classmethod
    def deserialize(cls, data: dict[str, Any]) -> DLCRetryPolicy:
        if data.get("__type") != "DLCRetryPolicy":
            raise ValueError(f"not a DLCRetryPolicy: {data!r:.200}")
        return cls()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DLCRetryPolicy)

    def __hash__(self) -> int:
        return hash(DLCRetryPolicy)
