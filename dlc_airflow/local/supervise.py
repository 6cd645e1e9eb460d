"""What the local supervisor does (see dlc_airflow.local.supervisor for the whole story).

The supervising loop: processes, signals, state.json. What each replica runs comes from
dlc_airflow.local.plan, what happens when one ends (and when the job has succeeded) from
dlc_airflow.local.policy; both are pure.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from dlc_airflow import jobfolder, reasons
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.local import jobdir as layout
from dlc_airflow.local import policy, procs
from dlc_airflow.local.plan import PlannedReplica, plan_replicas
from dlc_airflow.local.policy import Action
from dlc_airflow.local.volumes import map_mounts
from dlc_airflow.secrets.mask import redactor
from dlc_airflow.secrets.resolve import HIDDEN, entries, with_values
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts, parse_time

POLL_SECONDS = 0.02  # a finished job shows in state.json within a few polls
DEFAULT_GRACE = 10.0
LOG_TAIL_LINES = 10


def grace_seconds() -> float:
    try:
        return float(os.environ.get("DLC_LOCAL_GRACE_SECONDS", DEFAULT_GRACE))
    except ValueError:
        return DEFAULT_GRACE


def now() -> datetime:
    return datetime.now(UTC)


def exit_code(returncode: int) -> int:
    """A container-style exit code: killed by signal N is 128+N."""
    return 128 - returncode if returncode < 0 else returncode


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
    """A planned replica (dlc_airflow.local.plan) and what became of it."""

    plan: PlannedReplica
    phase: str = "pending"  # pending, health, running, backoff, succeeded, failed, stopped
    proc: subprocess.Popen[bytes] | None = None
    started_at: int | None = None  # kernel start time of proc
    restarts: int = 0
    failures: int = 0
    last_exit: int | None = None
    restart_at: float = 0.0
    began: datetime | None = None  # wall clock, for the report's timeline: this run of it...
    ended: datetime | None = None  # ...and its end
    copier: threading.Thread | None = None  # copies its output into the log, secrets masked

    @property
    def role(self) -> str:
        return self.plan.role

    @property
    def index(self) -> int:
        return self.plan.index

    @property
    def argv(self) -> list[str]:
        return self.plan.argv

    @property
    def env(self) -> dict[str, str]:
        return self.plan.env

    @property
    def cwd(self) -> Path:
        return self.plan.cwd

    @property
    def log(self) -> Path:
        return self.plan.log

    @property
    def health_argv(self) -> list[str] | None:
        return self.plan.health_argv

    @property
    def key(self) -> str:
        return self.plan.key

    @property
    def active(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class JobFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class Supervisor:
    def __init__(self, jobdir: Path, stop_signal: list[int], handed: JSONObject | None = None) -> None:
        self.jobdir = jobdir
        # the job's secret env values, from JobFolders.submit through our stdin (never on disk)
        self.handed: dict[str, dict[str, str]] = dict((handed or {}).get("env") or {})
        self.redact: Callable[[bytes], bytes] | None = redactor((handed or {}).get("mask") or [])
        self.root = jobdir.parent
        self.name = jobdir.name
        self.stop_signal = stop_signal
        self.replicas: list[Replica] = []
        self.roles: dict[str, int] = {}
        self.state = JobState.PENDING
        self.reason = ""
        self.message = ""
        previous = jobfolder.read_json(jobdir / layout.STATE, {}) or {}
        self.created: datetime = parse_time(previous.get("created")) or now()
        self.started: datetime | None = None
        self.finished: datetime | None = None
        self.previous_state = previous.get("state")
        self._last_written: JSONObject | None = None
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
                "began": r.began.isoformat() if r.began else None,
                "ended": r.ended.isoformat() if r.ended else None,
            }
            for r in self.replicas
        }
        if data != self._last_written:
            jobfolder.write_json(self.jobdir / layout.STATE, data)
            self._last_written = data

    def note(self, replica: Replica, text: str) -> None:
        """A line of ours in the replica's log, so the task log tells what happened."""
        with open(replica.log, "ab") as handle:
            handle.write(f"[dlc-airflow] {text}\n".encode())

    # -- setup ------------------------------------------------------------------------
    def load(self) -> DLCJob:
        data = jobfolder.read_json(self.jobdir / jobfolder.SPEC)
        if data is None:
            raise JobFailed(policy.INVALID_SPEC, f"{self.jobdir / jobfolder.SPEC} is missing")
        job = DLCJob.model_validate(data)
        missing = [e.field for e in entries(job)
                   if (not isinstance(e.value, str) or e.value == HIDDEN) and e.name not in self.handed.get(e.where, {})]
        if missing:
            raise JobFailed(policy.INVALID_SPEC, f"{', '.join(missing)}: the value was not handed to the supervisor "
                            "(it is read when the job is submitted): submit the job again")
        return with_values(job, self.handed)

    def prepare(self, job: DLCJob) -> None:
        mounts = map_mounts(job, self.root, self.jobdir)
        if job.code is not None:
            self.clone(job)
        ports = PortPool()
        try:
            plan = plan_replicas(job, self.name, self.jobdir, ports.port, mounts=mounts, environ=os.environ)
        finally:
            ports.release()
        if plan.hostfile is not None and plan.hostfile_path is not None:
            plan.hostfile_path.write_text(plan.hostfile)
        plan.cwd.mkdir(parents=True, exist_ok=True)
        self.roles = dict(plan.roles)
        self.replicas = [Replica(planned) for planned in plan.replicas]

    def clone(self, job: DLCJob) -> None:
        code = job.code
        assert code is not None
        target = self.jobdir / layout.CODE
        log = self.jobdir / layout.SUPERVISOR_LOG
        steps = [
            ["git", "clone", "--quiet", "--no-checkout", code.repo, str(target)],
            ["git", "-C", str(target), "checkout", "--quiet", code.revision],
        ]
        for argv in steps:
            try:
                with open(log, "ab") as out:
                    done = subprocess.run(argv, check=False, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise JobFailed(policy.CODE_SOURCE_FAILED, f"code source {code.repo}: {exc}") from None
            if done.returncode != 0:
                raise JobFailed(
                    policy.CODE_SOURCE_FAILED,
                    f"code source {code.repo}@{code.revision}: `{' '.join(argv[:3])}` exited "
                    f"{done.returncode}:\n{log_tail(log)}",
                )

    # -- processes --------------------------------------------------------------------
    def spawn(self, replica: Replica, argv: list[str]) -> None:
        with open(replica.log, "ab") as out:  # the child keeps its own copy
            try:
                replica.proc = subprocess.Popen(
                    argv,
                    env=replica.env,
                    cwd=replica.cwd,
                    stdin=subprocess.DEVNULL,
                    # with secret values: through us, who mask them on the way to the log
                    stdout=out if self.redact is None else subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stop kills what it spawned
                    close_fds=True,
                )
            except OSError as exc:
                out.write(f"[dlc-airflow] cannot start {argv[0]!r}: {exc}\n".encode())
                raise JobFailed(
                    policy.START_ERROR,
                    f"{replica.key}: cannot start {argv[0]!r}: {exc.strerror or exc} "
                    f"(cwd {replica.cwd})",
                ) from None
        replica.started_at = procs.start_time(replica.proc.pid)
        if self.redact is not None and replica.proc.stdout is not None:
            replica.copier = threading.Thread(target=self._copy_masked, args=(replica.proc.stdout, replica.log),
                                              daemon=True, name=f"log-{replica.key}")
            replica.copier.start()

    def _copy_masked(self, source: IO[bytes], log: Path) -> None:
        assert self.redact is not None
        with source, open(log, "ab", buffering=0) as out:
            for line in iter(source.readline, b""):
                out.write(self.redact(line))

    def drain(self, replica: Replica, timeout: float = 5.0) -> None:
        """Wait for the masked copy of an ended process's output to reach its log."""
        if replica.copier is not None:
            replica.copier.join(timeout)

    def start(self, replica: Replica) -> None:
        if replica.health_argv is not None and replica.phase == "pending":
            replica.phase = "health"
            self.spawn(replica, replica.health_argv)
        else:
            replica.phase = "running"
            replica.began, replica.ended = now(), None
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
        """A replica's process ended: go on as dlc_airflow.local.policy decides."""
        assert replica.proc is not None
        code = exit_code(replica.proc.returncode)
        replica.last_exit = code
        replica.ended = now()
        # Like a container: when the main process ends, whatever it left behind goes too.
        procs.signal_group(replica.proc.pid, signal.SIGKILL)
        self.drain(replica)  # its last lines are in the log before anything reads its tail
        if replica.phase == "health":
            checked = policy.after_health_check(code)
            if checked.action is Action.SUCCEED:
                self.start(replica)
                return
            replica.phase = "failed"
            replica.failures += 1
            raise JobFailed(checked.reason, self.failure_message(replica, code, "health check"))
        decision = policy.after_exit(job.fault_tolerance, code, replica.restarts)
        if decision.action is Action.SUCCEED:
            replica.phase = "succeeded"
            return
        replica.failures += 1
        if decision.action is Action.RESTART:
            if decision.counted:
                replica.restarts += 1
            replica.phase = "backoff"
            replica.restart_at = time.monotonic() + decision.delay
            self.state = JobState.RESTARTING
            self.message = f"{replica.key} exited with code {code}; {decision.why}"
            self.note(replica, f"exited with code {code}; {decision.why} in {decision.delay:.1f}s")
            return
        replica.phase = "failed"
        self.note(replica, f"exited with code {code}: {decision.why}; the job fails")
        raise JobFailed(decision.reason,
                        self.failure_message(replica, code, "main command") + f"\n({decision.why})")

    def succeeded(self, job: DLCJob) -> bool:
        done = [(r.role, r.index) for r in self.replicas if r.phase == "succeeded"]
        return policy.job_succeeded(job, done, [(r.role, r.index) for r in self.replicas])

    def stop_leftovers(self, job: DLCJob) -> None:
        """The job succeeded without some replicas (TensorFlow: once the chief has, parameter
        servers, evaluators and other workers): stop them, with the grace period. They are
        stopped, not failed."""
        keys = set(policy.leftovers({(r.role, r.index): r.phase for r in self.replicas}))
        leftovers = [r for r in self.replicas if (r.role, r.index) in keys]
        if not leftovers:
            return
        decider = policy.success_decider(job)
        why = f"{decider[0]}-{decider[1]} succeeded" if decider else "every other replica succeeded"
        for replica in leftovers:
            if replica.active:
                self.note(replica, f"stopping: the job succeeded ({why})")
        groups = [r.proc.pid for r in leftovers if r.proc is not None and r.phase in ("health", "running")]
        procs.kill_groups(groups, grace_seconds(), poll=self.reap)
        for replica in leftovers:
            if replica.proc is not None and replica.phase in ("health", "running"):
                try:  # SIGKILLed by now: gone in a moment
                    replica.last_exit = exit_code(replica.proc.wait(timeout=5))
                except subprocess.TimeoutExpired:
                    pass
            replica.phase = "stopped"
            replica.ended = replica.ended or now()

    def poll_replicas(self, job: DLCJob) -> bool:
        """Handle the replicas that ended and restart those due; True once the job has
        succeeded (the replicas after the one that decided it are left to stop_leftovers)."""
        for replica in self.replicas:
            running = replica.proc is not None and replica.phase in ("health", "running")
            if running and replica.proc is not None and replica.proc.poll() is not None:
                self.on_exit(job, replica)
                if replica.phase == "succeeded" and self.succeeded(job):
                    return True
            if replica.phase == "backoff" and time.monotonic() >= replica.restart_at:
                self.start(replica)
        return self.succeeded(job)

    # -- the run ----------------------------------------------------------------------
    def stop_reason(self) -> str:
        request = jobfolder.read_json(self.jobdir / layout.STOP, None) or {}
        return str(request.get("reason") or reasons.STOPPED)

    def stop_grace(self) -> float:
        request = jobfolder.read_json(self.jobdir / layout.STOP, None) or {}
        try:
            return float(request.get("grace", grace_seconds()))
        except (TypeError, ValueError):
            return grace_seconds()

    def stop_requested(self) -> bool:
        return bool(self.stop_signal) or (self.jobdir / layout.STOP).exists()

    def finish(self, state: JobState, reason: str, message: str) -> int:
        for replica in self.replicas:  # every masked line is in its log before the job ends
            self.drain(replica, timeout=2.0)
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
        except BaseException as exc:  # noqa: BLE001 - never leave replicas without a supervisor
            self.kill_all(1.0)
            if isinstance(exc, JobFailed):
                return self.finish(JobState.FAILED, exc.reason, exc.message)
            detail = "".join(traceback.format_exception(exc))[-2000:]
            return self.finish(JobState.FAILED, policy.SUPERVISOR_ERROR, f"the local supervisor failed:\n{detail}")

    def write_identity(self) -> None:
        path = self.jobdir / layout.SUPERVISOR
        if not path.exists():  # the runner writes it too; the same values either way
            jobfolder.write_json(path, {"pid": os.getpid(), "start": procs.start_time(os.getpid())})

    def supervise(self) -> int:
        job = self.load()
        self.write_state()
        self.prepare(job)
        limit = job.max_running_time.total_seconds() if job.max_running_time else None
        deadline = time.monotonic() + limit if limit is not None else None
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
                return self.finish(
                    JobState.FAILED, reasons.DEADLINE_EXCEEDED,
                    f"the job ran longer than max_running_time ({limit:g}s) and was killed",
                )
            try:
                done = self.poll_replicas(job)
            except JobFailed as failed:
                self.kill_all(grace_seconds())
                return self.finish(JobState.FAILED, failed.reason, failed.message)
            if done:
                self.stop_leftovers(job)
                return self.finish(JobState.SUCCEEDED, reasons.COMPLETED, "")
            if self.state == JobState.RESTARTING and not self.backing_off():
                self.state, self.message = JobState.RUNNING, ""
            self.write_state()
            time.sleep(POLL_SECONDS)
