"""The admin's policy: what a DAG may ask for on a shared deployment (pure).

The policy is the admin's decision, never the DAG's. It is made of layers (`layered`):

1. the backend's defaults (`defaults`): safe where the backend isolates a job from the
   worker (no host paths, no ServiceAccount but the namespace's default, every other
   storage type, any registry, no size limit); on the local backend, whose jobs are
   processes of the worker's user with its rights anyway, any host path, and at most
   `local_replica_cap()` replicas (processes of this host);
2. the Airflow config's `[dlc_airflow] policy` (JSON): the floor; the keys it sets replace
   the defaults';
3. a connection's extra `dlc_policy`: may only narrow the floor (`widening` says where it
   would not), unless the config delegates (`"allow_connection_override": true`).

dlc_airflow/airflow/policy_source.py reads the layers. Every job is checked against the
result before anything of it is created, on every backend, and by `dlc-airflow validate`.

    {"host_paths": [{"prefix": "/mnt/datasets"}, {"prefix": "/scratch", "writable": true}],
     "service_accounts": ["trainer"], "storage_types": ["pvc", "nfs", "csi", "empty_dir"],
     "registries": ["registry.example.com/ml/"], "max_replicas": 64, "max_gpus": 64}

Privileged containers, hostNetwork, hostPID and added capabilities are not in the spec at
all, so no policy can grant them.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlc_airflow.spec import DLCJob, HostPathMount

STORAGE_TYPES = ("pvc", "nfs", "host_path", "csi", "config_map", "secret", "empty_dir")


class PolicyError(ValueError):
    """A job the admin's policy does not allow; the message names the field, the value and
    the policy key to change (permanent: no retry helps)."""

    permanent = True


class HostPathRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix: str = Field(description="an absolute host folder; paths under it may be mounted")
    writable: bool = Field(False, description="mounts may be read-write (default: read-only only)")

    @field_validator("prefix")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ".." in value.split("/"):
            raise ValueError(f"host path prefix {value!r} must be an absolute path without '..'")
        return posixpath.normpath(value)


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host_paths: list[HostPathRule] = Field(default_factory=list)  # empty: host_path denied
    service_accounts: list[str] = Field(default_factory=list)  # beyond the namespace default
    storage_types: list[str] | None = None  # None: every type (host_path still needs host_paths)
    registries: list[str] | None = None  # image prefixes; None: any registry
    max_replicas: int | None = Field(None, ge=1)  # per job, all roles
    max_gpus: int | None = Field(None, ge=0)  # per job, all replicas
    # the Airflow config's only: connections' dlc_policy may replace it, not just narrow it
    allow_connection_override: bool = False

    @field_validator("storage_types")
    @classmethod
    def _known_types(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - set(STORAGE_TYPES))
        if unknown:
            raise ValueError(f"storage_types {unknown} are not storage types ({', '.join(STORAGE_TYPES)})")
        return value


DEFAULT = Policy()
DELEGATION = "allow_connection_override"


def local_replica_cap() -> int:
    """The local backend's default max_replicas: each replica is a process of this host."""
    return max(16, 4 * (os.cpu_count() or 1))


def defaults(isolated: bool = True) -> Policy:
    """The defaults on a backend that isolates its jobs from the worker (`isolated`), or on
    one that does not (local: a job can read and write whatever the worker can, so refusing
    host paths protects nothing there)."""
    if isolated:
        return DEFAULT
    return Policy(host_paths=[HostPathRule(prefix="/", writable=True)], max_replicas=local_replica_cap())


def layered(base: Policy, over: Policy) -> Policy:
    """`base` with the keys `over` sets (its own, not its defaults) replaced."""
    keys = over.model_fields_set - {DELEGATION}
    return base.model_copy(update={key: getattr(over, key) for key in keys})


