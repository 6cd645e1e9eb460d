"""The plan of a local job: what each replica runs, with which env, where. Pure.

    plan = plan_replicas(job, "train-1a2b3c-1", Path("/jobs/train-1a2b3c-1"))
    plan.replicas[0].env["MASTER_ADDR"]   # "127.0.0.1"
    plan.hostfile                        # "127.0.0.1 slots=8\\n..." or None

No process is started and nothing is written: the supervisor (dlc_airflow.local.supervise)
makes the folders, writes `plan.hostfile` to `plan.hostfile_path` and runs the replicas.
Ports come from the caller's allocator (the supervisor's holds free 127.0.0.1 ports; without
one, ports are numbered from DEFAULT_FIRST_PORT), mounts from dlc_airflow.local.volumes.

What a replica gets, in order (later wins):
1. the inherited environment (`environ`, the supervisor's os.environ) minus the variables the
   wiring owns (`wiring.is_wired`): a job started from inside another job's replica must not
   see its parent's rank or rendezvous; PATH with the interpreter's folder first;
2. the wiring every cluster backend injects (`wiring.replica_env`, host 127.0.0.1), mount
   paths rewritten to local folders (a file:// checkpoint root stays as written);
3. JOB_COMPLETION_INDEX and DLC_OUTPUT_FILE=<jobdir>/outputs/<role>-<i>.json;
4. the hostfile path of the spec (`spec.hostfile_spec`) replaced by <jobdir>/hostfile.

Ray jobs run only the head (ray.init() in it starts a local Ray cluster).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dlc_airflow import jobfolder, wiring
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.local import jobdir as layout
from dlc_airflow.local.volumes import LocalMounts, plan_mounts
from dlc_airflow.spec import DLCJob, hostfile_spec

PortOf = Callable[[str, int], int]
DEFAULT_FIRST_PORT = 20000
LOCALHOST = "127.0.0.1"
# A file:// checkpoint root is a local path already: these stay as the wiring wrote them.
_CHECKPOINT_AS_WRITTEN = frozenset({"DLC_CHECKPOINT_URI", "DLC_CHECKPOINT_DIR", "DLC_RESUME_FROM"})


@dataclass(frozen=True)
class PlannedReplica:
    """One local process of the job, before it runs."""

    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path  # stdout+stderr of the health check, then of the main command
    health_argv: list[str] | None = None

    @property
    def key(self) -> str:
        return layout.replica_key(self.role, self.index)


@dataclass(frozen=True)
class Plan:
    replicas: list[PlannedReplica]
    roles: dict[str, int]  # replicas per role, as run locally (Ray: the head only)
    hostfile: str | None  # the MPI / DeepSpeed hostfile's text; None when the job has none
    hostfile_path: Path | None  # where the supervisor writes it (<jobdir>/hostfile)
    slots: int | None  # slots per worker in the hostfile
    cwd: Path  # the working directory of every replica (the supervisor makes it)


class SequentialPorts:
    """A port allocator without sockets: first, first+1, ... one per (role, index) asked for."""

    def __init__(self, first: int = DEFAULT_FIRST_PORT) -> None:
        self.first = first
        self.ports: dict[tuple[str, int], int] = {}

    def __call__(self, role: str, index: int) -> int:
        return self.ports.setdefault((role, index), self.first + len(self.ports))


def interpreter_path(path: str | None) -> str:
    """PATH with the supervisor's interpreter's folder first, as if its virtualenv were
    activated: `python`, `torchrun` and `dlc-airflow` in a job's command are what the image
    would provide on a cluster, and locally that is the environment Airflow runs in."""
    folder = os.path.dirname(sys.executable)
    parts = [p for p in (path or os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *parts]) if folder else os.pathsep.join(parts)


def inherited_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a replica keeps of the supervisor's environment: all but the wiring's variables."""
    env = {k: v for k, v in environ.items() if not wiring.is_wired(k)}
    env["PATH"] = interpreter_path(env.get("PATH"))
    return env


def local_roles(job: DLCJob) -> list[str]:
    """Roles run locally, in rank order. Ray: only the head (ray.init() starts the cluster)."""
    return ["head"] if job.type is JobType.ray else ordered_roles(job.roles)


def working_dir(job: DLCJob, mounts: LocalMounts, jobdir: Path) -> Path:
    """working_dir mapped to its local folder; the job folder when it is only in the image."""
    if not job.working_dir:
        return jobdir
    mapped = mounts.rewrite(job.working_dir)
    if mapped != job.working_dir:
        return Path(mapped)
    if Path(job.working_dir).is_dir():
        return Path(job.working_dir)
    return jobdir  # a path inside the image only: the job folder stands in


def wiring_env(job: DLCJob, name: str, role: str, index: int, addr: wiring.Addressing,
               mounts: LocalMounts) -> dict[str, str]:
    """The cluster backends' env of one replica, mount paths rewritten to local folders."""
    env = wiring.replica_env(job, name, role, index, addr)
    keep: frozenset[str] = frozenset()
    if job.checkpoint is not None and job.checkpoint.uri.startswith("file://"):
        keep = _CHECKPOINT_AS_WRITTEN
    return {k: (v if k in keep else mounts.rewrite(v)) for k, v in env.items()}


def plan_replicas(
    job: DLCJob,
    name: str,
    jobdir: Path,
    port: PortOf | None = None,
    *,
    mounts: LocalMounts | None = None,
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """Every replica of `job` run locally as job `name` in `jobdir`, and its hostfile.

    `port(role, index)` gives the 127.0.0.1 port peers dial replica `index` of `role` on
    (default: SequentialPorts()); `mounts` defaults to volumes.plan_mounts (not created);
    `environ` is the environment replicas inherit (default: none, only the wiring and PATH).
    """
    jobdir = Path(jobdir)
    if mounts is None:
        mounts = plan_mounts(job, jobdir.parent, jobdir)
    addr = wiring.Addressing(host=lambda role, index: LOCALHOST, port=port or SequentialPorts())
    spec = hostfile_spec(job)
    hostfile_path = jobdir / layout.HOSTFILE if spec is not None else None
    hostfile = wiring.hostfile(job, addr, spec.slots) if spec is not None else None
    cwd = working_dir(job, mounts, jobdir)
    base = inherited_env(environ or {})
    health = mounts.rewrite_all(job.health_check.command) if job.health_check else None

    replicas: list[PlannedReplica] = []
    roles: dict[str, int] = {}
    for role in local_roles(job):
        count = job.roles[role].replicas
        roles[role] = count
        argv = mounts.rewrite_all(job.role_command(role))
        for index in range(count):
            key = layout.replica_key(role, index)
            env = dict(base)
            env.update(wiring_env(job, name, role, index, addr, mounts))
            env["JOB_COMPLETION_INDEX"] = str(index)
            env["DLC_OUTPUT_FILE"] = str(jobdir / jobfolder.OUTPUTS / f"{key}.json")
            if spec is not None:
                for var, value in env.items():
                    if value == spec.path:
                        env[var] = str(hostfile_path)
            replicas.append(
                PlannedReplica(
                    role=role,
                    index=index,
                    argv=list(argv),
                    env=env,
                    cwd=cwd,
                    log=jobdir / jobfolder.LOGS / f"{key}.log",
                    health_argv=list(health) if health is not None else None,
                )
            )
    return Plan(
        replicas=replicas,
        roles=roles,
        hostfile=hostfile,
        hostfile_path=hostfile_path,
        slots=spec.slots if spec is not None else None,
        cwd=cwd,
    )
