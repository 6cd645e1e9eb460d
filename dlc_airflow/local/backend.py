"""The local backend's pure half: every job type runs as local processes (ray: its head
only, which starts a local Ray cluster), except slurm: a batch script needs a Slurm
cluster (its srun steps), so that type is refused, naming the backend that runs it."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from dlc_airflow.jobtypes import JOB_TYPES, JobType
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.spec import DLCJob


class LocalBackend:
    name: ClassVar[str] = "local"
    job_types: ClassVar[frozenset[JobType]] = frozenset(JOB_TYPES) - {JobType.slurm}

    def check(self, job: DLCJob) -> None:
        """Every spec the parser accepts runs locally, but a slurm batch script."""
        if job.type not in self.job_types:
            from dlc_airflow.errors import unsupported_type

            raise unsupported_type(job.type.value, self.name, "a batch script needs a Slurm cluster")

    def preview(self, job: DLCJob, name: str) -> list[JSONObject]:
        """What `dlc-airflow render` prints: the processes the supervisor would start (command,
        working directory, the env the wiring sets; secret values as placeholders), and the
        hostfile, in the default job root."""
        from dlc_airflow.local.jobs import default_root
        from dlc_airflow.local.plan import plan_replicas
        from dlc_airflow.secrets.resolve import HIDDEN, entries, with_values
        from dlc_airflow.spec.envsource import SecretKeyRef, describe

        self.check(job)
        hidden: dict[str, dict[str, str]] = {}
        for entry in entries(job):
            if entry.hidden() or isinstance(entry.value, SecretKeyRef):
                shown = describe(entry.value) if not isinstance(entry.value, str) else HIDDEN
                hidden.setdefault(entry.where, {})[entry.name] = shown
        plan = plan_replicas(with_values(job, hidden), name, Path(default_root()) / name)
        docs: list[JSONObject] = [{"replica": r.key, "command": r.argv, "cwd": str(r.cwd), "env": r.env,
                                       **({"health_check": r.health_argv} if r.health_argv else {})}
                                      for r in plan.replicas]
        if plan.hostfile is not None:
            docs.append({"hostfile": plan.hostfile, "path": str(plan.hostfile_path)})
        return docs
