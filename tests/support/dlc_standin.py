"""A STAND-IN for the managed DLC API (PAI-DLC 2020-12-03), for tests and benchmarks only.

The real service cannot be reached from here. This is a local HTTP server on 127.0.0.1
that the SDK's real client (alibabacloud-pai-dlc20201203: its signing, ROA paths and
serialization) talks to, and it is strict:

- every request must carry an ACS3-HMAC-SHA256 signature, which is recomputed here with the
  SDK's own canonicalization (alibabacloud_tea_openapi.utils) and the account's secret;
  x-acs-action / x-acs-version must match the route; a reused nonce, a stale date, an
  unknown AccessKey or a wrong STS token is refused;
- request bodies and queries are parsed with the SDK's own request models (CreateJobRequest,
  ListJobsShrinkRequest, GetPodLogsRequest...) and checked against what the API reference
  and the SDK's model docs say is required or allowed: DisplayName / JobType / JobSpecs /
  UserCommand present, enum values known (JobType, JobSpec Type per JobType, RestartPolicy,
  SuccessPolicy, MountAccess, Status, SortBy, Order...), PodCount >= 1, Priority 1..9, at most
  20 tags, public resources (no ResourceId) need an EcsSpec per JobSpec and a quota a
  ResourceConfig;
- refusals use Alibaba Cloud's error body {RequestId, HostId, Code, Message, Recommend};
- answers are built as plain dicts and checked to round-trip through the SDK's response
  models (GetJobResponseBody, ListJobsResponseBody, ...): only documented fields go out;
- jobs walk the documented states on a clock: Creating -> Queuing -> EnvPreparing ->
  [SanityChecking] -> Running -> [Restarting -> Running] -> Succeeded | Failed, and
  StopJob: Stopping -> Stopped.

What the public documentation does not pin down is marked ASSUMPTION below (error codes
of DLC itself, the roles of MPIJob / SlurmJob, ListJobs' page size limit, the text of log
lines and events). A test's job picks its behaviour through its env (read only here):
STANDIN_QUEUE_SECONDS, STANDIN_RUN_SECONDS, STANDIN_OUTCOME (succeed | fail | restart |
restart-fail), STANDIN_LOG (lines each pod prints, '\\n'-separated).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote

from alibabacloud_pai_dlc20201203 import models
from alibabacloud_tea_openapi.utils import get_canonical_query_string, get_canonicalized_headers, signature_method

VERSION = "2020-12-03"
SIGN_TYPE = "ACS3-HMAC-SHA256"

JOB_TYPES = {"TFJob", "PyTorchJob", "MPIJob", "XGBoostJob", "OneFlowJob", "ElasticBatchJob", "SlurmJob", "RayJob",
             "DataJuicerJob"}
# JobSpec Type per JobType, from the SDK's JobSpec.type doc. ASSUMPTION: MPIJob (Launcher,
# Worker, as Kubeflow's MPIJob) and SlurmJob / DataJuicerJob (Master, Worker) are not listed there.
ROLE_TYPES = {
    "TFJob": {"Chief", "PS", "Worker", "Evaluator", "GraphLearn"},
    "PyTorchJob": {"Worker", "Master"},
    "XGBoostJob": {"Worker", "Master"},
    "OneFlowJob": {"Worker", "Master"},
    "ElasticBatchJob": {"Worker", "Master"},
    "RayJob": {"Head", "Worker"},
    "MPIJob": {"Launcher", "Worker"},
    "SlurmJob": {"Master", "Worker"},
    "DataJuicerJob": {"Master", "Worker"},
}
RESTART_POLICIES = {"Always", "Never", "OnFailure", "ExitCode"}
STATUSES = ["Creating", "Queuing", "Bidding", "EnvPreparing", "SanityChecking", "Running", "Restarting", "Stopping",
            "SucceededReserving", "FailedReserving", "Succeeded", "Failed", "Stopped"]
TERMINAL = {"Succeeded", "Failed", "Stopped"}
SORT_BY = {"DisplayName", "JobType", "Status", "GmtCreateTime", "GmtFinishTime"}
MAX_PAGE_SIZE = 100  # ASSUMPTION: the reference gives 50 as an example, no maximum
DISPLAY_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,256}$")
ISO = "%Y-%m-%dT%H:%M:%SZ"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def invalid(message: str, code: str = "InvalidParameter") -> ApiError:
    return ApiError(400, code, message)


def missing(name: str) -> ApiError:
    return ApiError(400, "MissingParameter", f"The input parameter \"{name}\" that is mandatory for processing "
                    "this request is not supplied.")


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(ISO)


def parse_iso(value: str, name: str) -> datetime:
    try:
        return datetime.strptime(value, ISO).replace(tzinfo=UTC)
    except ValueError:
        raise invalid(f"{name} {value!r} is not a UTC time such as 2025-04-16T07:25:34Z") from None


def documented(model: Any, data: dict[str, Any], where: str = "") -> dict[str, Any]:
    """`data`, after checking that every field of it survives the SDK's response model."""
    roundtrip = model().from_map(data).to_map()
    _subset(data, roundtrip, where or type(model()).__name__)
    return data


