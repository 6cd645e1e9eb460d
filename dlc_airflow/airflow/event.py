"""JobEvent: what DLCJobTrigger reports when its wait is over, in one typed shape.

The trigger ends the task itself where it can (TaskSuccessEvent / TaskFailedEvent carrying
the result as XCom) and otherwise yields a TriggerEvent with `JobEvent.to_dict()`. dag.test
runs a trigger inline and resumes the task with only the end event's state ('success' /
'failed'); `JobEvent.from_task_end` rebuilds the event from the job itself for that case,
so `execute_complete` has one path whatever the trigger yielded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlc_airflow.finish import OnFinish, job_result, outcome_of, succeeded
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.progress import terminal_verdict
from dlc_airflow.reasons import NOT_FOUND
from dlc_airflow.runner import JobRunner
from dlc_airflow.status import JobState

MARK = "dlc_job_event"  # tells our payload from any other trigger's
XCOMS = "xcoms"  # a payload's XComs of a task started in the triggerer, for the worker to push


@dataclass(frozen=True)
class JobEvent:
    ref: JobRef
    ok: bool
    result: JSONObject
    error: str | None = None

    def to_dict(self) -> JSONObject:
        return {MARK: 1, "ref": self.ref.to_dict(), "ok": self.ok, "result": self.result, "error": self.error}

    @classmethod
    def from_dict(cls, data: JSONObject) -> JobEvent:
        if not isinstance(data, dict) or data.get(MARK) != 1:
            raise ValueError(f"not a DLC job event: {data!r:.200}")
        return cls(ref=JobRef.from_dict(data["ref"]), ok=bool(data["ok"]), result=dict(data["result"]),
                   error=data.get("error"))

    @classmethod
    def is_payload(cls, data: Any) -> bool:
        return isinstance(data, dict) and data.get(MARK) == 1

    @classmethod
    def from_task_end(cls, payload: Any, ref: JobRef, runner: JobRunner, on_finish: OnFinish) -> JobEvent:
        """The event behind a TaskSuccessEvent / TaskFailedEvent payload ('success' / 'failed'),
        read back from the job (where the trigger left it)."""
        status = runner.status(ref)
        gone = status.reason == NOT_FOUND
        if str(payload).lower() == "success" and on_finish is OnFinish.DELETE and gone:
            # the trigger took the result and deleted the job, as asked: it succeeded
            status = status.model_copy(update={"state": JobState.SUCCEEDED, "reason": "", "message": ""})
        if not status.terminal:
            return cls(ref, False, job_result(ref, status, None), f"job {ref.name} did not succeed: the trigger ended "
                       f"the wait ({payload}); job {status.summary()}")
        # the same rule as at the end of a wait (dlc_airflow.finish)
        verdict = terminal_verdict(ref.name, status)
        outcome = outcome_of(ref, verdict, runner.outputs(ref) if succeeded(verdict) and not gone else None)
        return cls(ref, outcome.ok, outcome.result, outcome.error)
