"""What the job CLI and the report page list of a job, the same on every backend (pure).

`JobInfo` is a job as a list shows it: where it is and which task instance made it. Each
runner fills it in (`JobRunner.jobs`) from the labels the job carries (naming.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dlc_airflow.jobref import JobRef
from dlc_airflow.naming import LABEL_ATTEMPT, LABEL_DAG, LABEL_MAP_INDEX, LABEL_RUN, LABEL_TASK, LABEL_TRY


@dataclass(frozen=True)
class JobInfo:
    ref: JobRef
    dag_id: str = ""  # "" for a job made outside Airflow (dlc-airflow jobs clone)
    task_id: str = ""
    run_id: str = ""
    map_index: int = -1
    try_number: int = 0
    created: datetime | None = None

    @classmethod
    def of(cls, ref: JobRef, labels: dict[str, str], annotations: dict[str, str] | None = None,
           created: datetime | None = None) -> JobInfo:
        """From a job's labels, with the unabridged ids of its annotations where it has them
        (labels are cut and hashed to fit 63 characters)."""
        full = {**labels, **(annotations or {})}
        index, tried = full.get(LABEL_MAP_INDEX, ""), labels.get(LABEL_TRY, "")
        return cls(ref=ref, dag_id=full.get(LABEL_DAG, ""), task_id=full.get(LABEL_TASK, ""),
                   run_id=full.get(LABEL_RUN, ""), map_index=int(index) if index.lstrip("-").isdigit() else -1,
                   try_number=int(tried) if tried.isdigit() else 0, created=created)

    def matches(self, dag_id: str | None = None, task_id: str | None = None, run_id: str | None = None) -> bool:
        return all(want is None or want == have for want, have in
                   ((dag_id, self.dag_id), (task_id, self.task_id), (run_id, self.run_id)))


def attempt_of(labels: dict[str, str]) -> int:
    value = labels.get(LABEL_ATTEMPT, "1")
    return int(value) if value.isdigit() else 1
