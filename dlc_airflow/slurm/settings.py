"""The `slurm` connection's settings, read once into a plain dataclass.

    conn_type  slurm
    host       slurmrestd URL (http://slurm-head:6820), or a host name with `port` (and extra scheme)
    login      the Slurm user jobs run as (the JWT's user)
    password   the JWT (scontrol token username=<login>); or extra token_file: a file holding it
               (re-read when it changes: a cron job may refresh it before it expires)
    extra      partition, account, qos: defaults for every job (scheduling.queue / priority_class win)
               spot_partition, spot_qos: where scheduling.spot sends a job (preemptible)
               job_root: a folder every node and the Airflow workers see: job folders (logs,
                   outputs, exit codes) go there (default /tmp/dlc-airflow-slurm)
               python: the interpreter on the nodes that has dlc-airflow (the prelude runs in
                   it; its folder comes first on the job's PATH); default: this process's
               path: PATH of the batch script before that (default /usr/local/bin:/usr/bin:/bin)
               api_version: e.g. "0.0.38" or "0.0.41"; default: the newest the daemon serves
               poll_interval: seconds between two job lists of the shared poller (default 2)
               token_grace: seconds a refused token file has to be rotated before the waits
                   on the cluster fail (default 60; a refused password token fails them at once)
               timeout: seconds per HTTP request (default 30); verify_ssl, ca_file (https)

The token never leaves this object but as the X-SLURM-USER-TOKEN header: it is not in its
repr, in error messages, in the job's environment or in anything the job writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runner import Connection
from dlc_airflow.slurm.api import parse_version

DEFAULT_JOB_ROOT = "/tmp/dlc-airflow-slurm"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_POLL = 2.0
DEFAULT_TOKEN_GRACE = 60.0
CONN_TYPE = "slurm"


class SlurmConfigError(ValueError):
    """The connection cannot be used as it is (permanent: no retry helps); names the field."""

    permanent = True


@dataclass(frozen=True)
class SlurmSettings:
    conn_id: str
    url: str  # scheme://host:port, no trailing slash
    user: str
    token: str = field(default="", repr=False)
    token_file: str | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    spot_partition: str | None = None
    spot_qos: str | None = None
    job_root: str = DEFAULT_JOB_ROOT
    python: str = field(default_factory=lambda: sys.executable)
    path: str = DEFAULT_PATH
    api_version: str | None = None
    poll_interval: float = DEFAULT_POLL
    token_grace: float = DEFAULT_TOKEN_GRACE
    timeout: float = 30.0
    verify_ssl: bool = True
    ca_file: str | None = None

    @property
    def cluster_key(self) -> tuple[str, str, str]:
        """Jobs of one cluster seen by one user with one credential: what a shared poller
        lists. Two connections with different tokens do not share a poller: one's expired
        token must not end (or carry) the other's waits."""
        credential = self.token_file or "password:" + hashlib.sha256(self.token.encode()).hexdigest()
        return (self.url, self.user, credential)

    def read_token(self) -> str:
        """The JWT: the password, else the token file's content (read now)."""
        if self.token:
            return self.token
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip().removeprefix("SLURM_JWT=")
            except OSError as exc:
                raise SlurmConfigError(f"slurm connection {self.conn_id!r}: cannot read token_file "
                                       f"{self.token_file}: {exc.strerror}") from None
        raise SlurmConfigError(f"slurm connection {self.conn_id!r} has no JWT: set its password to a token "
                               f"(scontrol token username={self.user}) or extra token_file")

    @classmethod
    def from_connection(cls, conn: Connection, conn_id: str) -> SlurmSettings:
        """From an Airflow Connection (or anything with host, port, login, password, extra_dejson)."""
        extra = dict(getattr(conn, "extra_dejson", None) or {})
        conn_type = getattr(conn, "conn_type", None)
        if conn_type not in (None, "", CONN_TYPE):
            raise SlurmConfigError(f"connection {conn_id!r} is a {conn_type!r} connection, not slurm: give the "
                                   "slurm backend a connection of type slurm (conn_id=...)")
        url = _url(conn_id, getattr(conn, "host", None) or extra.get("url"), getattr(conn, "port", None),
                   extra.get("scheme"))
        user = getattr(conn, "login", None) or extra.get("user")
        if not user:
            raise SlurmConfigError(f"slurm connection {conn_id!r} has no login: set it to the Slurm user "
                                   "jobs run as (the JWT's user name)")
        version = extra.get("api_version")
        try:
            version = parse_version(version, f"slurm connection {conn_id!r} extra api_version") if version else None
            poll = float(extra.get("poll_interval", DEFAULT_POLL))
            timeout = float(extra.get("timeout", 30.0))
            grace = float(extra.get("token_grace", DEFAULT_TOKEN_GRACE))
        except (TypeError, ValueError) as exc:
            raise SlurmConfigError(str(exc) if "api_version" in str(exc) else
                                   f"slurm connection {conn_id!r}: poll_interval, timeout and token_grace are "
                                   f"seconds ({exc})") from None
        if poll <= 0 or timeout <= 0 or grace < 0:
            raise SlurmConfigError(f"slurm connection {conn_id!r}: poll_interval and timeout must be positive, "
                                   "token_grace zero or more")
        job_root = str(extra.get("job_root") or DEFAULT_JOB_ROOT)
        if not job_root.startswith("/"):
            raise SlurmConfigError(f"slurm connection {conn_id!r}: job_root {job_root!r} must be an absolute path "
                                   "(a folder every node sees)")
        return cls(
            conn_id=conn_id, url=url, user=str(user),
            token=str(getattr(conn, "password", None) or extra.get("token") or ""),
            token_file=extra.get("token_file") or None,
            partition=extra.get("partition") or None, account=extra.get("account") or None,
            qos=extra.get("qos") or None, spot_partition=extra.get("spot_partition") or None,
            spot_qos=extra.get("spot_qos") or None, job_root=job_root.rstrip("/") or "/",
            python=str(extra.get("python") or sys.executable), path=str(extra.get("path") or DEFAULT_PATH),
            api_version=version, poll_interval=poll, token_grace=grace, timeout=timeout,
            verify_ssl=_bool(extra.get("verify_ssl", True)), ca_file=extra.get("ca_file") or None,
        )


