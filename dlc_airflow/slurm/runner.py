"""SlurmRunner: the slurm backend behind the runner contract (dlc_airflow.runner.JobRunner).

- identity: the job's Slurm name is its deterministic job name, its comment the task's
  identity (backend.comment); `find` and `lookup` list the cluster's jobs and read them;
- submit: adopt this task's job of that name if Slurm has it, refuse another task's
  (OwnershipError), else submit; two submits racing on one name are settled after the fact
  (the newer duplicate is cancelled), so one name never has two live jobs;
- status: GET /job/{id} plus the job folder (replica exit codes, the batch script's result);
  `follow` shares the cluster's poller (poller.py): one job list per interval for every job
  the process waits on; a refused token ends the wait (FAILED, reason Forbidden);
- logs / outputs: read from the job folder under the connection's job_root (which the
  Airflow workers must see too; where they do not, waits still work, without logs);
- stop: scancel (SIGTERM, SIGKILL after Slurm's KillWait), the record and folder stay; delete:
  stop, then remove the folder. Slurm keeps the record of a finished job until MinJobAge.
- capabilities: the stored spec (spec.json in the job folder); no events, nothing to settle
  (srun's step ends with its last task).

The place on this backend is the partition: JobRef.place is the partition the job went to,
and a task's namespace= a default partition (scheduling.queue wins).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from dlc_airflow import jobfolder, reasons
from dlc_airflow.airflow.keys import DEFAULT_CONN_ID as KUBERNETES_DEFAULT
from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONDict, JSONObject
from dlc_airflow.naming import PREFIX, TaskIdentity
from dlc_airflow.polling import Observed, PolledFollower
from dlc_airflow.runner import LogLine, LogPositions, Outputs, Reach, Replica
from dlc_airflow.slurm import backend as layout
from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.backend import Folder, SlurmBackend, Target, parse_comment, replica_order, with_try
from dlc_airflow.slurm.client import SlurmClient, SlurmError
from dlc_airflow.slurm.poller import poller_for
from dlc_airflow.slurm.settings import SlurmSettings
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus

SLURM = "slurm"
DEFAULT_CONN_ID = "slurm_default"
_LIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED", ""})


class SlurmRunner:
    backend_name = SLURM

    def __init__(self, settings: SlurmSettings, client: SlurmClient | None = None,
                 partition: str | None = None) -> None:
        self.settings = settings
        self.rest = client or SlurmClient(settings)  # (not `client`: that name means Kubernetes elsewhere)
        self.backend = SlurmBackend()
        self.target = Target.of(settings)
        if partition:
            self.target = Target(**{**self.target.__dict__, "partition": partition})
        self.place = self.target.partition or "default"

    def __repr__(self) -> str:
        return f"<SlurmRunner {self.settings.url} user={self.settings.user} partition={self.place}>"

    # -- refs --------------------------------------------------------------------------
    def ref(self, job: DLCJob | None, name: str, attempt: int = 1, record: JobRecord | None = None) -> JobRef:
        partition = (record.partition if record is not None and record.partition else None) or \
            (job.scheduling.queue if job is not None and job.scheduling.queue else None) or self.place
        return JobRef(backend=SLURM, place=partition, name=name, attempt=attempt,
                      uid=str(record.job_id) if record is not None else "")

    def _ours(self) -> list[tuple[JobRecord, JSONObject]]:
        out = []
        for record in self._records():
            identity = parse_comment(record.comment)
            if identity is not None:
                out.append((record, identity))
        return out

    def _records(self) -> list[JobRecord]:
        return self.rest.jobs()  # a SlurmError says what failed; `permanent` as a SubmitError's

    def find(self, identity: TaskIdentity, job: DLCJob) -> list[JobRef]:
        by_name: dict[str, list[JobRecord]] = {}
        for record, ident in self._ours():
            if ident.get("task-key") == identity.key:
                by_name.setdefault(record.name, []).append(record)
        refs = []
        for name, records in by_name.items():
            record = _pick(records)
            refs.append(self.ref(job, name, _attempt(parse_comment(record.comment) or {}), record))
        return sorted(refs, key=lambda r: (r.attempt, int(r.uid or 0)))

    def lookup(self, name: str) -> JobRef | None:
        records = [r for r, _ in self._ours() if r.name == name]
        if not records:
            return None
        record = _pick(records)
        return self.ref(None, name, _attempt(parse_comment(record.comment) or {}), record)

    # -- submit ------------------------------------------------------------------------
    def submit(self, job: DLCJob, name: str, identity: TaskIdentity | None, attempt: int) -> tuple[JobRef, bool]:
        from dlc_airflow.errors import BackendError

        key = identity.key if identity is not None else None
        same = [(r, i) for r, i in self._ours() if r.name == name]
        if same:
            mine = [r for r, i in same if i.get("task-key") == key]
            if not mine:
                owner = same[0][1]
                raise OwnershipError(f"Slurm job {name} (id {same[0][0].job_id}) belongs to task "
                                     f"{owner.get('dag-id')}.{owner.get('task-id')} of run {owner.get('run-id')}: "
                                     "not adopting it (give the job another name)")
            return self.ref(job, name, attempt, _pick(mine)), False
        try:
            request = self.backend.render(job, name, identity, attempt, self.target)
        except BackendError as exc:
            raise SubmitError(str(exc), permanent=True) from None
        _make_root(self.target.job_root)
        if layout.ENV_SECRETS in request.environment:  # the values, read now, into the job's 0600 file
            _write_secrets(self.jobdir(name), layout.secrets_text(_secret_values(job)))
        try:
            job_id = self.rest.submit(request)
        except SlurmError as exc:
            raise SubmitError(_explain(exc, job, self.target), permanent=exc.permanent) from None
        record = self._settle_race(name, key, job_id)
        _keep_spec(self.jobdir(name), job)
        return self.ref(job, name, attempt, record), record is not None and record.job_id == job_id

    def _settle_race(self, name: str, key: str | None, job_id: int) -> JobRecord | None:
        """Two tries submitting the same name at once: the oldest live job wins, the others
        are cancelled (each racer sees the same list, so they agree)."""
        try:
            mine = [r for r, i in self._ours() if r.name == name and i.get("task-key") == key]
        except SlurmError:  # the job is in; who won a race can be told on the next look
            return JobRecord(job_id=job_id, name=name, state="PENDING")
        live = sorted((r for r in mine if r.state in _LIVE), key=lambda r: r.job_id)
        for extra in live[1:]:
            self.rest.cancel(extra.job_id)
        if live:
            return live[0]
        return next((r for r in mine if r.job_id == job_id), JobRecord(job_id=job_id, name=name, state="PENDING"))

    # -- status ------------------------------------------------------------------------
    def _record(self, ref: JobRef) -> JobRecord | None:
        if ref.uid:
            return self.rest.job(ref.uid)
        found = self.lookup(ref.name)
        return self.rest.job(found.uid) if found is not None and found.uid else None

    def status(self, ref: JobRef) -> JobStatus:
        return self.status_of(ref, self._record(ref))

    def status_of(self, ref: JobRef, record: JobRecord | None) -> JobStatus:
        status = self.backend.status(record, self.folder(ref.name))
        if status.terminal:  # ended without its batch script's own cleanup (cancelled, timed out)
            self._forget_secrets(ref.name)
        return status

    def _forget_secrets(self, name: str) -> None:
        try:
            (self.jobdir(name) / layout.SECRETS_FILE).unlink(missing_ok=True)
        except OSError:  # a folder this process does not see: the batch script removes it
            pass

    def follow(self, ref: JobRef) -> PolledFollower[int, JobRecord | SlurmError]:
        """Status changes from the cluster's shared poller: one job list per interval for every
        job this process follows."""
        def job_id() -> int | None:
            found = ref if ref.uid else self.lookup(ref.name)
            return int(found.uid) if found is not None and found.uid else None

        def observe(record: JobRecord | SlurmError | None) -> Observed:
            if isinstance(record, SlurmError):  # the token is refused for good: the wait cannot go on
                return JobStatus(state=JobState.FAILED, reason=reasons.FORBIDDEN,
                                 message=f"{record}; job {ref.name} ({ref.uid or 'no id yet'}) may still be "
                                         f"running: the wait cannot follow it without a valid token"), []
            return self.status_of(ref, record), []

        return PolledFollower(lambda: poller_for(self.rest), job_id, observe)

    # -- the job folder ----------------------------------------------------------------
    def jobdir(self, name: str) -> Path:
        return Path(self.target.jobdir(name))

    def folder(self, name: str) -> Folder:
        return read_folder(self.jobdir(name))

    def logs(self, ref: JobRef, since: LogPositions | None = None,
             replicas: Sequence[Replica] | None = None) -> tuple[list[LogLine], LogPositions]:
        jobdir = self.jobdir(ref.name)
        return jobfolder.read_logs(jobdir, since, (jobdir / layout.RESULT).exists(), replica_order)

    def outputs(self, ref: JobRef, replicas: Sequence[Replica] | None = None) -> Outputs:
        return jobfolder.read_outputs(self.jobdir(ref.name), replica_order)

    def stop(self, ref: JobRef) -> int:
        record = self._record(ref)
        if record is None or record.state not in _LIVE:
            return 0
        self.rest.cancel(record.job_id)
        self._forget_secrets(ref.name)
        return 1

    def delete(self, ref: JobRef) -> None:
        self.stop(ref)
        jobdir = self.jobdir(ref.name)
        if jobdir.parent == Path(self.target.job_root) and jobdir.is_dir():
            shutil.rmtree(jobdir, ignore_errors=True)

    # -- for people: the job CLI and the report page -------------------------------------
    def jobs(self, dag_id: str | None = None, task_id: str | None = None,
             run_id: str | None = None) -> list[JobInfo]:
        found = []
        for record, identity in self._ours():
            labels = {PREFIX + k: v for k, v in identity.items() if isinstance(v, str)}
            created = datetime.fromtimestamp(record.submit_time, UTC) if record.submit_time else None
            info = JobInfo.of(self.ref(None, record.name, _attempt(identity), record), labels, created=created)
            if info.matches(dag_id, task_id, run_id):
                found.append(info)
        return sorted(found, key=lambda i: (int(i.ref.uid or 0)))

    # -- the SpecKeeper capability ----------------------------------------------------
    def spec(self, ref: JobRef) -> JSONDict | None:
        return jobfolder.read_spec(self.jobdir(ref.name))

    def replicas(self, ref: JobRef) -> list[Replica]:
        """A task per replica (one per node): the job's times and nodes, each task's exit code."""
        record = self._record(ref)
        if record is None:
            return []
        roles = (parse_comment(record.comment) or {}).get("roles") or {}
        exits = self.folder(ref.name).exits
        started = datetime.fromtimestamp(record.start_time, UTC) if record.start_time else None
        ended = datetime.fromtimestamp(record.end_time, UTC) if record.end_time and record.state not in _LIVE else None
        found = []
        for role, count in roles.items():
            for index in range(int(count)):
                name = f"{role}-{index}"
                code = exits.get(name)
                state = ("Succeeded" if code == 0 else "Failed") if code is not None else \
                    ("Running" if record.state == "RUNNING" else "Pending" if record.state == "PENDING" else record.state.title())
                found.append(Replica(name=name, role=role, index=index, state=state, started=started, finished=ended,
                                     exit_code=code, node=record.nodes, uid=str(record.job_id)))
        return found

    # -- ownership ---------------------------------------------------------------------
    def claim(self, ref: JobRef, try_number: int) -> None:
        record = self._record(ref)
        if record is not None and parse_comment(record.comment) is not None:
            self.rest.set_comment(record.job_id, with_try(record.comment, try_number))

    def owner_try(self, ref: JobRef) -> int | None:
        record = self._record(ref)
        identity = parse_comment(record.comment) if record is not None else None
        value = (identity or {}).get("try")
        return int(value) if isinstance(value, str) and value.isdigit() else None


def _keep_spec(jobdir: Path, job: DLCJob) -> None:
    """spec.json in the job folder, where this process sees it (secrets as references)."""
    from dlc_airflow.specpack import stored

    try:
        jobdir.mkdir(parents=True, exist_ok=True)
        jobfolder.write_json(jobdir / jobfolder.SPEC, stored(job))
    except OSError:  # the folder is the nodes' and not shared with this host: no spec kept
        pass


def read_folder(jobdir: Path) -> Folder:
    """What the job folder says; an empty Folder when this process does not see it."""
    if not jobdir.is_dir():
        return Folder()
    exits: dict[str, int] = {}
    exit_dir = jobdir / layout.EXITS
    if exit_dir.is_dir():
        for path in exit_dir.iterdir():
            try:
                exits[path.name] = int(path.read_text().strip())
            except (OSError, ValueError):
                continue
    result = None
    try:
        result = json.loads((jobdir / layout.RESULT).read_text())
    except (OSError, ValueError):
        pass
    try:
        restarts = int((jobdir / layout.RESTARTS).read_text().strip())
    except (OSError, ValueError):
        restarts = 0
    return Folder(visible=True, exits=exits, result=result if isinstance(result, dict) else None,
                  restarts=restarts, batch_tail=_tail(jobdir / jobfolder.LOGS / f"{layout.BATCH_LOG}.log"))


def _tail(path: Path) -> str:
    """The batch log's last line from Slurm (srun: error: ...), for failure messages."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(path) - 4096))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("[dlc-airflow]")]
    return lines[-1][:300] if lines else ""