def widening(floor: Policy, policy: Policy) -> str | None:
    """What `policy` allows that `floor` does not (the first such key), None when it only narrows."""
    for rule in policy.host_paths:
        if not any(_covers(f.prefix, rule.prefix) and (f.writable or not rule.writable) for f in floor.host_paths):
            allowed = ", ".join(f"{f.prefix}{' (writable)' if f.writable else ''}" for f in floor.host_paths)
            what = "writable host path" if rule.writable else "host path"
            return f"host_paths: {what} prefix {rule.prefix!r} (the floor allows: {allowed or 'none'})"
    extra = sorted(set(policy.service_accounts) - set(floor.service_accounts))
    if extra:
        return f"service_accounts: {', '.join(extra)} (the floor allows: {', '.join(floor.service_accounts) or 'none'})"
    if floor.storage_types is not None:
        wider = sorted(set(STORAGE_TYPES if policy.storage_types is None else policy.storage_types)
                       - set(floor.storage_types))
        if wider:
            return f"storage_types: {', '.join(wider)} (the floor allows: {', '.join(floor.storage_types)})"
    if floor.registries is not None:
        wider = (["any"] if policy.registries is None else
                 [r for r in policy.registries if not any(r.startswith(f) for f in floor.registries)])
        if wider:
            return f"registries: {', '.join(wider)} (the floor allows: {', '.join(floor.registries)})"
    for key in ("max_replicas", "max_gpus"):
        most, asked = getattr(floor, key), getattr(policy, key)
        if most is not None and (asked is None or asked > most):
            return f"{key}: {'no limit' if asked is None else asked} (the floor allows at most {most})"
    return None


def _covers(prefix: str, path: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix.rstrip("/") + "/")


def parse_policy(data: Any, source: str) -> Policy:
    """The policy from its JSON form; a one-line error naming `source` and the key."""
    try:
        return Policy.model_validate(data or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "policy"
        raise PolicyError(f"invalid dlc policy in {source}: {where}: {first['msg']}") from None


def enforce(policy: Policy, job: DLCJob, source: str) -> None:
    """Raise PolicyError for the first thing `job` asks for that `policy` does not allow.

    `source` says where the policy comes from (a connection's extra, the Airflow config), so
    the message tells the user whom to ask and which key to change.
    """
    def refuse(field: str, what: str, key: str) -> PolicyError:
        return PolicyError(f"refused by policy: {field}: {what} is not allowed ({key} in {source}); "
                           "ask your Airflow admin to allow it, or change the job")

    for i, mount in enumerate(job.storage):
        if policy.storage_types is not None and mount.type not in policy.storage_types:
            raise refuse(f"storage[{i}]", f"storage type {mount.type!r}", "dlc_policy.storage_types")
        if isinstance(mount, HostPathMount):
            _check_host_path(policy, mount, f"storage[{i}]", refuse)
    account = job.scheduling.service_account
    if account not in (None, "default") and account not in policy.service_accounts:
        raise refuse("scheduling.service_account", f"ServiceAccount {account!r}", "dlc_policy.service_accounts")
    if policy.registries is not None:
        for field, image in _images(job):
            if not any(image.startswith(prefix) for prefix in policy.registries):
                raise refuse(field, f"image {image!r} (allowed: {', '.join(policy.registries)})",
                             "dlc_policy.registries")
    if policy.max_replicas is not None and job.total_replicas() > policy.max_replicas:
        raise refuse("roles", f"{job.total_replicas()} replicas (at most {policy.max_replicas})",
                     "dlc_policy.max_replicas")
    gpus = total_gpus(job)
    if policy.max_gpus is not None and gpus > policy.max_gpus:
        raise refuse("resources.gpu", f"{gpus} GPUs in all (at most {policy.max_gpus})", "dlc_policy.max_gpus")


def _check_host_path(policy: Policy, mount: HostPathMount, field: str, refuse: Any) -> None:
    path = posixpath.normpath(mount.path)
    rule = next((r for r in policy.host_paths if _covers(r.prefix, path)), None)
    if rule is None:
        allowed = ", ".join(r.prefix for r in policy.host_paths) or "none"
        raise refuse(f"{field}.path", f"host path {mount.path!r} (allowed prefixes: {allowed})",
                     "dlc_policy.host_paths")
    if not mount.read_only and not rule.writable:
        raise refuse(f"{field}.read_only", f"a writable mount of host path {mount.path!r} (set read_only: true)",
                     "dlc_policy.host_paths[].writable")


def _images(job: DLCJob) -> list[tuple[str, str]]:
    images = [("image", job.image)]
    images += [(f"roles.{name}.image", role.image) for name, role in job.roles.items() if role.image]
    if job.code is not None:
        images.append(("code.image", job.code.image))
    return images


def total_gpus(job: DLCJob) -> int:
    return sum(role.replicas * job.role_resources(name).gpu for name, role in job.roles.items())
