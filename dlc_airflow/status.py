"""The normalised status of a job, whatever backend ran it."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from dlc_airflow.jsonvalue import JSONObject


class JobState(str, Enum):
    PENDING = "PENDING"  # created, nothing scheduled yet
    QUEUED = "QUEUED"  # waiting for admission (Kueue) or for nodes (unschedulable)
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"  # a replica failed and is being replaced
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  # stopped by a user (task killed) or deleted

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.STOPPED})


class RoleCounts(BaseModel):
    replicas: int = 0
    active: int = 0
    succeeded: int = 0
    failed: int = 0


class ReportedProgress(BaseModel):
    """Progress a backend itself keeps for the job (Kubeflow Trainer's status.trainerStatus); the
    count-based progress of the job's own log lines is dlc_airflow.eta's."""

    percent: float
    eta_seconds: float | None = None
    updated: datetime | None = None


class JobStatus(BaseModel):
    state: JobState
    reason: str = ""
    message: str = ""
    roles: dict[str, RoleCounts] = Field(default_factory=dict)
    restarts: int = 0
    created: datetime | None = None
    started: datetime | None = None
    finished: datetime | None = None
    progress: ReportedProgress | None = None

    @property
    def terminal(self) -> bool:
        return self.state.terminal

    def summary(self) -> str:
        """One line for the task log: state, reason, per-role counts."""
        parts = [self.state.value]
        if self.reason:
            parts.append(f"({self.reason})")
        counts = ", ".join(
            f"{role} {c.active} active/{c.succeeded} ok/{c.failed} failed of {c.replicas}"
            for role, c in self.roles.items()
        )
        if counts:
            parts.append(f"[{counts}]")
        if self.restarts:
            parts.append(f"restarts={self.restarts}")
        if self.message:
            parts.append(f"- {self.message}")
        return " ".join(parts)

    def durations(self) -> dict[str, float | None]:
        """Seconds spent queued (created -> started) and running (started -> finished)."""
        queued = running = None
        if self.created and self.started:
            queued = max(0.0, (self.started - self.created).total_seconds())
        if self.started and self.finished:
            running = max(0.0, (self.finished - self.started).total_seconds())
        return {"queued_seconds": queued, "running_seconds": running}


def parse_time(value: Any) -> datetime | None:
    """Kubernetes RFC 3339 timestamps ('2026-12-02T10:00:00Z') to aware datetimes."""
    if not value:
        return None
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def condition(obj: JSONObject, ctype: str) -> JSONObject | None:
    """The condition of type `ctype` with status True, if any."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            found: JSONObject = cond
            return found
    return None
