"""JobFolders: the local backend's jobs by name, as folders and their supervisors (what a
client is to the other backends' runners; the runner contract is local/runner.py's).

A local job is a folder (see dlc_airflow.local.jobdir) and a detached supervisor process
(dlc_airflow.local.supervisor). Everything here works from the folder alone, so any
process - the task that submitted the job, its retry, the triggerer - can adopt, watch or
stop it.

Every process that watches a job must share the host and PID namespace of its supervisor
(liveness is checked by pid and start time): one machine, or containers that share a PID
namespace, as the triggerer and scheduler do in docker/compose.yaml.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dlc_airflow import jobfolder, reasons
from dlc_airflow.errors import OwnershipError
from dlc_airflow.jsonvalue import JSONDict, JSONObject
from dlc_airflow.local import jobdir as layout
from dlc_airflow.local import procs
from dlc_airflow.local.secrets import local_values
from dlc_airflow.naming import LABEL_TASK_KEY, LABEL_TRY
from dlc_airflow.runner import LogLine, LogPositions, Outputs
from dlc_airflow.secrets.mask import maskable
from dlc_airflow.spec import DLCJob, parse_job
from dlc_airflow.specpack import stored
from dlc_airflow.status import JobState, JobStatus

__all__ = ["JobFolders", "LocalJobError", "default_root"]

# A job folder whose supervisor never announced itself is given up after this long.
SUPERVISOR_START_TIMEOUT = 30.0
# Made (exclusively) just before the supervisor is started: a job folder without it was
# left by a submit cut short, and the next submit of the same task starts its supervisor.
SUPERVISOR_STARTED = "supervisor.started"
CLAIM = "claim.json"  # the newest task try that submitted or adopted the job
CLAIM_LOCK = "claim.lock"  # held while a try claims the job, or checks its claim and stops it
UID = "uid"  # a unique id per job folder (as Kubernetes objects have)
# reasons only the local backend has (the shared ones are in dlc_airflow.reasons)
SUPERVISOR_START_FAILED = "SupervisorStartFailed"
SUPERVISOR_LOST = "SupervisorLost"


class LocalJobError(RuntimeError):
    """A local job that cannot be submitted or found; the message says which and why."""



class LocalOwnershipError(LocalJobError, OwnershipError):
    """A job folder of that name belongs to another task instance."""


def default_root() -> Path:
    """$DLC_LOCAL_ROOT, else $AIRFLOW_HOME/dlc-local-jobs, else ~/.cache/dlc-airflow/local-jobs."""
    if os.environ.get("DLC_LOCAL_ROOT"):
        return Path(os.environ["DLC_LOCAL_ROOT"]).expanduser()
    if os.environ.get("AIRFLOW_HOME"):
        return Path(os.environ["AIRFLOW_HOME"]).expanduser() / "dlc-local-jobs"
    return Path.home() / ".cache" / "dlc-airflow" / "local-jobs"


def _now() -> datetime:
    return datetime.now(UTC)


class JobFolders:
    """Runs DLC jobs as local processes, with the env the cluster backends inject."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        # how long stop() gives replicas between SIGTERM and SIGKILL
        try:
            self.grace_seconds = float(os.environ.get("DLC_LOCAL_GRACE_SECONDS", "10"))
        except ValueError:
            self.grace_seconds = 10.0
        # the interpreter that runs supervisors (replicas run their own command)
        self.python = sys.executable
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths ------------------------------------------------------------------------
    def _dir(self, name: str) -> Path:
        layout.check_name(name)
        return self.root / name

    def _state(self, path: Path) -> JSONObject:
        return jobfolder.read_json(path / layout.STATE, {}) or {}

    # -- submit -----------------------------------------------------------------------
    def submit(self, job: DLCJob, name: str, labels: dict[str, str],
               annotations: dict[str, str] | None = None) -> bool:
        """Create and start job `name`; False if this task's job of that name exists (adopt).

        Raises LocalJobError if `name` belongs to another task (labels dlc-airflow/task-key),
        or if the supervisor cannot start (the job is then FAILED, never half-submitted).
        """
        job = parse_job(job, source=f"local job {name}")
        jobdir = self._dir(name)
        if jobdir.exists():
            return self._adopt(name, labels, job)
        # Secret values are read before the folder exists: a missing one leaves nothing behind.
        handed = self._handed(job)
        self.root.mkdir(parents=True, exist_ok=True)
        # Build the whole folder under a temporary name, then rename it into place: the
        # rename is atomic and fails if the name exists, so of two racing submits exactly
        # one creates the job and no reader ever sees a folder without its labels.
        staging = self.root / f".staging-{name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            (staging / jobfolder.LOGS).mkdir()
            (staging / jobfolder.OUTPUTS).mkdir()
            jobfolder.write_json(staging / jobfolder.SPEC, stored(job))  # references, no secret values
            jobfolder.write_json(staging / layout.LABELS, dict(labels))
            jobfolder.write_json(staging / layout.ANNOTATIONS, dict(annotations or {}))
            (staging / UID).write_text(str(uuid.uuid4()))
            jobfolder.write_json(
                staging / layout.STATE,
                JobStatus(state=JobState.PENDING, created=_now()).model_dump(mode="json"),
            )
            try:
                os.rename(staging, jobdir)
            except OSError:
                if jobdir.exists():
                    return self._adopt(name, labels, job)
                raise
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        self._start_supervisor(name, jobdir, handed)
        return True

    def _handed(self, job: DLCJob) -> bytes | None:
        """What the supervisor gets on its stdin, never on disk: the job's secret env values
        (Airflow sources, local stand-ins of Secrets, secret literals) and what to mask."""
        values = local_values(job, self.root)
        if not values:
            return None
        return json.dumps({"env": values, "mask": maskable(v for d in values.values() for v in d.values())}).encode()

    def _adopt(self, name: str, labels: dict[str, str], job: DLCJob | None = None) -> bool:
        """This task's job of that name exists: keep it, and start its supervisor if the
        submit that made the folder was cut short before it did (True: started now)."""
        jobdir = self.root / name
        existing = jobfolder.read_json(jobdir / layout.LABELS, {}) or {}
        mine, theirs = labels.get(LABEL_TASK_KEY), existing.get(LABEL_TASK_KEY)
        if mine != theirs:
            raise LocalOwnershipError(
                f"local job {name} under {self.root} belongs to task key {theirs!r}, not {mine!r}: "
                f"use another job name, or delete the old job (dlc-airflow jobs delete)"
            )
        if not (jobdir / SUPERVISOR_STARTED).exists() and not self.status(name).terminal:
            return self._start_supervisor(name, jobdir, self._handed(job) if job is not None else None)
        return False

    def uid(self, name: str) -> str:
        """The job folder's unique id ('' when there is no such job)."""
        try:
            return (self._dir(name) / UID).read_text().strip()
        except OSError:
            return ""

    def claim(self, name: str, try_number: int) -> None:
        """Record that task try `try_number` now owns job `name`."""
        with self._claim_lock(name):
            jobfolder.write_json(self._dir(name) / CLAIM, {"try": int(try_number)})

    def stop_unless_claimed(self, name: str, try_number: int) -> tuple[bool, int | None]:
        """stop(), unless a try newer than `try_number` claimed the job: the check and the stop
        hold the claim's lock, so a claim cannot land in between."""
        with self._claim_lock(name):
            owner = self.owner_try(name)
            if owner is not None and owner > try_number:
                return False, owner
            self.stop(name)
            return True, owner

    @contextmanager
    def _claim_lock(self, name: str) -> Iterator[None]:
        """An exclusive lock on the job's claim (a lock file in its folder; none if it is gone)."""
        try:
            fd = os.open(self._dir(name) / CLAIM_LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        except FileNotFoundError:  # no such job folder: nothing to guard
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def owner_try(self, name: str) -> int | None:
        """The newest task try that made or adopted job `name` (None: no such job)."""
        jobdir = self._dir(name)
        labels = jobfolder.read_json(jobdir / layout.LABELS, None)
        if labels is None:
            return None
        claim = jobfolder.read_json(jobdir / CLAIM, {}) or {}
        tries = [int(str(v)) for v in (labels.get(LABEL_TRY), claim.get("try")) if str(v or "").isdigit()]
        return max(tries) if tries else None

    def _start_supervisor(self, name: str, jobdir: Path, handed: bytes | None = None) -> bool:
        """Start the job's supervisor unless one was started already (False then); `handed`
        goes to its stdin (a pipe: the values never touch the disk)."""
        try:
            os.close(os.open(jobdir / SUPERVISOR_STARTED, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return False
        argv = [self.python, "-m", "dlc_airflow.local.supervisor", str(jobdir)]
        try:
            with open(jobdir / layout.SUPERVISOR_LOG, "ab") as log:
                proc = subprocess.Popen(
                    argv,
                    cwd=jobdir,
                    stdin=subprocess.PIPE if handed else subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # detached: survives the task process and its signals
                    close_fds=True,
                )
            if handed and proc.stdin is not None:
                try:  # it reads its stdin first thing; one that died is reported as SupervisorLost
                    proc.stdin.write(handed)
                    proc.stdin.close()
                except OSError:
                    pass
        except OSError as exc:
            message = f"cannot start the local supervisor ({argv[0]}): {exc.strerror or exc}"
            self._write_final(jobdir, JobState.FAILED, SUPERVISOR_START_FAILED, message)
            raise LocalJobError(f"local job {name}: {message}") from None
        self._children[name] = proc
        identity = jobdir / layout.SUPERVISOR
        if not identity.exists():
            jobfolder.write_json(identity, {"pid": proc.pid, "start": procs.start_time(proc.pid)})
        return True

    # -- reading ----------------------------------------------------------------------
    def find(self, selector: dict[str, str]) -> list[str]:
        """Names of the jobs whose labels contain `selector`, oldest first."""
        if not self.root.is_dir():
            return []
        found = []
        for entry in os.scandir(self.root):
            if entry.name.startswith(".") or entry.name == "volumes" or not entry.is_dir():
                continue
            path = Path(entry.path)
            labels = jobfolder.read_json(path / layout.LABELS, None)
            if labels is None:
                continue
            if all(labels.get(k) == v for k, v in selector.items()):
                created = self._state(path).get("created") or ""
                found.append((created, entry.name))
        return [name for _created, name in sorted(found)]

    def annotations(self, name: str) -> dict[str, str]:
        """The unabridged task ids (labels are cut to fit, as on Kubernetes); {} for older jobs."""
        return jobfolder.read_json(self._dir(name) / layout.ANNOTATIONS, {}) or {}

    def spec(self, name: str) -> JSONDict | None:
        """spec.json: the spec with secret sources as references and secret literals hidden."""
        return jobfolder.read_spec(self._dir(name))

    def replica_states(self, name: str) -> dict[str, JSONObject]:
        """The supervisor's record of each replica (state.json), by `<role>-<index>`."""
        return dict(self._state(self._dir(name)).get("replicas") or {})

    def labels(self, name: str) -> dict[str, str]:
        labels = jobfolder.read_json(self._dir(name) / layout.LABELS, None)
        if labels is None:
            raise LocalJobError(f"no local job {name} under {self.root}")
        return {str(k): str(v) for k, v in labels.items()}

    def status(self, name: str) -> JobStatus:
        """The job's status; STOPPED/NotFound when there is no such job.

        A supervisor that died without writing a final state makes the job FAILED
        (SupervisorLost): its replicas are killed and that state is written for good.
        """
        jobdir = self._dir(name)
        if not jobdir.is_dir():
            return JobStatus(state=JobState.STOPPED, reason=reasons.NOT_FOUND,
                             message=f"no local job {name} under {self.root}")
        child = self._children.get(name)
        if child is not None and child.poll() is not None:
            self._children.pop(name, None)  # reaped: no zombie left behind
        data = self._state(jobdir)
        status = JobStatus.model_validate(data) if data else JobStatus(state=JobState.PENDING)
        if status.terminal:
            return status
        lost = self._supervisor_lost(jobdir, status)
        if lost is None:
            return status
        # It may have written its final state just before exiting: look once more.
        data = self._state(jobdir)
        status = JobStatus.model_validate(data)
        if status.terminal:
            return status
        self._kill_replicas(data, grace=0.0)
        return self._write_final(jobdir, JobState.FAILED, SUPERVISOR_LOST, lost)

    def _supervisor_lost(self, jobdir: Path, status: JobStatus) -> str | None:
        """Why the supervisor is gone, or None while it runs (or is still starting)."""
        identity = jobfolder.read_json(jobdir / layout.SUPERVISOR, None)
        if identity is None:
            created = status.created or _now()
            if _now() - created < timedelta(seconds=SUPERVISOR_START_TIMEOUT):
                return None
            return (f"the supervisor of local job {jobdir.name} never started "
                    f"(see {jobdir / layout.SUPERVISOR_LOG})")
        if procs.alive(identity.get("pid"), identity.get("start")):
            return None
        from dlc_airflow.local.supervise import log_tail

        tail = log_tail(jobdir / layout.SUPERVISOR_LOG)
        return (f"the supervisor (pid {identity.get('pid')}) of local job {jobdir.name} died without "
                f"writing a final state; its replicas were killed"
                + (f"; {layout.SUPERVISOR_LOG}:\n{tail}" if tail else ""))

    def _kill_replicas(self, state: JSONObject, grace: float) -> None:
        groups = [
            info["pid"]
            for info in (state.get("replicas") or {}).values()
            if info.get("pid") and procs.alive(info["pid"], info.get("start"))
        ]
        procs.kill_groups(groups, grace)

    def _write_final(self, jobdir: Path, state: JobState, reason: str, message: str) -> JobStatus:
        data = self._state(jobdir)
        previous = JobStatus.model_validate(data) if data else JobStatus(state=JobState.PENDING)
        final = previous.model_copy(update={
            "state": state, "reason": reason, "message": message, "finished": _now(),
        })
        for counts in final.roles.values():
            counts.active = 0
        out = final.model_dump(mode="json")
        out["replicas"] = data.get("replicas", {})
        jobfolder.write_json(jobdir / layout.STATE, out)
        return final

    # -- stop / delete ----------------------------------------------------------------
    def stop(self, name: str, reason: str = reasons.STOPPED) -> bool:
        """Kill every replica's process group (SIGTERM, SIGKILL after grace); final STOPPED.

        Idempotent; a job that already ended keeps its final state. True when this call
        stopped it, False when it was gone or had ended already.
        """
        jobdir = self._dir(name)
        if not jobdir.is_dir() or self.status(name).terminal:
            return False
        jobfolder.write_json(jobdir / layout.STOP, {"reason": reason, "grace": self.grace_seconds})
        identity = jobfolder.read_json(jobdir / layout.SUPERVISOR, None) or {}
        pid, started = int(identity.get("pid") or 0), identity.get("start")
        if pid and procs.alive(pid, started):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + self.grace_seconds + 5.0
            while time.monotonic() < deadline:
                child = self._children.get(name)
                if child is not None:
                    child.poll()
                if JobStatus.model_validate(self._state(jobdir)).terminal:
                    return True  # the supervisor wrote STOPPED
                if not procs.alive(pid, started):
                    break
                time.sleep(0.02)
            if procs.alive(pid, started):  # hung: take over
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        data = self._state(jobdir)
        if JobStatus.model_validate(data).terminal:
            return True  # the supervisor wrote STOPPED as it went
        self._kill_replicas(data, grace=self.grace_seconds)
        self._write_final(jobdir, JobState.STOPPED, reason, f"stopped: {reason}")
        return True

    def delete(self, name: str) -> None:
        """Stop the job if it runs, then remove its folder."""
        jobdir = self._dir(name)
        if not jobdir.is_dir():
            return
        self.stop(name, reason=reasons.DELETED)
        # rename first: the name is free at once and no reader sees a half-deleted folder
        trash = self.root / f".deleted-{name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(jobdir, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)
        self._children.pop(name, None)

    # -- logs and outputs -------------------------------------------------------------
    def read_logs(self, name: str, offsets: LogPositions | None = None) -> tuple[list[LogLine], LogPositions]:
        """New log lines since `offsets`, and the offsets to pass next time (jobfolder.read_logs)."""
        jobdir = self._dir(name)
        ended = JobStatus.model_validate(self._state(jobdir) or {"state": "PENDING"}).terminal
        return jobfolder.read_logs(jobdir, offsets, ended, _role_and_index)

    def outputs(self, name: str) -> Outputs:
        """Metrics and outputs the replicas reported; the coordinator's win on conflicts."""
        from dlc_airflow import wiring

        jobdir = self._dir(name)
        spec = jobfolder.read_spec(jobdir)
        lead = layout.replica_key(wiring.coordinator(DLCJob.model_validate(spec)), 0) if spec is not None else None
        return jobfolder.read_outputs(jobdir, lambda key: (key != lead, _role_and_index(key)))


def _role_and_index(key: str) -> tuple[str, int]:
    role, _, index = key.rpartition("-")
    return (role, int(index)) if index.isdigit() else (key, -1)