def _pick(records: list[JobRecord]) -> JobRecord:
    """Of the records of one name: the oldest live one, else the newest."""
    live = sorted((r for r in records if r.state in _LIVE), key=lambda r: r.job_id)
    return live[0] if live else max(records, key=lambda r: r.job_id)


def _attempt(identity: JSONObject) -> int:
    value = identity.get("attempt")
    return int(value) if isinstance(value, str) and value.isdigit() else 1


def _secret_values(job: DLCJob) -> dict[str, dict[str, str]]:
    """{where: {NAME: value}} of the job's hidden env (Airflow sources read now)."""
    from dlc_airflow.secrets.resolve import hidden_values

    return hidden_values(job)


def _write_secrets(jobdir: Path, text: str) -> None:
    """The job's secrets file, 0600 from its creation, in its folder (made 0700 if new)."""
    try:
        jobdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = jobdir / layout.SECRETS_FILE
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise SubmitError(f"slurm backend: the job's secret env values go into a 0600 file in its folder, which "
                          f"this worker cannot write ({jobdir}: {exc.strerror}): set the connection's job_root to "
                          "a folder the workers and the nodes share", permanent=True) from None


def _make_root(root: str) -> None:
    """The job root, made where this process sees the nodes' file system (a shared folder,
    or the local Slurm); elsewhere the batch script makes the job's folder itself."""
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        pass


