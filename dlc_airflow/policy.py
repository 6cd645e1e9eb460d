"""The admin's policy: what a DAG may ask for on a shared deployment (pure).

The policy is the admin's decision, never the DAG's: it is read from the connection's extra
`dlc_policy` or from the Airflow config (`[dlc_airflow] policy`, JSON), see
dlc_airflow/airflow/policy_source.py. Every job is checked against it before anything of it
is created, on every backend. Defaults are safe: no host paths, no ServiceAccount but the
namespace's default, every other storage type, any registry, no size limit.

    {"host_paths": [{"prefix": "/mnt/datasets"}, {"prefix": "/scratch", "writable": true}],
     "service_accounts": ["trainer"], "storage_types": ["pvc", "nfs", "csi", "empty_dir"],
     "registries": ["registry.example.com/ml/"], "max_replicas": 64, "max_gpus": 64}

Privileged containers, hostNetwork, hostPID and added capabilities are not in the spec at
all, so no policy can grant them.
"""

from __future__ import annotations

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

    @field_validator("storage_types")
    @classmethod
    def _known_types(cls, value: list[str] | None) -> list[str] | None:
        unknown = sorted(set(value or ()) - set(STORAGE_TYPES))
        if unknown:
            raise ValueError(f"storage_types {unknown} are not storage types ({', '.join(STORAGE_TYPES)})")
        return value


DEFAULT = Policy()


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
        return PolicyError(f"{field}: {what} is not allowed by the admin's policy ({key} in {source}); "
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
    rule = next((r for r in policy.host_paths if path == r.prefix or path.startswith(r.prefix.rstrip("/") + "/")),
                None)
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
