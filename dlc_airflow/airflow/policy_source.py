"""Where the admin's policy (dlc_airflow.policy) comes from: the connection's extra
`dlc_policy`, else the Airflow config `[dlc_airflow] policy` (JSON), else the safe defaults.
Both are the admin's: a DAG author cannot change either."""

from __future__ import annotations

import json
from typing import Any

from dlc_airflow.policy import DEFAULT, Policy, PolicyError, parse_policy

CONFIG_SECTION, CONFIG_KEY = "dlc_airflow", "policy"
EXTRA_KEY = "dlc_policy"


def load_policy(conn_id: str | None, connection: Any | None = None) -> tuple[Policy, str]:
    """(policy, where it comes from); `connection` when the caller has read it already."""
    if connection is None and conn_id:
        connection = _connection(conn_id)
    if connection is not None:
        raw = (connection.extra_dejson or {}).get(EXTRA_KEY)
        if raw is not None:
            source = f"connection {conn_id!r} extra {EXTRA_KEY}"
            return parse_policy(_json(raw, source), source), source
    from airflow.configuration import conf

    raw = conf.get(CONFIG_SECTION, CONFIG_KEY, fallback=None)
    if raw:
        source = f"the Airflow config [{CONFIG_SECTION}] {CONFIG_KEY}"
        return parse_policy(_json(raw, source), source), source
    where = f"connection {conn_id!r} extra {EXTRA_KEY}" if conn_id else f"[{CONFIG_SECTION}] {CONFIG_KEY}"
    return DEFAULT, f"the default policy (set {where} to change it)"


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
