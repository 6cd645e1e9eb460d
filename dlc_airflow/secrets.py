"""Env values from secrets: the spec's references, where they are resolved, and masking.

In a job's (or a role's) env, a value is a string or one of three sources:

    env:
      DB_PASSWORD: {secret: db-creds, key: password}          # a Kubernetes Secret's key
      HF_TOKEN: {airflow_variable: hf_token}                  # an Airflow Variable
      WAREHOUSE_PW: {airflow_connection: warehouse, field: password}
                    # a connection's login, password (default), host, port, schema, uri or extra.<key>

The spec (and so the DAG's serialized fields, the operator's `job`) only ever holds these
references. Where the values go:

- Kubernetes backends: a Secret source is a `valueFrom.secretKeyRef`. Airflow sources, and
  literal values whose names look secret (Airflow's own sensitive-name rules,
  `is_sensitive`), are resolved when the job is submitted into the job's own Secret
  (`<job>-env`, owned by the job's primary object, so it goes with the job) and referenced
  the same way: no value sits in the Job object. `render` shows that Secret with
  placeholders (`<airflow_variable hf_token>`); the runner fills them in (`fill_job_secret`).
- local backend: resolved at submit (a Secret source reads the local stand-in
  <root>/volumes/secret-<name>/<key>, where the secret mounts live) and handed to the detached
  supervisor through its stdin; spec.json keeps the references and `HIDDEN` for secret
  literals, and the supervisor masks the values in the replica logs it writes.
- masking: every value above is registered with Airflow's secrets masker in the task
  process before any job log is copied (`register`), and again in the triggerer from the
  references (`TriggerSecrets`), which is another process. Kubernetes Secret values are
  masked only where the identity may `get` that Secret (it reads nothing it may not).

Airflow is imported lazily: DAG files import the spec, and parse time matters.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from dlc_airflow.specfields import check_dns_subdomain, is_templated

if TYPE_CHECKING:
    from dlc_airflow.spec import DLCJob

log = logging.getLogger(__name__)

HIDDEN = "<hidden>"  # what spec.json holds instead of a secret literal
MIN_MASKED = 5  # Airflow's default [logging] min_length_masked_secret: shorter values are not masked
CONNECTION_FIELDS = ("login", "password", "host", "port", "schema", "uri")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_SHAPES = "{secret: <name>, key: <key>}, {airflow_variable: <name>} or {airflow_connection: <conn_id>, field: <field>}"


class SecretSourceError(ValueError):
    """A secret env value that cannot be had (no such variable, connection, field or key);
    the message names the env var and the source. Permanent: no retry creates a variable."""

    permanent = True


# -- the references ---------------------------------------------------------------------------


class _Ref(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def describe(self) -> str:
        raise NotImplementedError


class SecretKeyRef(_Ref):
    """`{secret: <name>, key: <key>}`: the key of a Kubernetes Secret in the job's namespace."""

    secret: str
    key: str

    def describe(self) -> str:
        return f"<secret {self.secret}/{self.key}>"


class AirflowVariableRef(_Ref):
    """`{airflow_variable: <name>}`: an Airflow Variable, read when the job is submitted."""

    airflow_variable: str

    def describe(self) -> str:
        return f"<airflow_variable {self.airflow_variable}>"


class AirflowConnectionRef(_Ref):
    """`{airflow_connection: <conn_id>, field: <field>}`: a field of an Airflow connection."""

    airflow_connection: str
    field: str = "password"

    def describe(self) -> str:
        return f"<airflow_connection {self.airflow_connection} {self.field}>"


AirflowRef = AirflowVariableRef | AirflowConnectionRef
Source = SecretKeyRef | AirflowVariableRef | AirflowConnectionRef
SOURCE_TYPES = (SecretKeyRef, AirflowVariableRef, AirflowConnectionRef)
_SOURCE_KEYS: dict[str, type[_Ref]] = {"secret": SecretKeyRef, "airflow_variable": AirflowVariableRef,
                                        "airflow_connection": AirflowConnectionRef}