def _subset(data: Any, roundtrip: Any, where: str) -> None:
    if isinstance(data, dict):
        if not isinstance(roundtrip, dict):
            raise AssertionError(f"stand-in answer {where}: not an object in the SDK's model")
        for key, value in data.items():
            if key not in roundtrip:
                raise AssertionError(f"stand-in answer {where}.{key}: not a documented field")
            _subset(value, roundtrip[key], f"{where}.{key}")
    elif isinstance(data, list):
        for i, (a, b) in enumerate(zip(data, roundtrip, strict=True)):
            _subset(a, b, f"{where}[{i}]")
    elif data != roundtrip:
        raise AssertionError(f"stand-in answer {where}: {data!r} reads back as {roundtrip!r}")


@dataclass
class Phase:
    status: str
    seconds: float | None  # None: the last one
    reason_code: str = ""
    message: str = ""


@dataclass
class Job:
    job_id: str
    request: dict[str, Any]  # CreateJobRequest.to_map() as received
    workspace: str
    created_wall: datetime
    created: float  # monotonic
    phases: list[Phase]
    tags: dict[str, str]
    stop_at: float | None = None
    deleted: bool = False
    logs: list[str] = field(default_factory=list)
    restarts_max: int = 0

    @property
    def env(self) -> dict[str, str]:
        return self.request.get("Envs") or {}


