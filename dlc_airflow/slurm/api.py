"""The slurmrestd OpenAPI versions this backend speaks, and every difference between them. Pure.

Two families of JSON shapes, checked against the daemons' own /openapi/v3:

- v0.0.38 (Slurm 21.08 to 23.02; Debian 12's Slurm 22.05 serves v0.0.36 to v0.0.38):
  `environment` is an object, `time_limit` / `memory_per_node` plain integers, `nodes` a
  [min, max] array; node lists are comma-separated strings under the keys sbatch knows
  (`nodelist`, `exclude_nodes`: accepted by the 22.05 parser though not in its schema; the
  schema's `required_nodes` / `excluded_nodes` are refused there as "Disabled key"); GPUs
  are `gpus_per_node`. In answers `job_state` is one string, `exit_code` the raw wait status
  (768 = exit code 3), times plain epoch seconds (0 = unset).
- v0.0.40 and later (Slurm 23.11 to 26.x, v0.0.40 to v0.0.45): `environment` is a list of
  "NAME=value" strings, numbers that may be unset are {"set", "infinite", "number"}
  structs, node counts are `minimum_nodes` / `maximum_nodes`, node lists are string arrays
  (`required_nodes`, `excluded_nodes`), GPUs are TRES (`tres_per_node: gres/gpu:N`), and the
  script may go inside `job`. In answers `job_state` is a list (the base state and flags
  such as COMPLETING or REQUEUED) and `exit_code` is {"status": [...], "return_code": {...},
  "signal": {"id": {...}, "name": ...}}.

Everything else (the client, the runner, the status mapping) sees only `JobRequest` going in
and `JobRecord` coming out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlc_airflow.jsonvalue import JSONObject

OLD = ("0.0.38",)
NEW = ("0.0.40", "0.0.41", "0.0.42", "0.0.43", "0.0.44", "0.0.45")
# newest first: the version picked among those a daemon serves
PREFERENCE: tuple[str, ...] = (*reversed(NEW), *OLD)

_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+)$")
_PATH = re.compile(r"^/slurm/v(\d+\.\d+\.\d+)/")

# Slurm's base job states; anything else in job_state is a flag (COMPLETING, REQUEUED...)
BASE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
                         "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})
INVALID_JOB_ID = 2017  # ESLURM_INVALID_JOB_ID


class ApiVersionError(ValueError):
    """A version this backend does not speak (the message lists those it does)."""


def parse_version(text: str, where: str = "api_version") -> str:
    """'v0.0.38' or '0.0.38' -> '0.0.38'; ApiVersionError for a version not supported."""
    match = _VERSION.match(str(text).strip())
    version = match.group(1) if match else str(text)
    if version not in PREFERENCE:
        raise ApiVersionError(f"{where} {text!r} is not a slurmrestd OpenAPI version this backend speaks: "
                              f"use one of {', '.join(sorted(PREFERENCE))} (or leave it unset to ask the daemon)")
    return version


def versions_served(openapi: JSONObject) -> list[str]:
    """The slurmctld API versions an /openapi/v3 document lists (its paths /slurm/vX.Y.Z/...)."""
    found = {m.group(1) for path in (openapi.get("paths") or {}) if (m := _PATH.match(path))}
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


def choose(served: list[str]) -> str | None:
    """The newest served version this backend speaks; None if there is none."""
    return next((v for v in PREFERENCE if v in served), None)


@dataclass(frozen=True)
class JobRequest:
    """One batch job to submit, in no version's shape (backend.render makes it)."""

    name: str
    script: str
    environment: dict[str, str]
    working_directory: str
    nodes: int
    tasks: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    memory_per_node_mb: int | None = None
    gpus_per_node: int = 0
    gpu_type: str | None = None
    time_limit_minutes: int | None = None
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    required_nodes: tuple[str, ...] = ()
    excluded_nodes: tuple[str, ...] = ()
    requeue: bool = True
    comment: str = ""
    standard_output: str = "/dev/null"
    standard_error: str = "/dev/null"