def env_value(value: Any) -> Any:
    """One env value as the spec takes it: a string, or a source mapping made a reference.
    The messages are one line; pydantic puts the env var's location in front."""
    if isinstance(value, (str, _Ref)):
        return value
    if not isinstance(value, dict):
        raise ValueError(f"must be a string (quote numbers and booleans in YAML) or a source: {_SHAPES}; "
                         f"got {type(value).__name__}")
    keys = sorted(map(str, value))
    if "valueFrom" in value or "value_from" in value:
        raise ValueError("write a Kubernetes Secret's key as {secret: <name>, key: <key>}, not valueFrom")
    sources = [k for k in keys if k in _SOURCE_KEYS]
    if not sources:
        raise ValueError(f"{keys} is not a source: write {_SHAPES}")
    if len(sources) > 1:
        raise ValueError(f"give one source, not {' and '.join(sources)}")
    model = _SOURCE_KEYS[sources[0]]
    unknown = sorted(set(keys) - set(model.model_fields))
    if unknown:
        raise ValueError(f"unknown field {unknown[0]!r} of a {sources[0]} source: it takes "
                         f"{', '.join(model.model_fields)}")
    for field, given in value.items():
        if not isinstance(given, str) or not given.strip():
            raise ValueError(f"{sources[0]} source: {field} must be a non-empty string, not {given!r}")
    if model is SecretKeyRef:
        if "key" not in value:
            raise ValueError(f"{{secret: {value['secret']}}} needs key: which key of the Secret holds the value")
        check_dns_subdomain(value["secret"], "secret")
        if not is_templated(value["key"]) and (len(value["key"]) > 253 or not _SECRET_KEY.match(value["key"])):
            raise ValueError(f"key {value['key']!r} is not a Secret key (letters, digits, '-', '_', '.')")
    if model is AirflowConnectionRef:
        field = value.get("field", "password")
        if not is_templated(field) and field not in CONNECTION_FIELDS and not (
                field.startswith("extra.") and len(field) > len("extra.")):
            raise ValueError(f"field {field!r} of connection {value['airflow_connection']!r}: use one of "
                             f"{', '.join(CONNECTION_FIELDS)} or extra.<key>")
    return model.model_validate(value)


EnvValue = Annotated[str | SecretKeyRef | AirflowVariableRef | AirflowConnectionRef, BeforeValidator(env_value)]


def describe(value: Any) -> str:
    return value.describe() if isinstance(value, _Ref) else "<literal>"


def is_sensitive(name: str) -> bool:
    """Whether Airflow hides the value of a variable called `name` (its sensitive-name rules:
    its default names plus [core] sensitive_var_conn_names, unless hide_sensitive_var_conn_fields
    is off), whether or not its secrets masker is configured in this process."""
    from airflow.sdk._shared.secrets_masker import DEFAULT_SENSITIVE_FIELDS, SecretsMasker
    from airflow.sdk.configuration import conf

    masker = SecretsMasker()
    extra = conf.get("core", "sensitive_var_conn_names", fallback="") or ""
    masker.sensitive_variables_fields = sorted(
        set(DEFAULT_SENSITIVE_FIELDS) | {f.strip() for f in extra.split(",") if f.strip()})
    masker.hide_sensitive_var_conn_fields = conf.getboolean("core", "hide_sensitive_var_conn_fields", fallback=True)
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


def job_secret_name(name: str) -> str:
    from dlc_airflow.naming import child_name

    return child_name(name, "env")


def pod_env(job: DLCJob, name: str, role: str) -> dict[str, Any]:
    """The role's env for a pod spec: hidden values become references to the job's Secret
    (Secret sources stay references to theirs); other literals stay as they are."""
    hidden_entries(job)  # refuses two values for one key
    keys = {(e.where, e.name): e.key for e in entries(job) if e.hidden()}
    env: dict[str, Any] = {}
    for where, values in (("env", job.env), (f"roles.{role}.env", job.roles[role].env)):
        for n, v in values.items():  # the role's own entries win, as in DLCJob.role_env
            key = keys.get((where, n))
            env[n] = SecretKeyRef(secret=job_secret_name(name), key=key) if key else v
    return env


