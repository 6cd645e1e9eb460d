"""Where the admin's policy (dlc_airflow.policy) comes from, in layers: the backend's
defaults, then the Airflow config `[dlc_airflow] policy` (JSON: the floor), then the
connection's extra `dlc_policy`, which may only narrow the floor unless the config says
`"allow_connection_override": true`. All of them are the admin's: a DAG cannot choose a
laxer policy by choosing a connection. The source string names every layer that applied."""

from __future__ import annotations

import json
from typing import Any

from dlc_airflow.airflow.settings import SECTION
from dlc_airflow.policy import DELEGATION, Policy, PolicyError, defaults, enforce, layered, parse_policy, widening
from dlc_airflow.spec import DLCJob

CONFIG_SECTION, CONFIG_KEY = SECTION, "policy"
CONFIG_SOURCE = f"the Airflow config [{CONFIG_SECTION}] {CONFIG_KEY}"
EXTRA_KEY = "dlc_policy"


def policy_for(backend: str, conn_id: str | None, connection: Any | None = None) -> tuple[Policy, str]:
    """The policy a job on `backend` through `conn_id` runs under, and where it comes from
    (the registry says whether the backend has a connection and isolates its jobs)."""
    from dlc_airflow.registry import entry

    found = entry(backend)
    return load_policy(conn_id if found.connection else None, connection, isolated=found.isolated)


def check_at_parse_time(backend: str, job: DLCJob) -> None:
    """The policy at DAG parse time, where it needs no connection (the local backend: the
    config over the defaults) and the job holds no template (a templated value is checked
    when the task runs): 100,000 local replicas fail before the DAG is even scheduled."""
    from dlc_airflow.registry import entry
    from dlc_airflow.spec.fields import templated_anywhere

    if entry(backend).connection or templated_anywhere(job.to_dict()):
        return
    policy, source = policy_for(backend, None)
    enforce(policy, job, source)


def load_policy(conn_id: str | None, connection: Any | None = None, *,
                isolated: bool = True) -> tuple[Policy, str]:
    """(policy, where it comes from); `connection` when the caller has read it already."""
    floor, source = floor_policy(isolated)
    if connection is None and conn_id:
        connection = _connection(conn_id)
    raw = (connection.extra_dejson or {}).get(EXTRA_KEY) if connection is not None else None
    if raw is None:
        return floor, source
    where = f"connection {conn_id!r} extra {EXTRA_KEY}"
    narrowing = parse_policy(_json(raw, where), where)
    if DELEGATION in narrowing.model_fields_set:
        raise PolicyError(f"invalid dlc policy in {where}: {DELEGATION}: only {CONFIG_SOURCE} can delegate; "
                          f"remove it from the connection")
    policy = layered(floor, narrowing)
    if floor.allow_connection_override:
        return policy, f"{where} (delegated by {source})"
    wider = widening(floor, policy)
    if wider:
        raise PolicyError(f"refused by policy: {where} widens {source}: {wider}; a connection may only narrow "
                          f"it: ask your Airflow admin to allow it in [{CONFIG_SECTION}] {CONFIG_KEY}, or to "
                          f"set {DELEGATION}: true there")
    return policy, f"{source}, narrowed by {where}"


def floor_policy(isolated: bool = True, raw: Any | None = None, where: str = CONFIG_SOURCE) -> tuple[Policy, str]:
    """The backend's defaults with the admin's policy over them, and its source: `raw` read
    from `where` (a policy file), else the Airflow config's."""
    if raw is None:
        raw = _config()
    base = defaults(isolated)
    name = "the default policy" if isolated else "the local backend's default policy"
    if not raw:
        return base, f"{name} (no [{CONFIG_SECTION}] {CONFIG_KEY} is set)"
    admin = parse_policy(_json(raw, where), where)
    source = where if isolated else f"{where} (over the local backend's defaults)"
    return layered(base, admin).model_copy(update={DELEGATION: admin.allow_connection_override}), source


def _config() -> Any:
    try:
        from airflow.configuration import conf
    except ImportError:  # the CLI without Airflow: the defaults (or --policy FILE)
        return None
    return conf.get(CONFIG_SECTION, CONFIG_KEY, fallback=None)


def _json(raw: Any, source: str) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise PolicyError(f"invalid dlc policy in {source}: not JSON ({exc})") from None
    return raw


def _connection(conn_id: str) -> Any | None:
    from airflow.sdk.bases.hook import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception:  # noqa: BLE001 - no such connection: the config or the defaults apply
        return None