class DLCStandIn:
    """The stand-in server. `accounts`: AccessKey ID -> (secret, STS token or None)."""

    def __init__(self, accounts: dict[str, tuple[str, str | None]], workspaces: set[str],
                 region: str = "cn-hangzhou", tick: float = 1.0) -> None:
        self.accounts = dict(accounts)
        self.workspaces = set(workspaces)
        self.region = region
        self.tick = tick  # scales every phase's duration (the benchmark runs slower jobs)
        self.jobs: dict[str, Job] = {}
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []  # the stand-in's own failures (an undocumented answer): tests assert none
        self._lock = threading.RLock()
        self._nonces: set[str] = set()
        self._throttle: list[tuple[str | None, str]] = []  # (action or None for any, code)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> DLCStandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="dlc-standin")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> DLCStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the stand-in first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def host(self) -> str:
        return self.url.removeprefix("http://")

    # -- test controls -----------------------------------------------------------------
    def throttle(self, count: int = 1, action: str | None = None, code: str = "Throttling.User") -> None:
        """The next `count` requests (of `action`, or any) are refused as flow control."""
        with self._lock:
            self._throttle.extend([(action, code)] * count)

    def count(self, action: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self.requests if action is None or r["action"] == action)

    def reset_counts(self) -> None:
        with self._lock:
            self.requests.clear()

    def live_jobs(self, workspace: str | None = None) -> list[dict[str, Any]]:
        """Jobs not yet finished (for assertions: 'nothing left running')."""
        with self._lock:
            return [self.view(j) for j in self.jobs.values()
                    if not j.deleted and self.state(j)[0] not in TERMINAL and (workspace is None or j.workspace == workspace)]

    def job(self, job_id: str) -> dict[str, Any]:
        with self._lock:
            return self.view(self.jobs[job_id])

    def jobs_named(self, display_name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [self.view(j) for j in self.jobs.values() if j.request.get("DisplayName") == display_name]

    # -- dispatch ----------------------------------------------------------------------
    ROUTES = [
        ("POST", re.compile(r"^/api/v1/jobs$"), "CreateJob"),
        ("GET", re.compile(r"^/api/v1/jobs$"), "ListJobs"),
        ("GET", re.compile(r"^/api/v1/jobs/(?P<job>[^/]+)$"), "GetJob"),
        ("DELETE", re.compile(r"^/api/v1/jobs/(?P<job>[^/]+)$"), "DeleteJob"),
        ("POST", re.compile(r"^/api/v1/jobs/(?P<job>[^/]+)/stop$"), "StopJob"),
        ("GET", re.compile(r"^/api/v1/jobs/(?P<job>[^/]+)/events$"), "GetJobEvents"),
        ("GET", re.compile(r"^/api/v1/jobs/(?P<job>[^/]+)/pods/(?P<pod>[^/]+)/logs$"), "GetPodLogs"),
        ("POST", re.compile(r"^/api/v1/tags$"), "TagResources"),
    ]

    def handle(self, method: str, raw_path: str, raw_query: str, headers: Any, body: bytes) -> tuple[int, dict, dict]:
        action = "?"
        try:
            for verb, pattern, name in self.ROUTES:
                match = pattern.match(raw_path)
                if match and verb == method:
                    action = name
                    break
            else:
                raise ApiError(404, "InvalidAction.NotFound", f"no operation at {method} {raw_path}")
            self._verify(action, method, raw_path, raw_query, headers, body)
            with self._lock:
                self.requests.append({"action": action, "method": method, "path": raw_path, "query": raw_query})
                for i, (which, code) in enumerate(self._throttle):
                    if which in (None, action):
                        del self._throttle[i]
                        raise ApiError(400, code, "Request was denied due to user flow control.")
            query = dict(parse_qsl(raw_query, keep_blank_values=True))
            params = {k: unquote(v) for k, v in match.groupdict().items()}
            answer = getattr(self, "_" + re.sub(r"(?<!^)([A-Z])", r"_\1", action).lower())(params, query, body)
            answer.setdefault("RequestId", str(uuid.uuid4()).upper())
            return 200, answer, {}
        except AssertionError as exc:  # the stand-in's own check of its answer: a bug here, say so
            self.errors.append(f"{action}: {exc}")
            return 500, {"RequestId": "", "HostId": self.host, "Code": "StandInError", "Message": str(exc)}, {}
        except ApiError as exc:
            return exc.status, {"RequestId": str(uuid.uuid4()).upper(), "HostId": self.host, "Code": exc.code,
                                "Message": exc.message,
                                "Recommend": f"https://api.aliyun.com/troubleshoot?q={exc.code}&product=pai-dlc"}, exc.headers

    # -- signature ---------------------------------------------------------------------
    def _verify(self, action: str, method: str, path: str, raw_query: str, headers: Any, body: bytes) -> None:
        auth = headers.get("Authorization") or ""
        if not auth.startswith(SIGN_TYPE + " "):
            raise ApiError(400, "IncompleteSignature", "The request signature does not conform to Aliyun standards.")
        parts = dict(p.strip().split("=", 1) for p in auth[len(SIGN_TYPE) + 1:].split(",") if "=" in p)
        ak, signed, signature = parts.get("Credential"), parts.get("SignedHeaders", ""), parts.get("Signature")
        names = signed.split(";")
        for need in ("host", "x-acs-action", "x-acs-version", "x-acs-date", "x-acs-signature-nonce",
                     "x-acs-content-sha256"):
            if need not in names:
                raise ApiError(400, "IncompleteSignature", f"the signature does not cover the {need} header")
        if ak not in self.accounts:
            raise ApiError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        secret, token = self.accounts[ak]
        if headers.get("x-acs-action") != action or headers.get("x-acs-version") != VERSION:
            raise invalid(f"x-acs-action/x-acs-version {headers.get('x-acs-action')}/{headers.get('x-acs-version')} "
                          f"do not name {action} {VERSION}", code="InvalidAction")
        if hashlib.sha256(body).hexdigest() != headers.get("x-acs-content-sha256"):
            raise ApiError(400, "SignatureDoesNotMatch", "x-acs-content-sha256 is not the body's hash")
        try:
            sent = datetime.strptime(headers.get("x-acs-date") or "", ISO).replace(tzinfo=UTC)
        except ValueError:
            raise ApiError(400, "InvalidTimeStamp.Format", "x-acs-date is not a UTC time") from None
        if abs((datetime.now(UTC) - sent).total_seconds()) > 900:
            raise ApiError(400, "InvalidTimeStamp.Expired", "x-acs-date is more than 15 minutes off")
        query = dict(parse_qsl(raw_query, keep_blank_values=True))
        present = {name: headers.get(name) for name in names}
        canonical_headers, signed_names = get_canonicalized_headers(present)
        canonical = "\n".join([method, path, get_canonical_query_string(query), canonical_headers, signed_names,
                               headers.get("x-acs-content-sha256")])
        to_sign = f"{SIGN_TYPE}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        if signature_method(secret, to_sign, SIGN_TYPE).hex() != signature:
            raise ApiError(400, "SignatureDoesNotMatch", "The request signature does not match.")
        if token is not None and headers.get("x-acs-security-token") != token:
            raise ApiError(400, "InvalidSecurityToken.MismatchWithAccessKey", "The security token does not match.")
        nonce = headers.get("x-acs-signature-nonce") or ""
        with self._lock:
            if nonce in self._nonces:
                raise ApiError(400, "SignatureNonceUsed", "The request signature nonce has been used.")
            self._nonces.add(nonce)

    # -- CreateJob ---------------------------------------------------------------------
    def _create_job(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body or b"{}")
        except ValueError:
            raise invalid("the body is not JSON") from None
        request = models.CreateJobRequest().from_map(data).to_map()
        self._check_create(request)
        workspace = request.get("WorkspaceId") or next(iter(sorted(self.workspaces)))
        job_id = "dlc" + uuid.uuid4().hex[:14]
        env = request.get("Envs") or {}
        settings = request.get("Settings") or {}
        job = Job(job_id=job_id, request=request, workspace=workspace, created_wall=datetime.now(UTC),
                  created=time.monotonic(), phases=self._plan(request), tags=dict(settings.get("Tags") or {}),
                  logs=[line for line in (env.get("STANDIN_LOG") or "").split("\n") if line])
        args = settings.get("ErrorMonitoringArgs") or ""
        if m := re.search(r"--max-num-of-job-restart=(\d+)", args):
            job.restarts_max = int(m.group(1))
        with self._lock:
            self.jobs[job_id] = job
        return documented(models.CreateJobResponseBody, {"JobId": job_id})

    def _check_create(self, r: dict[str, Any]) -> None:
        for name in ("DisplayName", "JobType", "UserCommand"):
            if not r.get(name):
                raise missing(name)
        if not r.get("JobSpecs"):
            raise missing("JobSpecs")
        if not DISPLAY_NAME.match(r["DisplayName"]):
            raise invalid(f"DisplayName {r['DisplayName']!r}: at most 256 letters, digits, '_', '.' and '-'")
        if r["JobType"] not in JOB_TYPES:
            raise invalid(f"JobType {r['JobType']!r} is not one of {', '.join(sorted(JOB_TYPES))}")
        if (ws := r.get("WorkspaceId")) is not None and ws not in self.workspaces:
            raise ApiError(403, "Forbidden.Workspace", f"workspace {ws} does not exist or you may not use it")
        if (prio := r.get("Priority")) is not None and (not isinstance(prio, int) or not 1 <= prio <= 9):
            raise invalid(f"Priority {prio!r} must be an integer from 1 to 9")
        if (minutes := r.get("JobMaxRunningTimeMinutes")) is not None and (not isinstance(minutes, int) or minutes < 1):
            raise invalid(f"JobMaxRunningTimeMinutes {minutes!r} must be a positive integer")
        if (policy := r.get("SuccessPolicy")) is not None:
            if r["JobType"] != "TFJob" or policy not in ("ChiefWorker", "AllWorkers"):
                raise invalid(f"SuccessPolicy {policy!r}: only TFJob takes it, as ChiefWorker or AllWorkers")
        if (access := r.get("Accessibility")) is not None and access not in ("PUBLIC", "PRIVATE"):
            raise invalid(f"Accessibility {access!r} is not PUBLIC or PRIVATE")
        for key, value in (r.get("Envs") or {}).items():
            if not isinstance(value, str):
                raise invalid(f"Envs.{key} must be a string")
        quota = r.get("ResourceId")
        allowed = ROLE_TYPES[r["JobType"]]
        types = [s.get("Type") for s in r["JobSpecs"]]
        for i, spec in enumerate(r["JobSpecs"]):
            where = f"JobSpecs.{i + 1}"
            kind = spec.get("Type")
            if not kind:
                raise missing(f"{where}.Type")
            if kind not in allowed and not (r["JobType"] == "RayJob" and kind.startswith("Worker-")):
                raise invalid(f"{where}.Type {kind!r}: a {r['JobType']} has {', '.join(sorted(allowed))}")
            count = spec.get("PodCount")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise invalid(f"{where}.PodCount {count!r} must be an integer of at least 1")
            if not spec.get("Image"):
                raise missing(f"{where}.Image")
            if (policy := spec.get("RestartPolicy")) is not None and policy not in RESTART_POLICIES:
                raise invalid(f"{where}.RestartPolicy {policy!r} is not one of {', '.join(sorted(RESTART_POLICIES))}")
            config = spec.get("ResourceConfig") or {}
            if quota is None and not spec.get("EcsSpec"):
                raise invalid(f"{where}.EcsSpec: a job on public resources (no ResourceId) needs an instance type")
            if quota is not None and not spec.get("EcsSpec") and not (config.get("CPU") and config.get("Memory")):
                raise invalid(f"{where}.ResourceConfig: a job on a quota needs CPU and Memory")
            for key in ("CPU", "GPU"):
                if key in config and not re.match(r"^\d+(\.\d+)?$", str(config[key])):
                    raise invalid(f"{where}.ResourceConfig.{key} {config[key]!r} is not a number")
            if "GPUType" in config and not config.get("GPU"):
                raise invalid(f"{where}.ResourceConfig.GPUType needs GPU")
            nodes = spec.get("AssignNodeSpec") or {}
            if nodes and nodes.get("EnableAssignNode") and not (nodes.get("NodeNames") or nodes.get("AntiAffinityNodeNames")):
                raise invalid(f"{where}.AssignNodeSpec: EnableAssignNode needs NodeNames or AntiAffinityNodeNames")
            if nodes.get("EnableAssignNode") and quota is None:
                raise invalid(f"{where}.AssignNodeSpec: assigning nodes needs a quota (ResourceId)")
        if len(set(types)) != len(types):
            raise invalid(f"JobSpecs: Type {sorted(t for t in types if types.count(t) > 1)[0]} is given twice")
        for i, source in enumerate(r.get("DataSources") or []):
            where = f"DataSources.{i + 1}"
            if not source.get("DataSourceId") and not source.get("Uri"):
                raise missing(f"{where}.Uri")
            uri = source.get("Uri") or ""
            if uri and not uri.startswith(("oss://", "nas://", "cpfs://", "bmcpfs://")):
                raise invalid(f"{where}.Uri {uri!r} is not an oss://, nas:// or cpfs:// URI")
            if (path := source.get("MountPath")) is not None and not path.startswith("/"):
                raise invalid(f"{where}.MountPath {path!r} must be absolute")
            if (access := source.get("MountAccess")) is not None and access not in ("RO", "RW"):
                raise invalid(f"{where}.MountAccess {access!r} is not RO or RW")
        if (code := r.get("CodeSource")) is not None and not code.get("CodeSourceId"):
            raise missing("CodeSource.CodeSourceId")
        tags = (r.get("Settings") or {}).get("Tags") or {}
        _check_tags(tags, "Settings.Tags")

    def _plan(self, r: dict[str, Any]) -> list[Phase]:
        env = r.get("Envs") or {}
        t = self.tick
        queue = float(env.get("STANDIN_QUEUE_SECONDS", "0.3")) * t
        run = float(env.get("STANDIN_RUN_SECONDS", "0.6")) * t
        outcome = env.get("STANDIN_OUTCOME", "succeed")
        settings = r.get("Settings") or {}
        phases = [Phase("Creating", 0.1 * t), Phase("Queuing", queue, "JobQueuing", "waiting for quota"),
                  Phase("EnvPreparing", 0.1 * t, "PullingImage", "pulling image")]
        if settings.get("EnableSanityCheck"):
            phases.append(Phase("SanityChecking", 0.1 * t, "SanityChecking", "checking the nodes"))
        phases.append(Phase("Running", run))
        if outcome.startswith("restart"):
            phases += [Phase("Restarting", 0.3 * t, "JobRestarting", "pod worker-0 exited with code 1; restarting"),
                       Phase("Running", run)]
        if outcome in ("fail", "restart-fail"):
            phases.append(Phase("Failed", None, "JobFailed", "pod worker-0 exited with code 3"))
        else:
            phases.append(Phase("Succeeded", None, "JobSucceeded", ""))
        return phases

    # -- the clock ---------------------------------------------------------------------
    def state(self, job: Job, now: float | None = None) -> tuple[str, Phase, list[tuple[Phase, float, float | None]]]:
        """(status, phase, history [(phase, start, end)]) of `job` at `now` (monotonic)."""
        now = time.monotonic() if now is None else now
        history: list[tuple[Phase, float, float | None]] = []
        at = job.created
        for phase in job.phases:
            end = None if phase.seconds is None else at + phase.seconds
            if job.stop_at is not None and job.stop_at < (end if end is not None else float("inf")) \
                    and job.stop_at >= at and phase.status not in TERMINAL:
                history.append((phase, at, job.stop_at))
                stopping = Phase("Stopping", 0.3 * self.tick, "StoppedByUser", "stopping")
                stop_end = job.stop_at + (stopping.seconds or 0)
                history.append((stopping, job.stop_at, stop_end))
                stopped = Phase("Stopped", None, "StoppedByUser", "stopped by the user")
                history.append((stopped, stop_end, None))
                break
            history.append((phase, at, end))
            if end is None:
                break
            at = end
        current = [h for h in history if h[1] <= now]
        phase = current[-1][0] if current else history[0][0]
        return phase.status, phase, [h for h in history if h[1] <= now]

    def _wall(self, job: Job, mono: float) -> str:
        return iso(job.created_wall + timedelta(seconds=mono - job.created))

    def view(self, job: Job, item: bool = False) -> dict[str, Any]:
        """GetJob's body (or, item=True, a ListJobs entry) for `job` now."""
        now = time.monotonic()
        status, phase, history = self.state(job, now)
        r = job.request
        running = [h for h in history if h[0].status == "Running"]
        restarts = sum(1 for h in history if h[0].status == "Restarting")
        view: dict[str, Any] = {
            "JobId": job.job_id, "DisplayName": r["DisplayName"], "JobType": r["JobType"], "Status": status,
            "ReasonCode": phase.reason_code, "ReasonMessage": phase.message,
            "GmtCreateTime": iso(job.created_wall), "GmtSubmittedTime": iso(job.created_wall),
            "WorkspaceId": job.workspace, "UserCommand": r["UserCommand"],
            "JobSpecs": r["JobSpecs"], "Envs": r.get("Envs") or {}, "Priority": r.get("Priority", 1),
            "Settings": {**(r.get("Settings") or {}), "Tags": dict(job.tags)},
            "RestartTimes": f"{restarts}/{job.restarts_max}", "ResourceType": "ECS",
            "UserId": "standin-user", "Description": r.get("Description") or "",
            "Pods": self._pods(job, status, history),
            "StatusHistory": [{"Status": p.status, "StartTime": self._wall(job, s),
                               "EndTime": self._wall(job, e) if e is not None and e <= now else "",
                               "ReasonCode": p.reason_code, "ReasonMessage": p.message} for p, s, e in history],
        }
        if r.get("ResourceId"):
            view["ResourceId"] = r["ResourceId"]
        if running:
            view["GmtRunningTime"] = self._wall(job, running[0][1])
        if status in TERMINAL:
            end = history[-1][1]
            view["GmtFinishTime"] = self._wall(job, end)
            key = {"Succeeded": "GmtSuccessedTime", "Failed": "GmtFailedTime", "Stopped": "GmtStoppedTime"}[status]
            view[key] = self._wall(job, end)
        if item:
            view["IsDeleted"] = job.deleted
            view["JobMaxRunningTimeMinutes"] = r.get("JobMaxRunningTimeMinutes", 0)
            view["Username"] = "standin-user"
            del view["StatusHistory"], view["Description"]
            return documented(models.JobItem, view, "JobItem")
        if r.get("DataSources"):
            view["DataSources"] = [{k: s[k] for k in ("DataSourceId", "MountPath", "Uri") if k in s}
                                   for s in r["DataSources"]]
        if r.get("CodeSource"):
            view["CodeSource"] = {k: v for k, v in r["CodeSource"].items() if k != "IsSharedMountPath"}
        return documented(models.GetJobResponseBody, view, "GetJob")

    def _pods(self, job: Job, status: str, history: list) -> list[dict[str, Any]]:
        started = [h for h in history if h[0].status in ("Running", "SanityChecking")]
        pods = []
        for spec in job.request["JobSpecs"]:
            kind = spec["Type"].lower()
            for i in range(spec["PodCount"]):
                first = not pods
                if status in ("Creating", "Queuing", "Bidding", "EnvPreparing"):
                    phase = "Pending"
                elif status in ("Running", "SanityChecking", "Stopping"):
                    phase = "Running"
                elif status == "Restarting":
                    phase = "Failed" if first else "Running"
                elif status == "Succeeded":
                    phase = "Succeeded"
                else:
                    phase = "Failed" if first or status == "Stopped" else "Succeeded"
                pod = {"PodId": f"{job.job_id}-{kind}-{i}", "PodUid": hashlib.md5(f"{job.job_id}{kind}{i}".encode()).hexdigest(),
                       "Type": kind, "Status": phase, "Ip": f"10.0.{len(pods) // 250}.{len(pods) % 250 + 2}",
                       "NodeName": "standin-node", "GmtCreateTime": iso(job.created_wall)}
                if started:
                    pod["GmtStartTime"] = self._wall(job, started[-1][1])
                pods.append(pod)
        return pods

    def _lines(self, job: Job, pod_id: str) -> list[tuple[datetime, str]]:
        """(time, text) of the lines a pod has printed by now."""
        now = time.monotonic()
        _, _, history = self.state(job, now)
        lines = []
        for n, (_phase, start, end) in enumerate(h for h in history if h[0].status == "Running"):
            stop = end if end is not None and end < now else now
            texts = [f"stand-in: {pod_id} started (run {n + 1})", *job.logs]
            span = (end - start) if end is not None else 1.0
            for k, text in enumerate(texts):
                at = start + span * k / (len(texts) + 1)
                if at <= stop:
                    lines.append((job.created_wall + timedelta(seconds=at - job.created), text))
        return lines

    # -- ListJobs / GetJob ---------------------------------------------------------------
    def _list_jobs(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        _known_only(models.ListJobsShrinkRequest, query, "ListJobs")
        q = models.ListJobsShrinkRequest().from_map(query)
        size = _int(q.page_size, "PageSize", 1, MAX_PAGE_SIZE, default=50)
        page = _int(q.page_number, "PageNumber", 1, None, default=1)
        now = datetime.now(UTC)
        start = parse_iso(q.start_time, "StartTime") if q.start_time else now - timedelta(days=7)
        end = parse_iso(q.end_time, "EndTime") if q.end_time else now
        if q.status is not None and q.status not in STATUSES:
            raise invalid(f"Status {q.status!r} is not one of {', '.join(STATUSES)}")
        if q.sort_by is not None and q.sort_by not in SORT_BY:
            raise invalid(f"SortBy {q.sort_by!r} is not one of {', '.join(sorted(SORT_BY))}")
        if q.order is not None and q.order.lower() not in ("asc", "desc"):
            raise invalid(f"Order {q.order!r} is not asc or desc")
        tags: dict[str, str] = {}
        if q.tags_shrink:
            try:
                tags = json.loads(q.tags_shrink)
            except ValueError:
                raise invalid("Tags is not a JSON object") from None
            if not isinstance(tags, dict):
                raise invalid("Tags is not a JSON object")
        ids = set(filter(None, (q.job_ids or "").split(","))) if not q.job_id else {q.job_id}
        if q.workspace_id is not None and q.workspace_id not in self.workspaces:
            raise ApiError(403, "Forbidden.Workspace", f"workspace {q.workspace_id} does not exist or you may not use it")
        with self._lock:
            chosen = []
            for job in self.jobs.values():
                r = job.request
                if job.deleted or (q.workspace_id and job.workspace != q.workspace_id):
                    continue
                if not start <= job.created_wall <= end:
                    continue
                if ids and job.job_id not in ids:
                    continue
                if q.display_name and q.display_name.lower() not in r["DisplayName"].lower():
                    continue
                if q.job_type and r["JobType"] != q.job_type:
                    continue
                if any(job.tags.get(k) != v for k, v in tags.items()):
                    continue
                if q.status and self.state(job)[0] != q.status:
                    continue
                chosen.append(job)
            reverse = (q.order or "desc").lower() == "desc"
            chosen.sort(key=lambda j: (j.created_wall, j.job_id), reverse=reverse)
            paged = chosen[(page - 1) * size: page * size]
            items = [self.view(j, item=True) for j in paged]
        return documented(models.ListJobsResponseBody, {"Jobs": items, "TotalCount": len(chosen)})

    def _job(self, params: dict) -> Job:
        job = self.jobs.get(params["job"])
        if job is None or job.deleted:
            # ASSUMPTION: DLC's own code for an unknown job id is not in the public reference
            raise ApiError(404, "EntityNotExist.Job", f"job {params['job']} does not exist")
        return job

    def _get_job(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        _known_only(models.GetJobRequest, query, "GetJob")
        q = models.GetJobRequest().from_map(query)
        if q.need_detail is not None and str(q.need_detail).lower() not in ("true", "false"):
            raise invalid(f"NeedDetail {q.need_detail!r} is not true or false")
        with self._lock:
            return self.view(self._job(params))

    def _stop_job(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        with self._lock:
            job = self._job(params)
            status = self.state(job)[0]
            if status in TERMINAL:
                # ASSUMPTION: the reference does not give the code for stopping a finished job
                raise invalid(f"job {job.job_id} is {status} and cannot be stopped", code="InvalidStatus.Job")
            if job.stop_at is None:
                job.stop_at = time.monotonic()
        return documented(models.StopJobResponseBody, {"JobId": job.job_id})

    def _delete_job(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        with self._lock:
            job = self._job(params)
            job.deleted = True
        return documented(models.DeleteJobResponseBody, {"JobId": job.job_id})

    def _get_job_events(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        _known_only(models.GetJobEventsRequest, query, "GetJobEvents")
        q = models.GetJobEventsRequest().from_map(query)
        most = _int(q.max_events_num, "MaxEventsNum", 1, None, default=2000)
        since = parse_iso(q.start_time, "StartTime") if q.start_time else None
        with self._lock:
            job = self._job(params)
            _, _, history = self.state(job)
            events = []
            for phase, start, _ in history:
                at = job.created_wall + timedelta(seconds=start - job.created)
                if since is not None and at < since:
                    continue
                kind = "Warning" if phase.status in ("Restarting", "Failed") else "Normal"
                events.append(f"{iso(at)} {kind} {phase.status}: {phase.message or phase.status}")
        return documented(models.GetJobEventsResponseBody, {"JobId": job.job_id, "Events": events[:most]})

    def _get_pod_logs(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        _known_only(models.GetPodLogsRequest, query, "GetPodLogs")
        q = models.GetPodLogsRequest().from_map(query)
        most = _int(q.max_lines, "MaxLines", 1, None, default=2000)
        since = parse_iso(q.start_time, "StartTime") if q.start_time else None
        with self._lock:
            job = self._job(params)
            pods = {p["PodId"]: p for p in self._pods(job, *self._state_and_history(job))}
            pod = pods.get(params["pod"])
            if pod is None:
                raise ApiError(404, "EntityNotExist.Pod", f"job {job.job_id} has no pod {params['pod']}")
            if q.pod_uid is not None and q.pod_uid != pod["PodUid"]:
                raise invalid(f"PodUid {q.pod_uid!r} is not pod {params['pod']}'s")
            lines = [text for at, text in self._lines(job, params["pod"]) if since is None or at >= since]
        return documented(models.GetPodLogsResponseBody,
                          {"JobId": job.job_id, "PodId": params["pod"], "PodUid": pod["PodUid"], "Logs": lines[:most]})

    def _state_and_history(self, job: Job) -> tuple[str, list]:
        status, _, history = self.state(job)
        return status, history

    def _tag_resources(self, params: dict, query: dict, body: bytes) -> dict[str, Any]:
        request = models.TagResourcesRequest().from_map(json.loads(body or b"{}"))
        if not request.region_id:
            raise missing("RegionId")
        if request.region_id != self.region:
            raise invalid(f"RegionId {request.region_id!r} is not this endpoint's region {self.region}")
        if request.resource_type != "Job":
            raise invalid(f"ResourceType {request.resource_type!r}: only Job")
        if not request.resource_id:
            raise missing("ResourceId")
        if len(request.resource_id) > 50 or len(request.tag or []) > 20:
            raise invalid("at most 50 ResourceId and 20 Tag")
        new = {t.key: t.value for t in request.tag or []}
        with self._lock:
            jobs = [self._job({"job": job_id}) for job_id in request.resource_id]
            for job in jobs:
                _check_tags({**job.tags, **new}, "Tag")
                job.tags.update(new)
        return documented(models.TagResourcesResponseBody, {})


def _check_tags(tags: dict[str, str], where: str) -> None:
    if len(tags) > 20:
        raise invalid(f"{where}: at most 20 tags, got {len(tags)}")
    for key, value in tags.items():
        if not key or len(key) > 128 or key.lower().startswith(("aliyun", "acs:")) or "http://" in key \
                or "https://" in key:
            raise invalid(f"{where}: tag key {key!r} is not allowed")
        if not isinstance(value, str) or len(value) > 128:
            raise invalid(f"{where}: tag {key} value must be a string of at most 128 characters")


def _known_only(model: Any, query: dict[str, str], action: str) -> None:
    """Refuse query parameters the SDK's request model does not have."""
    if unknown := sorted(set(query) - set(model().from_map(query).to_map())):
        raise invalid(f"{action} has no parameter {unknown[0]!r}")


def _int(value: Any, name: str, least: int, most: int | None, default: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise invalid(f"{name} {value!r} is not an integer") from None
    if number < least or (most is not None and number > most):
        raise invalid(f"{name} {number} must be between {least} and {most if most is not None else 'any'}")
    return number


class _Handler(BaseHTTPRequestHandler):
    owner: DLCStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests count requests instead
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        status, answer, extra = self.owner.handle(self.command, path, query, self.headers, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PUT = _serve


@contextmanager
def running_standin(**kwargs: Any) -> Iterator[DLCStandIn]:
    with DLCStandIn(**kwargs) as standin:
        yield standin
