"""What the local supervisor does (see dlc_airflow.local.supervisor for the whole story)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from dlc_airflow import wiring
from dlc_airflow.jobtypes import JobType, ordered_roles
from dlc_airflow.local import jobdir as layout
from dlc_airflow.local import procs
from dlc_airflow.local.volumes import LocalMounts, map_mounts
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts

POLL_SECONDS = 0.02  # a finished job shows in state.json within a few polls
RESTART_BACKOFF = 0.2  # seconds before the first restart, doubling, at most MAX_BACKOFF
MAX_BACKOFF = 5.0
DEFAULT_GRACE = 10.0
LOG_TAIL_LINES = 10

# Inherited variables that only a job's wiring may set: a job submitted from inside another
# job's replica must not see its parent's rank or rendezvous.
_WIRING_NAMES = frozenset(
    {
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
        "MASTER_ADDR", "MASTER_PORT", "TF_CONFIG", "SHARD_INDEX", "SHARD_COUNT",
        "JOB_COMPLETION_INDEX", "WORKER_PORT", "WORKER_ADDRS", "RAY_HEAD_ADDRESS",
        "I_MPI_HYDRA_HOST_FILE", "K_MPI_JOB_ROLE",
    }
)
_WIRING_PREFIXES = ("DLC_", "PET_", "OMPI_MCA_", "TORCHELASTIC_")


def grace_seconds() -> float:
    try:
        return float(os.environ.get("DLC_LOCAL_GRACE_SECONDS", DEFAULT_GRACE))
    except ValueError:
        return DEFAULT_GRACE


def now() -> datetime:
    return datetime.now(timezone.utc)


def exit_code(returncode: int) -> int:
    """A container-style exit code: killed by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def interpreter_path(path: str | None) -> str:
    """PATH with the supervisor's interpreter's folder first, as if its virtualenv were
    activated: `python`, `torchrun` and `dlc-airflow` in a job's command are what the image
    would provide on a cluster, and locally that is the environment Airflow runs in."""
    folder = os.path.dirname(sys.executable)
    parts = [p for p in (path or os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *parts]) if folder else os.pathsep.join(parts)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, limit: int = 4096) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


class PortPool:
    """Free 127.0.0.1 ports, one per (role, index) asked for, held open until release()."""

    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], int] = {}
        self._held: list[socket.socket] = []

    def port(self, role: str, index: int) -> int:
        key = (role, index)
        if key not in self.ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            self._held.append(sock)  # held so the next ask gets a different port
            self.ports[key] = sock.getsockname()[1]
        return self.ports[key]

    def release(self) -> None:
        for sock in self._held:
            sock.close()
        self._held.clear()


