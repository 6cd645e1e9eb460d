"""Reading a job's secret env values: its entries, which are hidden, and their values now.

A hidden entry's value must not be written where people read (a job object, spec.json, a
scheduler's job state, a managed service's request): an Airflow source, or a literal under a
secret-looking name. Airflow is imported when a value is read, never at import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlc_airflow.errors import SecretSourceError
from dlc_airflow.spec.envsource import (
    CONNECTION_FIELDS,
    AirflowConnectionRef,
    AirflowVariableRef,
    SecretKeyRef,
    describe,
)

if TYPE_CHECKING:
    from dlc_airflow.spec import DLCJob

HIDDEN = "<hidden>"  # what a kept spec holds instead of a secret literal (dlc_airflow.specpack)


def is_sensitive(name: str) -> bool:
    """Whether Airflow hides the value of a variable called `name` (its sensitive-name rules:
    its default names plus [core] sensitive_var_conn_names, unless hide_sensitive_var_conn_fields
    is off), whether or not its secrets masker is configured in this process."""
    from airflow.sdk._shared.secrets_masker import DEFAULT_SENSITIVE_FIELDS, SecretsMasker

    from dlc_airflow.airflow.compat import config

    conf = config()
    if not conf.getboolean("core", "hide_sensitive_var_conn_fields", fallback=True):
        return False  # read here: Airflow 3.1's masker reads it from airflow.settings, once per process
    masker = SecretsMasker()
    extra = conf.get("core", "sensitive_var_conn_names", fallback="") or ""
    masker.sensitive_variables_fields = sorted(
        set(DEFAULT_SENSITIVE_FIELDS) | {f.strip() for f in extra.split(",") if f.strip()})
    masker.hide_sensitive_var_conn_fields = True
    return bool(masker.should_hide_value_for_key(name))


# -- the env entries of a job -----------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One env var of the spec: where it is written, its name and value, and its key in the
    job's own Secret (Kubernetes)."""

    where: str  # "env" or "roles.<role>.env"
    name: str
    value: Any  # str or a source
    key: str

    @property
    def field(self) -> str:
        return f"{self.where}.{self.name}"

    @property
    def from_airflow(self) -> bool:
        return isinstance(self.value, (AirflowVariableRef, AirflowConnectionRef))

    def hidden(self) -> bool:
        """Its value must not be written where people read: an Airflow source, or a literal
        under a secret-looking name."""
        return self.from_airflow or (isinstance(self.value, str) and bool(self.value) and is_sensitive(self.name))


def entries(job: DLCJob) -> list[Entry]:
    """Every env entry of the job: job-level first, then each role's own. A role entry equal
    to the job's shares its key; another one is keyed `<role>.<NAME>`."""
    out = [Entry("env", n, v, n) for n, v in job.env.items()]
    for role, spec in job.roles.items():
        for n, v in spec.env.items():
            key = n if job.env.get(n) == v else f"{role}.{n}"
            out.append(Entry(f"roles.{role}.env", n, v, key))
    return out


def hidden_entries(job: DLCJob) -> list[Entry]:
    """The entries that go through the job's own Secret (Kubernetes) or stdin (local)."""
    found: dict[str, Entry] = {}
    for entry in entries(job):
        if not entry.hidden():
            continue
        other = found.get(entry.key)
        if other is not None and other.value != entry.value:  # only `env: {worker.X: ..}` with a role worker
            raise SecretSourceError(f"{other.field} and {entry.field} would share key {entry.key!r} of the job's "
                                    "Secret: rename one")
        found.setdefault(entry.key, entry)
    return list(found.values())


# -- reading ----------------------------------------------------------------------------------


def resolve(entry: Entry) -> str:
    """The value of one entry, read now: a literal, or an Airflow source. A Secret source is
    read where the job runs (the kubelet; the local backend's stand-in: `hidden_values`)."""
    value = entry.value
    if isinstance(value, str):
        return value
    if isinstance(value, AirflowVariableRef):
        return _variable(entry, value.airflow_variable)
    if isinstance(value, AirflowConnectionRef):
        return _connection_field(entry, value)
    raise SecretSourceError(f"{entry.field}: {describe(value)} is read by the kubelet, not here")


def _variable(entry: Entry, key: str) -> str:
    from airflow.sdk import Variable

    try:
        value = Variable.get(key, default=None)
    except Exception as exc:  # noqa: BLE001 - a secrets backend that failed: name the source
        raise _lookup_failed(entry, f"Airflow variable {key!r}", exc) from None
    if value is None:
        raise SecretSourceError(f"{entry.field}: Airflow variable {key!r} does not exist: create it "
                                f"(airflow variables set {key} ...) or fix the name")
    return value if isinstance(value, str) else json.dumps(value)


def _connection_field(entry: Entry, ref: AirflowConnectionRef) -> str:
    from airflow.sdk import BaseHook

    from dlc_airflow.airflow.compat import AirflowNotFoundException

    conn_id, field = ref.airflow_connection, ref.field
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise SecretSourceError(f"{entry.field}: Airflow connection {conn_id!r} does not exist: create it "
                                "or fix the conn_id") from None
    except Exception as exc:  # noqa: BLE001 - a failing secrets backend: name the source
        raise _lookup_failed(entry, f"Airflow connection {conn_id!r}", exc) from None
    if field == "uri":
        value: Any = conn.get_uri()
    elif field.startswith("extra."):
        value = (conn.extra_dejson or {}).get(field[len("extra."):])
    else:
        value = getattr(conn, field, None)
    if value is None or value == "":
        raise SecretSourceError(f"{entry.field}: Airflow connection {conn_id!r} has no {field}: set it, or "
                                f"name another field ({', '.join(CONNECTION_FIELDS)}, extra.<key>)")
    return value if isinstance(value, str) else json.dumps(value)


def _lookup_failed(entry: Entry, what: str, exc: Exception) -> SecretSourceError:
    # A backend's own error may be retried; the message stays one line.
    error = SecretSourceError(f"{entry.field}: reading {what} failed: {' '.join(str(exc).split())[:300]}")
    error.permanent = False  # a backend outage, not a wrong name
    return error


SecretRead = Callable[[Entry, SecretKeyRef], str]


def hidden_values(job: DLCJob, read_secret: SecretRead | None = None) -> dict[str, dict[str, str]]:
    """{where: {NAME: value}} of every hidden entry (Airflow sources read now), and of every
    Secret source too when the backend reads those itself (`read_secret`: the local stand-ins)."""
    out: dict[str, dict[str, str]] = {}
    for entry in entries(job):
        if read_secret is not None and isinstance(entry.value, SecretKeyRef):
            out.setdefault(entry.where, {})[entry.name] = read_secret(entry, entry.value)
        elif entry.hidden():
            out.setdefault(entry.where, {})[entry.name] = resolve(entry)
    return out


def with_values(job: DLCJob, values: dict[str, dict[str, str]]) -> DLCJob:
    """The job with the values handed over (`hidden_values`) in place of references and
    HIDDEN. model_copy, not validation: an error message never quotes a value."""
    env = {**job.env, **values.get("env", {})}
    roles = {role: spec.model_copy(update={"env": {**spec.env, **values.get(f"roles.{role}.env", {})}})
             for role, spec in job.roles.items()}
    return job.model_copy(update={"env": env, "roles": roles})