@dataclass(frozen=True)
class JobRecord:
    """A job as slurmctld reports it, whatever the version said it in."""

    job_id: int
    name: str
    state: str  # the base state (PENDING, RUNNING, COMPLETED...)
    flags: tuple[str, ...] = ()  # the other job_state entries (COMPLETING, REQUEUED, CONFIGURING...)
    reason: str = ""  # state_reason: why it pends, or why it failed
    description: str = ""  # state_description: the details
    exit_code: int | None = None  # of the batch script
    signal: int | None = None  # that ended the batch script
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None
    restarts: int = 0  # restart_cnt: requeues (preemption, node failure)
    comment: str = ""
    nodes: str = ""
    partition: str = ""
    user: str = ""
    raw_state: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Api:
    version: str

    @classmethod
    def of(cls, version: str) -> Api:
        return cls(parse_version(version))

    @property
    def new(self) -> bool:
        return self.version in NEW

    # -- paths ---------------------------------------------------------------------------
    def path(self, endpoint: str) -> str:
        return f"/slurm/v{self.version}/{endpoint}"

    @property
    def jobs_path(self) -> str:
        return self.path("jobs")

    @property
    def submit_path(self) -> str:
        return self.path("job/submit")

    @property
    def ping_path(self) -> str:
        return self.path("ping")

    def job_path(self, job_id: int | str) -> str:
        return self.path(f"job/{job_id}")

    @property
    def has_job_states(self) -> bool:
        """GET /jobs/state/?job_id=..: the states of the jobs named only (v0.0.42+, Slurm 24.11+)."""
        return tuple(int(part) for part in self.version.split(".")) >= (0, 0, 42)

    @property
    def job_states_path(self) -> str:
        return self.path("jobs/state/")

    # -- requests ------------------------------------------------------------------------
    def submit_body(self, request: JobRequest) -> JSONObject:
        job: JSONObject = {
            "name": request.name,
            "current_working_directory": request.working_directory,
            "standard_output": request.standard_output,
            "standard_error": request.standard_error,
            "requeue": request.requeue,
            "comment": request.comment,
        }
        for key, value in (("partition", request.partition), ("qos", request.qos), ("account", request.account),
                           ("tasks", request.tasks), ("tasks_per_node", request.tasks_per_node),
                           ("cpus_per_task", request.cpus_per_task)):
            if value is not None:
                job[key] = value
        gres = f"{request.gpu_type}:{request.gpus_per_node}" if request.gpu_type else str(request.gpus_per_node)
        if self.new:
            job["environment"] = [f"{k}={v}" for k, v in request.environment.items()]
            job["minimum_nodes"] = job["maximum_nodes"] = request.nodes
            if request.memory_per_node_mb is not None:
                job["memory_per_node"] = _set(request.memory_per_node_mb)
            if request.time_limit_minutes is not None:
                job["time_limit"] = _set(request.time_limit_minutes)
            if request.gpus_per_node:
                job["tres_per_node"] = f"gres/gpu:{gres}"
            if request.required_nodes:
                job["required_nodes"] = list(request.required_nodes)
            if request.excluded_nodes:
                job["excluded_nodes"] = list(request.excluded_nodes)
            job["script"] = request.script
            return {"job": job}
        job["environment"] = dict(request.environment)
        job["nodes"] = [request.nodes, request.nodes]
        if request.memory_per_node_mb is not None:
            job["memory_per_node"] = request.memory_per_node_mb
        if request.time_limit_minutes is not None:
            job["time_limit"] = request.time_limit_minutes
        if request.gpus_per_node:
            job["gpus_per_node"] = gres
        if request.required_nodes:
            job["nodelist"] = ",".join(request.required_nodes)
        if request.excluded_nodes:
            job["exclude_nodes"] = ",".join(request.excluded_nodes)
        return {"script": request.script, "job": job}

    def comment_body(self, comment: str) -> JSONObject:
        """The update that sets a job's comment (v0.0.38's job properties require an environment)."""
        return {"comment": comment} if self.new else {"comment": comment, "environment": {}}

    # -- answers -------------------------------------------------------------------------
    def submitted_id(self, body: JSONObject) -> int | None:
        """The new job's id; None when the submission was refused (see `errors`). Some answers
        carry errors for a job that was made all the same (22.05: 2042 'Job is in held state')."""
        job_id = body.get("job_id")
        if job_id is None and isinstance(body.get("result"), dict):
            job_id = body["result"].get("job_id")
        return int(job_id) if isinstance(job_id, int) and job_id > 0 else None

    def records(self, body: JSONObject) -> list[JobRecord]:
        return [self.record(job) for job in body.get("jobs") or [] if isinstance(job, dict)]

    def record(self, job: JSONObject) -> JobRecord:
        states = job.get("job_state")
        listed = tuple(states) if isinstance(states, list) else tuple(str(states or "").split(","))
        listed = tuple(s.strip().upper() for s in listed if s and s.strip())
        base = next((s for s in listed if s in BASE_STATES), "")
        code, sig = _exit(job.get("exit_code"))
        return JobRecord(
            job_id=int(job.get("job_id") or 0),
            name=str(job.get("name") or ""),
            state=base,
            flags=tuple(s for s in listed if s != base),
            reason=_text(job.get("state_reason")),
            description=_text(job.get("state_description")),
            exit_code=code,
            signal=sig,
            submit_time=_time(job.get("submit_time")),
            start_time=_time(job.get("start_time")),
            end_time=_time(job.get("end_time")),
            restarts=int(number(job.get("restart_cnt")) or 0),
            comment=_text(job.get("comment")),
            nodes=_text(job.get("nodes")),
            partition=_text(job.get("partition")),
            user=_text(job.get("user_name")),
            raw_state=listed,
        )