@dataclass
class Replica:
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    health_argv: list[str] | None = None
    phase: str = "pending"  # pending, health, running, backoff, succeeded, failed
    proc: subprocess.Popen | None = None
    started_at: int | None = None  # kernel start time of proc
    restarts: int = 0
    failures: int = 0
    last_exit: int | None = None
    restart_at: float = 0.0
    stopped_groups: list[int] = field(default_factory=list)

    @property
    def key(self) -> str:
        return layout.replica_key(self.role, self.index)

    @property
    def active(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class JobFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class Supervisor:
    def __init__(self, jobdir: Path, stop_signal: list[int]) -> None:
        self.jobdir = jobdir
        self.root = jobdir.parent
        self.name = jobdir.name
        self.stop_signal = stop_signal
        self.replicas: list[Replica] = []
        self.roles: dict[str, int] = {}
        self.state = JobState.PENDING
        self.reason = ""
        self.message = ""
        previous = layout.read_json(jobdir / layout.STATE, {}) or {}
        self.created = previous.get("created") or now().isoformat()
        self.started: datetime | None = None
        self.finished: datetime | None = None
        self.previous_state = previous.get("state")
        self._last_written: dict | None = None
        self._logs: dict[str, IO[bytes]] = {}

    # -- state.json -------------------------------------------------------------------
    def status(self) -> JobStatus:
        counts = {}
        for role, replicas in self.roles.items():
            mine = [r for r in self.replicas if r.role == role]
            counts[role] = RoleCounts(
                replicas=replicas,
                active=sum(1 for r in mine if r.active),
                succeeded=sum(1 for r in mine if r.phase == "succeeded"),
                failed=sum(r.failures for r in mine),
            )
        return JobStatus(
            state=self.state,
            reason=self.reason,
            message=self.message,
            roles=counts,
            restarts=sum(r.restarts for r in self.replicas),
            created=self.created,
            started=self.started,
            finished=self.finished,
        )

    def write_state(self) -> None:
        data = self.status().model_dump(mode="json")
        data["supervisor"] = {"pid": os.getpid(), "start": procs.start_time(os.getpid())}
        data["replicas"] = {
            r.key: {
                "pid": r.proc.pid if r.proc else None,
                "start": r.started_at,
                "phase": r.phase,
                "restarts": r.restarts,
                "exit_code": r.last_exit,
            }
            for r in self.replicas
        }
        if data != self._last_written:
            layout.write_json(self.jobdir / layout.STATE, data)
            self._last_written = data

    def note(self, replica: Replica, text: str) -> None:
        """A line of ours in the replica's log, so the task log tells what happened."""
        with open(replica.log, "ab") as handle:
            handle.write(f"[dlc-airflow] {text}\n".encode())

    # -- setup ------------------------------------------------------------------------
    def load(self) -> DLCJob:
        data = layout.read_json(self.jobdir / layout.SPEC)
        if data is None:
            raise JobFailed("InvalidSpec", f"{self.jobdir / layout.SPEC} is missing")
        return DLCJob.model_validate(data)

    def prepare(self, job: DLCJob) -> None:
        mounts = map_mounts(job, self.root, self.jobdir)
        if job.code is not None:
            self.clone(job)
        ports = PortPool()
        addr = wiring.Addressing(host=lambda role, index: "127.0.0.1", port=ports.port)
        hostfile = self.jobdir / layout.HOSTFILE
        needs_hostfile = job.type == JobType.mpi or job.launcher == "mpi"
        if needs_hostfile:
            hostfile.write_text(wiring.hostfile(job, addr, job.slots_per_worker))
        cwd = self.working_dir(job, mounts)
        inherited = {
            k: v for k, v in os.environ.items()
            if k not in _WIRING_NAMES and not k.startswith(_WIRING_PREFIXES)
        }
        inherited["PATH"] = interpreter_path(inherited.get("PATH"))
        # Ray: only the head runs locally (ray.init() starts the local cluster).
        roles = ["head"] if job.type == JobType.ray else ordered_roles(job.roles)
        for role in roles:
            count = job.roles[role].replicas
            self.roles[role] = count
            for index in range(count):
                env = dict(inherited)
                env.update(self.replica_env(job, role, index, addr, mounts))
                env["JOB_COMPLETION_INDEX"] = str(index)
                key = layout.replica_key(role, index)
                env["DLC_OUTPUT_FILE"] = str(self.jobdir / layout.OUTPUTS / f"{key}.json")
                if needs_hostfile:
                    for name, value in env.items():
                        if value in (wiring.MPI_HOSTFILE, wiring.DEEPSPEED_HOSTFILE):
                            env[name] = str(hostfile)
                health = mounts.rewrite_all(job.health_check.command) if job.health_check else None
                self.replicas.append(
                    Replica(
                        role=role,
                        index=index,
                        argv=mounts.rewrite_all(job.role_command(role)),
                        env=env,
                        cwd=cwd,
                        log=self.jobdir / layout.LOGS / f"{key}.log",
                        health_argv=health,
                    )
                )
        ports.release()

    def replica_env(self, job: DLCJob, role: str, index: int, addr: wiring.Addressing,
                    mounts: LocalMounts) -> dict[str, str]:
        env = wiring.replica_env(job, self.name, role, index, addr)
        # A file:// checkpoint root is a local path already: it and its env stay as written.
        keep = set()
        if job.checkpoint is not None and job.checkpoint.uri.startswith("file://"):
            keep = {"DLC_CHECKPOINT_URI", "DLC_CHECKPOINT_DIR", "DLC_RESUME_FROM"}
        return {k: (v if k in keep else mounts.rewrite(v)) for k, v in env.items()}

    def working_dir(self, job: DLCJob, mounts: LocalMounts) -> Path:
        if not job.working_dir:
            return self.jobdir
        mapped = mounts.rewrite(job.working_dir)
        if mapped != job.working_dir:
            Path(mapped).mkdir(parents=True, exist_ok=True)
            return Path(mapped)
        if Path(job.working_dir).is_dir():
            return Path(job.working_dir)
        return self.jobdir  # a path inside the image only: the job folder stands in

    def clone(self, job: DLCJob) -> None:
        code = job.code
        target = self.jobdir / layout.CODE
        log = self.jobdir / layout.SUPERVISOR_LOG
        steps = [
            ["git", "clone", "--quiet", "--no-checkout", code.repo, str(target)],
            ["git", "-C", str(target), "checkout", "--quiet", code.revision],
        ]
        for argv in steps:
            try:
                with open(log, "ab") as out:
                    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise JobFailed("CodeSourceFailed", f"code source {code.repo}: {exc}") from None
            if done.returncode != 0:
                raise JobFailed(
                    "CodeSourceFailed",
                    f"code source {code.repo}@{code.revision}: `{' '.join(argv[:3])}` exited "
                    f"{done.returncode}:\n{log_tail(log)}",
                )

    # -- processes --------------------------------------------------------------------
    def spawn(self, replica: Replica, argv: list[str]) -> None:
        out = open(replica.log, "ab")
        try:
            replica.proc = subprocess.Popen(
                argv,
                env=replica.env,
                cwd=replica.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop kills what it spawned
                close_fds=True,
            )
        except OSError as exc:
            out.write(f"[dlc-airflow] cannot start {argv[0]!r}: {exc}\n".encode())
            out.close()
            raise JobFailed(
                "StartError",
                f"{replica.key}: cannot start {argv[0]!r}: {exc.strerror or exc} "
                f"(cwd {replica.cwd})",
            ) from None
        out.close()  # the child has its own copy
        replica.started_at = procs.start_time(replica.proc.pid)

    def start(self, replica: Replica) -> None:
        if replica.health_argv is not None and replica.phase == "pending":
            replica.phase = "health"
            self.spawn(replica, replica.health_argv)
        else:
            replica.phase = "running"
            self.spawn(replica, replica.argv)
            if self.started is None:
                self.started = now()
            if self.state in (JobState.PENDING, JobState.RESTARTING):
                self.state = JobState.RUNNING if not self.backing_off() else JobState.RESTARTING
                self.message = ""

    def backing_off(self) -> bool:
        return any(r.phase == "backoff" for r in self.replicas)

    def groups(self) -> list[int]:
        return [r.proc.pid for r in self.replicas if r.proc is not None]

    def reap(self) -> None:
        for replica in self.replicas:
            if replica.proc is not None:
                replica.proc.poll()

    def kill_all(self, grace: float) -> None:
        procs.kill_groups(self.groups(), grace, poll=self.reap)

    def failure_message(self, replica: Replica, code: int, what: str) -> str:
        tail = log_tail(replica.log)
        text = f"{replica.key} {what} exited with code {code}"
        return text + (f"; last log lines:\n{tail}" if tail else "")

    def on_exit(self, job: DLCJob, replica: Replica) -> None:
        code = exit_code(replica.proc.returncode)
        replica.last_exit = code
        # Like a container: when the main process ends, whatever it left behind goes too.
        procs.signal_group(replica.proc.pid, signal.SIGKILL)
        if replica.phase == "health":
            if code == 0:
                self.start(replica)
                return
            replica.phase = "failed"
            replica.failures += 1
            raise JobFailed("HealthCheckFailed", self.failure_message(replica, code, "health check"))
        if code == 0:
            replica.phase = "succeeded"
            return
        replica.failures += 1
        policy = job.fault_tolerance
        retryable = not policy.retryable_exit_codes or code in policy.retryable_exit_codes
        if retryable and replica.restarts < policy.max_restarts:
            replica.restarts += 1
            replica.phase = "backoff"
            delay = min(MAX_BACKOFF, RESTART_BACKOFF * 2 ** (replica.restarts - 1))
            replica.restart_at = time.monotonic() + delay
            self.state = JobState.RESTARTING
            self.message = f"{replica.key} exited with code {code}; restart {replica.restarts} of {policy.max_restarts}"
            self.note(replica, f"exited with code {code}; restart {replica.restarts} of "
                               f"{policy.max_restarts} in {delay:.1f}s")
            return
        replica.phase = "failed"
        if not retryable:
            reason = "PodFailurePolicy"
            why = f"exit code {code} is not in retryable_exit_codes {policy.retryable_exit_codes}"
        else:
            reason = "BackoffLimitExceeded"
            why = f"restarted {replica.restarts} of max_restarts {policy.max_restarts} times"
        self.note(replica, f"exited with code {code}: {why}; the job fails")
        raise JobFailed(reason, self.failure_message(replica, code, "main command") + f"\n({why})")

    # -- the run ----------------------------------------------------------------------
    def stop_reason(self) -> str:
        request = layout.read_json(self.jobdir / layout.STOP, None) or {}
        return str(request.get("reason") or "Stopped")

    def stop_grace(self) -> float:
        request = layout.read_json(self.jobdir / layout.STOP, None) or {}
        try:
            return float(request.get("grace", grace_seconds()))
        except (TypeError, ValueError):
            return grace_seconds()

    def stop_requested(self) -> bool:
        return bool(self.stop_signal) or (self.jobdir / layout.STOP).exists()

    def finish(self, state: JobState, reason: str, message: str) -> int:
        self.state, self.reason, self.message = state, reason, message
        self.finished = now()
        self.write_state()
        return 0 if state == JobState.SUCCEEDED else 1

    def run(self) -> int:
        if self.previous_state in ("SUCCEEDED", "FAILED", "STOPPED"):
            return 0  # already final (stopped before we got here): nothing to do
        self.write_identity()
        try:
            return self.supervise()
        except BaseException as exc:  # never leave replicas without a supervisor
            self.kill_all(1.0)
            if isinstance(exc, JobFailed):
                return self.finish(JobState.FAILED, exc.reason, exc.message)
            detail = "".join(traceback.format_exception(exc))[-2000:]
            return self.finish(JobState.FAILED, "SupervisorError", f"the local supervisor failed:\n{detail}")

    def write_identity(self) -> None:
        path = self.jobdir / layout.SUPERVISOR
        if not path.exists():  # the runner writes it too; the same values either way
            layout.write_json(path, {"pid": os.getpid(), "start": procs.start_time(os.getpid())})

    def supervise(self) -> int:
        job = self.load()
        self.write_state()
        self.prepare(job)
        deadline = (
            time.monotonic() + job.max_running_time.total_seconds() if job.max_running_time else None
        )
        if self.stop_requested():
            return self.finish(JobState.STOPPED, self.stop_reason(), "stopped before it started")
        for replica in self.replicas:
            self.start(replica)
        self.write_state()
        while True:
            if self.stop_requested():
                reason = self.stop_reason()
                for replica in self.replicas:
                    if replica.active:
                        self.note(replica, f"stopping ({reason})")
                self.kill_all(self.stop_grace())
                return self.finish(JobState.STOPPED, reason, f"stopped: {reason}")
            if deadline is not None and time.monotonic() >= deadline:
                self.kill_all(grace_seconds())
                limit = job.max_running_time.total_seconds()
                return self.finish(
                    JobState.FAILED, "DeadlineExceeded",
                    f"the job ran longer than max_running_time ({limit:g}s) and was killed",
                )
            try:
                for replica in self.replicas:
                    if replica.proc is not None and replica.phase in ("health", "running"):
                        if replica.proc.poll() is not None:
                            self.on_exit(job, replica)
                    if replica.phase == "backoff" and time.monotonic() >= replica.restart_at:
                        self.start(replica)
            except JobFailed as failed:
                self.kill_all(grace_seconds())
                return self.finish(JobState.FAILED, failed.reason, failed.message)
            if all(r.phase == "succeeded" for r in self.replicas):
                return self.finish(JobState.SUCCEEDED, "Completed", "")
            if self.state == JobState.RESTARTING and not self.backing_off():
                self.state, self.message = JobState.RUNNING, ""
            self.write_state()
            time.sleep(POLL_SECONDS)
