"""The local backend's pure half: every job type runs as local processes (ray: its head
only, which starts a local Ray cluster), so nothing is refused by type."""

from __future__ import annotations

from typing import ClassVar

from dlc_airflow.jobtypes import JOB_TYPES, JobType
from dlc_airflow.spec import DLCJob


class LocalBackend:
    name: ClassVar[str] = "local"
    job_types: ClassVar[frozenset[JobType]] = frozenset(JOB_TYPES)

    def check(self, job: DLCJob) -> None:
        """Every spec the parser accepts runs locally."""
