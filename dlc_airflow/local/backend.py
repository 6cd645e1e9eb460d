"""The local backend's pure half: every job type runs as local processes (ray: its head
only, which starts a local Ray cluster), except slurm: a batch script needs a Slurm
cluster (its srun steps), so that type is refused, naming the backend that runs it."""

from __future__ import annotations

from typing import ClassVar

from dlc_airflow.jobtypes import JOB_TYPES, JobType
from dlc_airflow.spec import DLCJob


class LocalBackend:
    name: ClassVar[str] = "local"
    job_types: ClassVar[frozenset[JobType]] = frozenset(JOB_TYPES) - {JobType.slurm}

    def check(self, job: DLCJob) -> None:
        """Every spec the parser accepts runs locally, but a slurm batch script."""
        if job.type not in self.job_types:
            from dlc_airflow.errors import unsupported_type

            raise unsupported_type(job.type.value, self.name, "a batch script needs a Slurm cluster")