def _explain(exc: SlurmError, job: DLCJob, target: Target) -> str:
    """The daemon's refusal, with the field of the spec or connection it is about."""
    text = str(exc)
    if exc.kind == "refused" and "partition" in text.lower():
        partition, _ = layout.placement(job, target)
        source = ("scheduling.queue" if job.scheduling.queue else
                  "the connection's spot_partition" if job.scheduling.spot != "none" and target.spot_partition else
                  "the connection's extra partition")
        return f"{text}: partition {partition!r} ({source}) does not exist on this cluster (sinfo lists them)"
    if exc.kind == "refused" and "node configuration is not available" in text:
        return (f"{text}: no {job.total_replicas()} nodes of the partition have what each replica asks for "
                "(one node per replica: check the replicas and resources.cpu / memory / gpu)")
    if exc.kind == "refused" and "qos" in text.lower():
        return f"{text}: check scheduling.priority_class (the qos) and the connection's qos / spot_qos"
    if exc.kind == "refused" and "account" in text.lower():
        return f"{text}: check the connection's extra account"
    return text


_runners: dict[tuple[SlurmSettings, str | None], SlurmRunner] = {}
_runners_lock = threading.Lock()


def make_runner(reach: Reach) -> SlurmRunner:
    """The registry's runner factory: the runner of a `slurm` connection; the place a task
    asks for is a default partition. The Kubernetes default connection id (what a task
    without conn_id gets) means slurm_default."""
    from dlc_airflow.slurm.hook import settings_for

    conn_id, connection, namespace = reach.conn_id, reach.connection, reach.place
    if not conn_id or conn_id == KUBERNETES_DEFAULT:
        conn_id, connection = DEFAULT_CONN_ID, None
    settings = settings_for(conn_id, connection)
    key = (settings, namespace)
    with _runners_lock:  # one client (and so one poller) per cluster and settings in a process
        runner = _runners.get(key)
        if runner is None:
            runner = _runners[key] = SlurmRunner(settings, partition=namespace)
        return runner
