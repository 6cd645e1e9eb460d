"""Masking a job's secret values in the logs: Airflow's secrets masker in the task process and
in the triggerer, and the redactor of the replica logs a backend writes itself."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlc_airflow.errors import SecretSourceError
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.secrets.resolve import Entry, entries, resolve
from dlc_airflow.spec.envsource import AirflowConnectionRef, AirflowVariableRef, SecretKeyRef, env_value

if TYPE_CHECKING:
    from dlc_airflow.runner import JobRunner, Log
    from dlc_airflow.spec import DLCJob

log = logging.getLogger(__name__)

MIN_MASKED = 5  # Airflow's default [logging] min_length_masked_secret: shorter values are not masked


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


@dataclass(frozen=True)
class TriggerSecrets:
    """What the triggerer needs to mask the job's secret values: references, never values of
    Airflow sources (it reads them again), and the secret literals (already in the DAG; trigger
    kwargs are encrypted and never shown by the API)."""

    sources: tuple[JSONObject, ...] = ()  # {"where", "name", "source": the Airflow source as in the spec}
    literals: tuple[str, ...] = ()
    secrets: tuple[JSONObject, ...] = ()  # Kubernetes Secret sources

    def to_dict(self) -> JSONObject:
        return {"sources": list(self.sources), "literals": list(self.literals), "secrets": list(self.secrets)}

    @classmethod
    def from_dict(cls, data: JSONObject | None) -> TriggerSecrets:
        data = data or {}
        return cls(tuple(data.get("sources") or ()), tuple(data.get("literals") or ()),
                   tuple(data.get("secrets") or ()))

    @classmethod
    def of(cls, job: DLCJob) -> TriggerSecrets:
        sources: list[JSONObject] = []
        literals: list[str] = []
        kube: list[JSONObject] = []
        for entry in entries(job):
            if isinstance(entry.value, (AirflowVariableRef, AirflowConnectionRef)):
                sources.append({"where": entry.where, "name": entry.name, "source": entry.value.model_dump()})
            elif isinstance(entry.value, SecretKeyRef):
                kube.append(entry.value.model_dump())
            elif entry.hidden() and isinstance(entry.value, str):
                literals.append(entry.value)
        return cls(tuple(sources), tuple(dict.fromkeys(literals)), tuple(kube))

    def __bool__(self) -> bool:
        return bool(self.sources or self.literals or self.secrets)

    def register(self, runner: JobRunner | None = None, logger: Log | None = None) -> None:
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


def _readable(refs: list[SecretKeyRef], runner: JobRunner | None, logger: Log) -> list[str]:
    """The values of Secret sources, where the job's runner can read them (its optional
    SecretReader capability: readable Kubernetes Secrets, the local stand-ins)."""
    from dlc_airflow.runner import SecretReader

    if not refs or not isinstance(runner, SecretReader):
        return []
    return runner.secret_values(refs, logger)


def register_job(job: DLCJob, runner: JobRunner | None = None, logger: Log | None = None) -> TriggerSecrets:
    """The task side, before the job is submitted (or adopted) and any of its logs are read:
    resolve the Airflow sources (SecretSourceError naming the env var and the source: nothing
    is created then), mask them with the secret literals and the readable Secret sources, and
    return what a trigger needs to do the same."""
    values = [resolve(e) for e in entries(job) if e.hidden()]  # Airflow sources read now, literals as they are
    refs = [e.value for e in entries(job) if isinstance(e.value, SecretKeyRef)]
    values.extend(_readable(refs, runner, logger or log))
    register(values)
    return TriggerSecrets.of(job)


Redact = Callable[[bytes], bytes]


def redactor(values: Iterable[str]) -> Redact | None:
    """bytes -> bytes replacing each value with *** (the local supervisor's replica logs)."""
    parts = sorted((v.encode() for v in maskable(values)), key=len, reverse=True)
    if not parts:
        return None
    pattern = re.compile(b"|".join(re.escape(p) for p in parts))
    return lambda data: pattern.sub(b"***", data)
