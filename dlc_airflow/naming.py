"""Deterministic job names and labels.

A task instance's job name is derived from (dag_id, task_id, run_id, map_index) and the job
attempt, so a retried or restarted task finds the job it made instead of creating another.
Every derived name must fit DNS-1123 (63 characters): pods are named <job>-<role>-<index>
(native), <job>-<role>-<jobindex>-<index> (JobSet) and Kubeflow services likewise, so the
job name keeps to MAX_BASE_NAME characters.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from dlc_airflow.errors import BackendError

MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "dlc-airflow"
PREFIX = "dlc-airflow/"
LABEL_JOB = PREFIX + "job-name"
LABEL_TASK_KEY = PREFIX + "task-key"
LABEL_DAG = PREFIX + "dag-id"
LABEL_TASK = PREFIX + "task-id"
LABEL_RUN = PREFIX + "run-id"
LABEL_MAP_INDEX = PREFIX + "map-index"
LABEL_TRY = PREFIX + "try"
LABEL_ATTEMPT = PREFIX + "attempt"
LABEL_ROLE = PREFIX + "role"

MAX_NAME = 63
# <job>-<role(10)>-<jobindex(1)>-<index(5)> must stay within 63 characters.
MAX_BASE_NAME = 40
_HASH = 10


def digest(*parts: object, length: int = _HASH) -> str:
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def slug(text: str, limit: int) -> str:
    """Lowercase DNS label characters, starting with a letter, at most `limit` long."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-{2,}", "-", s)
    if not s or not s[0].isalpha():
        s = "j" + ("-" + s if s else "")
    return s[:limit].rstrip("-") or "j"


def label_value(text: str) -> str:
    """A valid label value for any string: itself if it is one, else a readable part + hash."""
    if len(text) <= MAX_NAME and re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", text):
        return text
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_.")[: MAX_NAME - _HASH - 1]
    readable = readable.rstrip("-_.")
    return f"{readable}-{digest(text)}" if readable else digest(text)


@dataclass(frozen=True)
class TaskIdentity:
    """Which Airflow task instance a job belongs to."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1
    # Airflow counts clears of a run (not retries): a cleared task gets new jobs, a retried
    # one finds the jobs of its earlier tries.
    clear_number: int = 0

    @property
    def key(self) -> str:
        """Stable across retries of the same task instance; new after a clear."""
        return digest(self.dag_id, self.task_id, self.run_id, self.map_index, self.clear_number, length=16)


def job_name(base: str, identity: TaskIdentity, attempt: int) -> str:
    """Name of the `attempt`-th job of a task instance: <base>-<hash>-<attempt>."""
    if attempt < 1:
        raise ValueError("attempt starts at 1")
    suffix = f"-{identity.key[:_HASH]}-{attempt}"
    return slug(base, MAX_BASE_NAME - len(suffix)) + suffix


def parse_attempt(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def task_labels(identity: TaskIdentity) -> dict[str, str]:
    """Labels that find every job of a task instance (a label selector)."""
    return {MANAGED_BY: MANAGER, LABEL_TASK_KEY: identity.key}


def job_labels(name: str, identity: TaskIdentity | None, attempt: int | None = None) -> dict[str, str]:
    """Labels on every object of a job (and its pods)."""
    labels = {MANAGED_BY: MANAGER, LABEL_JOB: name}
    if identity is not None:
        labels.update(
            {
                LABEL_TASK_KEY: identity.key,
                LABEL_DAG: label_value(identity.dag_id),
                LABEL_TASK: label_value(identity.task_id),
                LABEL_RUN: label_value(identity.run_id),
                LABEL_MAP_INDEX: str(identity.map_index) if identity.map_index >= 0 else "none",
                LABEL_TRY: str(identity.try_number),
            }
        )
    if attempt is not None:
        labels[LABEL_ATTEMPT] = str(attempt)
    return labels


def job_annotations(identity: TaskIdentity | None) -> dict[str, str]:
    """The unabridged ids, for people reading the objects."""
    if identity is None:
        return {}
    return {
        LABEL_DAG: identity.dag_id,
        LABEL_TASK: identity.task_id,
        LABEL_RUN: identity.run_id,
        LABEL_MAP_INDEX: str(identity.map_index),
    }


def child_name(job: str, *parts: object) -> str:
    name = "-".join([job, *(str(p) for p in parts)])
    if len(name) > MAX_NAME:
        raise ValueError(f"derived name {name!r} is longer than {MAX_NAME} characters")
    return name


_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def check_name(name: str, backend: str) -> None:
    """The derived job name must be a DNS-1035 label short enough for every child name."""
    if not isinstance(name, str) or not _DNS_1035.match(name):
        raise BackendError(
            f"{backend} backend: job name {name!r} must be a DNS-1035 label (lowercase letters, "
            "digits and '-', starting with a letter); derive it with naming.job_name"
        )
    if len(name) > MAX_BASE_NAME:
        raise BackendError(
            f"{backend} backend: job name {name!r} is {len(name)} characters; at most "
            f"{MAX_BASE_NAME} leave room for child names such as <name>-worker-0"
        )
