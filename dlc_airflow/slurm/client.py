"""The HTTP I/O with slurmrestd: the one module of the backend that talks to it.

A small client over http.client (keep-alive, one connection per client, a lock: the shared
poller and the task's calls share it). It knows the version's paths through api.Api and
turns every failure into a SlurmError whose one-line message names the call, the daemon's
words, and what to do; `kind` says which failure it is (unreachable, auth, refused,
not_found, server) and `permanent` whether a retry can help.

The JWT goes only into the X-SLURM-USER-TOKEN header: never into a message, a log line or
the repr.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import ssl
import threading
from typing import Any
from urllib.parse import urlencode, urlsplit

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.slurm import api as versions
from dlc_airflow.slurm.api import Api, JobRecord, JobRequest
from dlc_airflow.slurm.settings import SlurmConfigError, SlurmSettings, mask, token_problem

log = logging.getLogger(__name__)

# What slurmrestd answers for a token slurmctld refuses, besides 401: 22.05 passes the RPC's
# failure through (-1 "Unspecified error" on reads, 5005 "Zero Bytes were transmitted or
# received" on a submit); later versions name it.
_AUTH_NUMBERS = {-1, 5005, 1007}
_AUTH_WORDS = ("Authentication failure", "Invalid authentication credential", "Protocol authentication error",
               "authentication", "Unspecified error", "Zero Bytes were transmitted")
STATES_PER_REQUEST = 100  # job ids per /jobs/state/ request (a repeated job_id query parameter)


class SlurmError(Exception):
    def __init__(self, message: str, *, kind: str = "server", permanent: bool = False, status: int | None = None,
                 body: Any = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.permanent = permanent
        self.status = status
        self.body = body


class SlurmClient:
    def __init__(self, settings: SlurmSettings) -> None:
        self.settings = settings
        parts = urlsplit(settings.url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._api: Api | None = Api.of(settings.api_version) if settings.api_version else None
        self._token: tuple[tuple[int, int, int], str] | None = None
        self.requests = 0  # every HTTP request made (the benchmark counts them)

    def __repr__(self) -> str:
        return f"<SlurmClient {self.settings.url} user={self.settings.user}>"

    @property
    def where(self) -> str:
        return f"slurmrestd at {self.settings.url} (connection {self.settings.conn_id!r})"

    # -- the version -------------------------------------------------------------------
    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = self.discover()
        return self._api

    def discover(self) -> Api:
        """The newest OpenAPI version both the daemon and this backend speak: from its
        /openapi/v3 document, else by asking each version's ping."""
        status, body = self._request("GET", "/openapi/v3", what="GET /openapi/v3")
        if status == 200 and isinstance(body, dict):
            served = versions.versions_served(body)
            chosen = versions.choose(served)
            if chosen:
                return Api(chosen)
            if served:
                raise SlurmError(f"{self.where} serves OpenAPI {', '.join(served)}, none of which this backend "
                                 f"speaks ({', '.join(sorted(versions.PREFERENCE))})", kind="refused", permanent=True)
        self._check(status, body, "GET /openapi/v3", allow_missing=True)
        for version in versions.PREFERENCE:  # no /openapi/v3 here: ask the versions themselves
            status, body = self._request("GET", Api(version).ping_path, what=f"GET ping v{version}")
            if status == 200:
                return Api(version)
            if status in (401, 403):
                self._check(status, body, f"GET {Api(version).ping_path}")
        raise SlurmError(f"{self.where} answers no OpenAPI version this backend speaks "
                         f"({', '.join(sorted(versions.PREFERENCE))}): set extra api_version", kind="refused",
                         permanent=True)

    # -- calls -------------------------------------------------------------------------
    def ping(self) -> None:
        self.call("GET", self.api.ping_path)

    def submit(self, request: JobRequest) -> int:
        body = self.call("POST", self.api.submit_path, self.api.submit_body(request), what="submit job "
                         f"{request.name}", fail=False)
        job_id = self.api.submitted_id(body)
        if job_id is None:
            raise SlurmError(f"{self.where} refused job {request.name}: "
                             f"{versions.error_text(body) or 'no job id in the answer'}", kind="refused",
                             permanent=True, body=body)
        return job_id

    def jobs(self) -> list[JobRecord]:
        return self.api.records(self.call("GET", self.api.jobs_path, what="list jobs"))

    def job_states(self, job_ids: list[int]) -> dict[int, tuple[str, ...]]:
        """The job_state of each job named that slurmctld knows (v0.0.42+: a few bytes a job,
        where a list of every job it remembers costs kilobytes a job)."""
        found: dict[int, tuple[str, ...]] = {}
        for start in range(0, len(job_ids), STATES_PER_REQUEST):
            chunk = job_ids[start:start + STATES_PER_REQUEST]
            body = self.call("GET", self.api.job_states_path, query={"job_id": [str(i) for i in chunk]},
                             what=f"job states of {len(chunk)} job(s)")
            found.update(versions.job_states(body))
        return found

    def job(self, job_id: int | str) -> JobRecord | None:
        """The job, or None when slurmctld does not know it (any more)."""
        try:
            body = self.call("GET", self.api.job_path(job_id), what=f"get job {job_id}")
        except SlurmError as exc:
            if exc.kind == "not_found":
                return None
            raise
        records = self.api.records(body)
        return records[0] if records else None

    def cancel(self, job_id: int | str) -> None:
        """scancel: slurmd sends SIGTERM, then SIGKILL after KillWait. A finished or unknown
        job is no error."""
        try:
            self.call("DELETE", self.api.job_path(job_id), what=f"cancel job {job_id}")
        except SlurmError as exc:
            if exc.kind != "not_found":
                raise

    def set_comment(self, job_id: int | str, comment: str) -> None:
        self.call("POST", self.api.job_path(job_id), self.api.comment_body(comment), what=f"update job {job_id}")

    def call(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
             what: str | None = None, fail: bool = True) -> JSONObject:
        what = what or f"{method} {path}"
        status, data = self._request(method, path, body, query=query, what=what)
        if fail or status in (401, 403) or not isinstance(data, dict):
            self._check(status, data, what)
        elif status >= 400 and self._looks_like_auth(data):
            self._check(status, data, what)
        return data if isinstance(data, dict) else {}

    # -- HTTP --------------------------------------------------------------------------
    def _token_value(self) -> str:
        """The JWT; a token file is read again when it changes (a cron job may refresh it)."""
        if self.settings.token or not self.settings.token_file:
            return self.settings.read_token()
        try:  # a rotation may rename a new file in place within the old one's mtime second
            found = os.stat(self.settings.token_file)
            version = (found.st_mtime_ns, found.st_ino, found.st_size)
        except OSError:
            version = (-1, -1, -1)
        if self._token is None or self._token[0] != version:
            self._token = (version, self.settings.read_token())
            mask(self._token[1])
        return self._token[1]

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                context = ssl.create_default_context(cafile=self.settings.ca_file)
                if not self.settings.verify_ssl:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.settings.timeout,
                                                         context=context)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.settings.timeout)
        return self._conn

    def _request(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
                 what: str) -> tuple[int, Any]:
        try:
            token = self._token_value()
        except SlurmConfigError as exc:
            raise SlurmError(str(exc), kind="auth", permanent=True) from None
        headers = {"X-SLURM-USER-NAME": self.settings.user, "X-SLURM-USER-TOKEN": token,
                   "Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        target = self._prefix + path + (f"?{urlencode(query, doseq=True)}" if query else "")
        with self._lock:
            for attempt in (1, 2):
                self.requests += 1
                try:
                    conn = self._connection()
                    conn.request(method, target, body=payload, headers=headers)
                    response = conn.getresponse()
                    raw = response.read()
                    if response.getheader("Connection", "").lower() == "close":
                        self._close()
                    break
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                        http.client.CannotSendRequest, http.client.ResponseNotReady) as exc:
                    self._close()  # a kept-alive connection the daemon closed: once more on a new one
                    if attempt == 2:
                        raise self._unreachable(what, exc) from None
                except (OSError, http.client.HTTPException) as exc:
                    self._close()
                    raise self._unreachable(what, exc) from None
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError:
            data = raw.decode("utf-8", errors="replace")
        return response.status, data

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()

    # -- errors ------------------------------------------------------------------------
    def _unreachable(self, what: str, exc: BaseException) -> SlurmError:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return SlurmError(f"cannot reach {self.where} ({what}): {why}: is slurmrestd running there? "
                          "(check the connection's host and port)", kind="unreachable")

    @staticmethod
    def _looks_like_auth(data: Any) -> bool:
        for err in versions.errors(data):
            if err["number"] in _AUTH_NUMBERS or any(w.lower() in err["text"].lower() for w in _AUTH_WORDS):
                return True
        return False

    def _check(self, status: int, data: Any, what: str, allow_missing: bool = False) -> None:
        if 200 <= status < 300:
            return
        if allow_missing and status == 404:
            return
        text = versions.error_text(data) if isinstance(data, dict) else " ".join(str(data).split())[:300]
        if status in (401, 403) or (status >= 500 and isinstance(data, dict) and self._looks_like_auth(data)):
            raise SlurmError(self._auth_message(what, status, text), kind="auth", permanent=True, status=status,
                             body=data)
        if isinstance(data, dict) and versions.is_invalid_job_id(data):
            raise SlurmError(f"{self.where}: {what}: {text}", kind="not_found", permanent=True, status=status,
                             body=data)
        if status == 404:
            raise SlurmError(f"{self.where}: {what}: HTTP 404 (this slurmrestd does not serve OpenAPI "
                             f"v{self.api_version_or_unknown()}: set extra api_version)", kind="refused",
                             permanent=True, status=status)
        raise SlurmError(f"{self.where}: {what} failed (HTTP {status}): {text or 'no error given'}",
                         kind="server", permanent=False, status=status, body=data)

    def api_version_or_unknown(self) -> str:
        return self._api.version if self._api else "?"

    def _auth_message(self, what: str, status: int, text: str) -> str:
        user = self.settings.user
        try:
            problem = token_problem(self._token_value(), user)
        except SlurmConfigError as exc:
            problem = str(exc)
        said = f" ({text})" if text else ""
        found = f": {problem}" if problem else ""
        return (f"{self.where} refused the credentials of user {user!r} ({what}: HTTP {status}{said}): the JWT "
                f"is wrong, expired or for another user{found}; mint one with `scontrol token username={user}` "
                "and set it as the connection's password (or its extra token_file)")