def job_secret(job: DLCJob, name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict | None:
    """The job's own Secret as render shows it: each value a placeholder naming its source
    (the runner resolves them at submit, `fill_job_secret`). None when nothing is hidden."""
    hidden = hidden_entries(job)
    if not hidden:
        return None
    metadata: dict = {"name": job_secret_name(name), "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    data = {e.key: (describe(e.value) if e.from_airflow else f"<{e.field}: literal, hidden>") for e in hidden}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "stringData": data}


# -- resolving --------------------------------------------------------------------------------


def resolve(entry: Entry, local_root: Path | None = None) -> str:
    """The value of one entry, read now. A Secret source is read only on the local backend
    (from its stand-in folder, `local_root`); on Kubernetes the kubelet reads it."""
    value = entry.value
    if isinstance(value, str):
        return value
    if isinstance(value, AirflowVariableRef):
        return _variable(entry, value.airflow_variable)
    if isinstance(value, AirflowConnectionRef):
        return _connection_field(entry, value)
    if isinstance(value, SecretKeyRef) and local_root is not None:
        return local_secret(entry, value, local_root)
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
    from airflow.sdk.exceptions import AirflowNotFoundException

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


def local_folder(root: Path, secret: str) -> Path:
    """Where the local backend keeps Secret `secret`: the folder its secret mounts use."""
    from dlc_airflow.naming import slug

    return Path(root) / "volumes" / f"secret-{slug(secret, 60)}"


def local_secret(entry: Entry, ref: SecretKeyRef, root: Path) -> str:
    path = local_folder(root, ref.secret) / ref.key
    try:
        return path.read_text().rstrip("\n")
    except OSError:
        raise SecretSourceError(f"{entry.field}: Secret {ref.secret!r} has no key {ref.key!r} on the local "
                                f"backend: put the value in {path}") from None


def local_values(job: DLCJob, root: Path) -> dict[str, dict[str, str]]:
    """What the local supervisor needs and spec.json must not hold: {where: {NAME: value}}
    for every Airflow source, Secret source and secret literal of the job."""
    out: dict[str, dict[str, str]] = {}
    for entry in entries(job):
        if entry.hidden() or isinstance(entry.value, SecretKeyRef):
            out.setdefault(entry.where, {})[entry.name] = resolve(entry, root)
    return out


def stored_spec(job: DLCJob) -> dict[str, Any]:
    """job.to_dict() with every secret literal replaced by HIDDEN (references stay)."""
    data = job.to_dict()
    for entry in entries(job):
        if entry.hidden() and isinstance(entry.value, str):
            if entry.where == "env":
                data["env"][entry.name] = HIDDEN
            else:
                data["roles"][entry.where.split(".")[1]]["env"][entry.name] = HIDDEN
    return data


def with_values(job: DLCJob, values: dict[str, dict[str, str]]) -> DLCJob:
    """The job with the values handed over (`local_values`) in place of references and
    HIDDEN. model_copy, not validation: an error message never quotes a value."""
    env = {**job.env, **values.get("env", {})}
    roles = {role: spec.model_copy(update={"env": {**spec.env, **values.get(f"roles.{role}.env", {})}})
             for role, spec in job.roles.items()}
    return job.model_copy(update={"env": env, "roles": roles})


def fill_job_secret(objects: list[dict], job: DLCJob, name: str) -> tuple[list[dict], list[str]]:
    """Rendered objects with the job's Secret holding the values (read now), and the values;
    raises SecretSourceError (naming the env var and the source) before anything is created."""
    hidden = hidden_entries(job)
    if not hidden:
        return objects, []
    data = {e.key: resolve(e) for e in hidden}
    secret_name = job_secret_name(name)
    for obj in objects:
        if obj.get("kind") == "Secret" and obj["metadata"]["name"] == secret_name:
            obj.pop("stringData", None)
            obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return objects, list(data.values())


# -- masking ----------------------------------------------------------------------------------


def maskable(values: Iterable[str]) -> list[str]:
    """The strings to mask for these values: each value and, for a multi-line one (a key
    file), each of its lines; never ones shorter than Airflow masks."""
    out: list[str] = []
    for value in values:
        for part in [value, *(value.splitlines() if "\n" in value else [])]:
            part = part.strip() if part is not value else part
            if len(part) >= MIN_MASKED and part not in out:
                out.append(part)
    return out


def register(values: Iterable[str]) -> None:
    """Register values with Airflow's secrets masker (this process, and the supervisor of a
    task or trigger process, which writes the log)."""
    from airflow.sdk.log import mask_secret

    for value in maskable(values):
        mask_secret(value)


def kube_secret_values(client: Any, namespace: str, refs: Iterable[SecretKeyRef], logger: Any = None) -> list[str]:
    """Values of Kubernetes Secret sources this identity may read (to mask them). Nothing is
    read it may not get (dlc-airflow's Role has no `get` on Secrets): those are named once."""
    from dlc_airflow.k8s.kinds import SECRET

    logger = logger or log
    values, unreadable = [], []
    for ref in dict.fromkeys(refs):
        try:
            if not client.may("get", SECRET, namespace, name=ref.secret):
                unreadable.append(ref.describe())
                continue
            obj = client.get(SECRET, ref.secret, namespace) or {}
            raw = (obj.get("data") or {}).get(ref.key)
            if raw:
                values.append(base64.b64decode(raw).decode("utf-8", errors="replace"))
        except Exception as exc:  # noqa: BLE001 - masking is best effort; the kubelet reports a missing Secret
            logger.debug("could not read %s to mask it: %s", ref.describe(), exc)
            unreadable.append(ref.describe())
    if unreadable:
        logger.info("not masked in this log: %s (this identity may not get them; grant get on those Secrets "
                    "by resourceNames to have them masked)", ", ".join(unreadable))
    return values


@dataclass(frozen=True)
class TriggerSecrets:
    """What the triggerer needs to mask the job's secret values: references, never values of
    Airflow sources (it reads them again), and the secret literals (already in the DAG; trigger
    kwargs are encrypted and never shown by the API)."""

    sources: tuple[dict, ...] = ()  # {"where", "name", "source": the Airflow source as in the spec}
    literals: tuple[str, ...] = ()
    secrets: tuple[dict, ...] = ()  # Kubernetes Secret sources

    def to_dict(self) -> dict:
        return {"sources": list(self.sources), "literals": list(self.literals), "secrets": list(self.secrets)}

    @classmethod
    def from_dict(cls, data: dict | None) -> TriggerSecrets:
        data = data or {}
        return cls(tuple(data.get("sources") or ()), tuple(data.get("literals") or ()),
                   tuple(data.get("secrets") or ()))

    @classmethod
    def of(cls, job: DLCJob) -> TriggerSecrets:
        sources, literals, kube = [], [], []
        for entry in entries(job):
            if entry.from_airflow:
                sources.append({"where": entry.where, "name": entry.name, "source": entry.value.model_dump()})
            elif isinstance(entry.value, SecretKeyRef):
                kube.append(entry.value.model_dump())
            elif entry.hidden():
                literals.append(entry.value)
        return cls(tuple(sources), tuple(dict.fromkeys(literals)), tuple(kube))

    def __bool__(self) -> bool:
        return bool(self.sources or self.literals or self.secrets)

    def register(self, runner: Any = None, logger: Any = None) -> None:
        """Mask them in this process (the triggerer's runner): Airflow sources read again
        (one that fails is only logged: the job runs already), literals, and readable
        Kubernetes Secrets (or local stand-ins)."""
        logger = logger or log
        values = list(self.literals)
        for source in self.sources:
            try:
                entry = Entry(source["where"], source["name"], env_value(source["source"]), source["name"])
                values.append(resolve(entry))
            except (SecretSourceError, ValueError, KeyError) as exc:
                logger.warning("cannot mask an env value of the job: %s", exc)
        refs = [SecretKeyRef.model_validate(s) for s in self.secrets]
        values.extend(_readable(refs, runner, logger))
        register(values)


def _readable(refs: list[SecretKeyRef], runner: Any, logger: Any) -> Iterator[str]:
    if not refs or runner is None:
        return
    local = getattr(runner, "local", None)
    if local is not None:  # the local backend: its stand-in files
        for ref in refs:
            try:
                yield local_secret(Entry("env", "?", ref, "?"), ref, local.root)
            except SecretSourceError:
                continue
        return
    client = getattr(runner, "client", None)
    if client is not None:
        yield from kube_secret_values(client, runner.namespace, refs, logger)


def register_job(job: DLCJob, runner: Any = None, logger: Any = None) -> TriggerSecrets:
    """The task side, before the job is submitted (or adopted) and any of its logs are read:
    resolve the Airflow sources (SecretSourceError naming the env var and the source: nothing
    is created then), mask them with the secret literals and the readable Secret sources, and
    return what a trigger needs to do the same."""
    values = [resolve(e) for e in entries(job) if e.from_airflow]
    values += [e.value for e in entries(job) if not e.from_airflow and e.hidden()]
    refs = [e.value for e in entries(job) if isinstance(e.value, SecretKeyRef)]
    values.extend(_readable(refs, runner, logger or log))
    register(values)
    return TriggerSecrets.of(job)


def redactor(values: Iterable[str]) -> Any:
    """bytes -> bytes replacing each value with *** (the local supervisor's replica logs)."""
    parts = sorted((v.encode() for v in maskable(values)), key=len, reverse=True)
    if not parts:
        return None
    pattern = re.compile(b"|".join(re.escape(p) for p in parts))
    return lambda data: pattern.sub(b"***", data)
