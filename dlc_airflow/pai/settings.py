"""The `dlc_pai` connection's settings: how dlc-airflow reaches a DLC workspace.

| connection field     | meaning                                                           |
|----------------------|-------------------------------------------------------------------|
| login / password     | AccessKey ID / AccessKey secret (leave both empty for a RAM role) |
| extra.security_token | STS token (with a temporary AccessKey pair from AssumeRole)       |
| extra.region_id      | region, e.g. cn-hangzhou (required)                               |
| extra.workspace_id   | DLC workspace id (required)                                       |
| extra.endpoint       | endpoint override, e.g. pai-dlc-vpc.cn-hangzhou.aliyuncs.com or   |
|                      | http://127.0.0.1:8080 (the tests' stand-in); host works too       |
| extra.resource_id    | default quota (ResourceId) when a job names no scheduling.queue   |
| extra.poll_interval  | seconds between the shared poller's ListJobs calls (default 15)   |

Without login and password the SDK's default credentials chain is used (environment
variables, an OIDC / RRSA token, the CLI profile, an ECS RAM role). The AccessKey secret and
the STS token are registered with Airflow's secrets masker as soon as they are read and are
kept out of every repr, log line and error. (hook.py is the connection's Airflow face;
this module imports no Airflow, so the benchmark and the CLI read settings too.)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runner import Connection

CONN_TYPE = "dlc_pai"
DEFAULT_CONN_ID = "pai_default"
DEFAULT_POLL_INTERVAL = 15.0


class PaiConfigError(ValueError):
    """The connection cannot be used as it is; the message names the field to set."""

    permanent = True


@dataclass(frozen=True)
class PaiSettings:
    conn_id: str
    region_id: str
    workspace_id: str
    endpoint: str | None = None
    access_key_id: str | None = None
    access_key_secret: str | None = field(default=None, repr=False)
    security_token: str | None = field(default=None, repr=False)
    resource_id: str | None = None
    poll_interval: float = DEFAULT_POLL_INTERVAL
    poll_max_interval: float = 300.0
    list_page_size: int = 100
    read_timeout_ms: int = 30_000
    connect_timeout_ms: int = 5_000

    @property
    def auth(self) -> str:
        if not self.access_key_id:
            return "default credentials chain"
        return "STS token" if self.security_token else "AccessKey"

    def key(self) -> str:
        """Who talks to which workspace where: waits with the same key share one poller."""
        ident = f"{self.endpoint or ''}|{self.region_id}|{self.workspace_id}|{self.access_key_id or 'chain'}"
        return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _number(extras: JSONObject, name: str, default: float, conn_id: str, *, least: float) -> float:
    raw = extras.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise PaiConfigError(f"connection {conn_id!r}: extra {name}={raw!r} is not a number") from None
    if value < least:
        raise PaiConfigError(f"connection {conn_id!r}: extra {name}={raw!r} must be at least {least}")
    return value


def settings_from(conn_id: str, connection: Connection | None, namespace: str | None = None) -> PaiSettings:
    """PaiSettings from an Airflow Connection (any object with login, password, host,
    extra_dejson); `namespace` (the operator's) overrides the workspace."""
    extras = dict(getattr(connection, "extra_dejson", None) or {})
    login = getattr(connection, "login", None) or None
    secret = getattr(connection, "password", None) or None
    token = extras.get("security_token") or None
    _mask(secret, token)
    if bool(login) != bool(secret):
        missing = "password (the AccessKey secret)" if login else "login (the AccessKey ID)"
        raise PaiConfigError(f"connection {conn_id!r}: {missing} is empty: set both login and password, "
                             "or neither to use a RAM role / the default credentials chain")
    if token and not login:
        raise PaiConfigError(f"connection {conn_id!r}: extra security_token needs the temporary AccessKey pair "
                             "from the same AssumeRole call in login and password")
    region = extras.get("region_id") or extras.get("region")
    if not region:
        raise PaiConfigError(f"connection {conn_id!r}: extra region_id is missing: set it to the DLC region, "
                             "e.g. cn-hangzhou")
    workspace = namespace or extras.get("workspace_id")
    if not workspace:
        raise PaiConfigError(f"connection {conn_id!r}: extra workspace_id is missing: set it to the DLC "
                             "workspace id (the PAI console shows it)")
    endpoint = extras.get("endpoint") or getattr(connection, "host", None) or None
    port = getattr(connection, "port", None)
    if endpoint and port and "://" not in str(endpoint) and ":" not in str(endpoint):
        endpoint = f"{endpoint}:{port}"
    interval = _number(extras, "poll_interval", DEFAULT_POLL_INTERVAL, conn_id, least=0.05)
    return PaiSettings(
        conn_id=conn_id, region_id=str(region), workspace_id=str(workspace),
        endpoint=str(endpoint) if endpoint else None, access_key_id=login, access_key_secret=secret,
        security_token=token, resource_id=extras.get("resource_id") or None, poll_interval=interval,
        poll_max_interval=_number(extras, "poll_max_interval", max(300.0, interval), conn_id, least=interval),
        list_page_size=int(_number(extras, "list_page_size", 100, conn_id, least=1)),
        read_timeout_ms=int(_number(extras, "read_timeout", 30, conn_id, least=1) * 1000),
    )


def _mask(*secrets: str | None) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # outside Airflow (the CLI, the benchmark): nothing to mask for
        return
    for secret in secrets:
        if secret:
            mask_secret(secret)


def get_connection(conn_id: str) -> Connection:
    from airflow.sdk.bases.hook import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException and friends: say what to create
        raise PaiConfigError(f"connection {conn_id!r} could not be read ({type(exc).__name__}): create a "
                             f"{CONN_TYPE} connection with region_id and workspace_id") from None