def job_states(body: JSONObject) -> dict[int, tuple[str, ...]]:
    """{job id: its job_state list} from a /jobs/state/ answer (v0.0.42+)."""
    found: dict[int, tuple[str, ...]] = {}
    for job in body.get("jobs") or []:
        if isinstance(job, dict) and str(job.get("job_id") or "").isdigit():
            states = job.get("state")
            found[int(job["job_id"])] = tuple(str(x) for x in states) if isinstance(states, list) else (str(states),)
    return found


def errors(body: Any) -> list[JSONObject]:
    """The answer's errors as {"text", "number", "source"} (v0.0.38 and v0.0.40 spell them
    differently: error / description, error_number / error_code / errno)."""
    out = []
    for err in (body.get("errors") if isinstance(body, dict) else None) or []:
        if not isinstance(err, dict):
            continue
        number_ = err.get("error_number", err.get("error_code", err.get("errno")))
        texts = [str(err[k]) for k in ("description", "error") if err.get(k)]
        # "description" is the detail when both are there; dedupe "Unspecified error" pairs
        text = texts[0] if len(texts) == 1 or texts[0] == texts[-1] else f"{texts[0]} ({texts[1]})"
        out.append({"text": text, "number": number_ if isinstance(number_, int) else None,
                    "source": str(err.get("source") or "")})
    return out


def error_text(body: Any) -> str:
    """One line: every error of the answer, in order ('' if none)."""
    return "; ".join(e["text"] + (f" [{e['source']}]" if e["source"] else "") for e in errors(body))


def is_invalid_job_id(body: Any) -> bool:
    return any(e["number"] == INVALID_JOB_ID or "Invalid job id" in e["text"] for e in errors(body))


def number(value: Any) -> float | None:
    """A plain number, or a v0.0.40+ {"set", "infinite", "number"} struct (None when unset)."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    return None


def _set(value: int) -> JSONObject:
    return {"set": True, "infinite": False, "number": int(value)}


def _time(value: Any) -> float | None:
    seconds = number(value)
    return float(seconds) if seconds else None  # 0 is Slurm's "not yet"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _exit(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) from a v0.0.38 wait status or a v0.0.40+ exit_code struct."""
    if isinstance(value, dict):
        code = number(value.get("return_code"))
        sig_data = value.get("signal") or {}
        sig = number(sig_data.get("id")) if isinstance(sig_data, dict) else None
        status = [str(s).upper() for s in value.get("status") or []]
        if "PENDING" in status:
            return None, None
        return (int(code) if code is not None else None), (int(sig) if sig else None)
    if isinstance(value, int) and not isinstance(value, bool):
        # a wait(2) status: low 7 bits the signal, next 8 the exit code
        sig = value & 0x7F
        return (value >> 8) & 0xFF, (sig or None)
    return None, None