def _url(conn_id: str, host: Any, port: Any, scheme: Any) -> str:
    if not host:
        raise SlurmConfigError(f"slurm connection {conn_id!r} has no host: set it to the slurmrestd URL "
                               "(http://<host>:6820)")
    text = str(host).strip().rstrip("/")
    if "://" not in text:
        text = f"{scheme or 'http'}://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SlurmConfigError(f"slurm connection {conn_id!r}: host {host!r} is not an http(s) URL of slurmrestd")
    netloc = parts.netloc
    if port and not parts.port:
        netloc = f"{netloc}:{int(port)}"
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off")
    return bool(value)


def token_claims(token: str) -> JSONObject | None:
    """The JWT's claims (exp, iat, sun...), read without verifying it; None if it is not a
    JWT. For error messages only: the signature is slurmctld's business."""
    parts = token.strip().split(".")
    if len(parts) != 3:
        return None
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, TypeError):
        return None
    return claims if isinstance(claims, dict) else None


def token_problem(token: str, user: str, now: float | None = None) -> str:
    """What is visibly wrong with the token ('' when nothing is): not a JWT, expired, or
    minted for another user. Never quotes the token."""
    claims = token_claims(token)
    if claims is None:
        return "the token is not a JWT (three base64 parts)"
    now = time.time() if now is None else now
    exp = claims.get("exp")
    if isinstance(exp, (int, float)) and exp <= now:
        return f"the JWT expired at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(exp))}"
    sun = claims.get("sun") or claims.get("username")
    if sun and sun != user:
        return f"the JWT is for user {sun!r}, the connection's login is {user!r}"
    return ""


def env_settings(conn_id: str = "slurm_default") -> SlurmSettings | None:
    """Settings from DLC_SLURM_URL / DLC_SLURM_USER / DLC_SLURM_TOKEN_FILE (scripts/slurm-local
    env), for the CLI and benchmarks; None when they are not set."""
    url = os.environ.get("DLC_SLURM_URL")
    if not url:
        return None

    class _Conn:
        host, port, login, password, conn_type = url, None, os.environ.get("DLC_SLURM_USER"), None, CONN_TYPE
        extra_dejson = {"token_file": os.environ.get("DLC_SLURM_TOKEN_FILE")}

    return SlurmSettings.from_connection(_Conn(), conn_id)


def mask(secret: str) -> None:
    """Register the token with Airflow's secrets masker of this process (when Airflow is there)."""
    if not secret:
        return
    try:
        from airflow.sdk.log import mask_secret

        mask_secret(secret)
    except Exception:  # noqa: BLE001 - no Airflow (the CLI), or outside a task: nothing to mask in
        pass
