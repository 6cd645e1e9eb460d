"""The DLC job spec's models: what a DAG author writes, validated before anything touches a cluster.

A `DLCJob` is one distributed job: a job type, one image and command, and roles
(master, worker, ps, chief, launcher, head...) of N replicas each. Strings may be Jinja
templates ("{{ ds }}") that Airflow renders at run time; checks that depend on a string's
content are deferred for templated strings and run again once the operator has rendered
them, still before any network call.

Build one in Python (`DLCJob(...)`) or from a dict (`DLCJob.model_validate`); reading files
and the JSON Schema are dlc_airflow.spec.load. Every error is one SpecError line naming the
field (`first_error`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from dlc_airflow.errors import SpecError
from dlc_airflow.jobtypes import JOB_TYPES, JobType, TypeInfo
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.spec.envsource import SOURCE_TYPES, EnvValue  # env values from secrets: see dlc_airflow.secrets
from dlc_airflow.spec.fields import (  # parse_duration and is_templated are public here too
    DNS_LABEL,
    ENV_NAME,
    MAX_REPLICAS,
    MAX_ROLE_NAME,
    MAX_TTL_SECONDS,
    check_dns_subdomain,
    check_git_repo,
    check_git_revision,
    check_image,
    check_label_key,
    check_label_like,
    check_label_value,
    check_quantity,
    check_scalar,
    check_toleration,
    has_backstep,
    is_templated,
    parse_duration,
    quantity_value,
    scalar_kind,
)


class _Model(BaseModel):
    # Unknown keys are typos more often than not: reject them, naming the key.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    def __init__(self, /, **data: Any) -> None:
        # DLCJob(...) in a DAG file: the same one line as parse_job, not pydantic's dump
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise SpecError(f"invalid {_model_what(type(self))}: {first_error(exc)}") from None

    # as RootModel does: pydantic then validates nested models without calling this __init__
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise SpecError(f"invalid {_model_what(type(self))}: {first_error(exc)}") from None

    @model_validator(mode="before")
    @classmethod
    def _exact_scalars(cls, data: Any) -> Any:
        # Every count is a whole number and every switch a bool, in every model of the spec
        # (pydantic alone reads True as 1 and "no" as False). A model validator, not a "*"
        # field validator: those are not allowed on the mounts' discriminator field.
        if not isinstance(data, dict):
            return data
        own = {f for d in cls.__pydantic_decorators__.field_validators.values()
               if d.info.mode == "before" for f in d.info.fields}
        errors, data = [], dict(data)
        for name, field in cls.model_fields.items():
            kind = scalar_kind(field.annotation)
            key = name if name in data else (field.alias or name)
            if kind is None or key not in data:
                continue
            try:
                if name in own and kind == "int":  # its own check reads text and fractions
                    check_scalar(data[key], "int", name) if isinstance(data[key], bool) else None
                else:
                    data[key] = check_scalar(data[key], kind, name)
            except ValueError as exc:
                errors.append(InitErrorDetails(type=PydanticCustomError("value_error", str(exc)), loc=(key,),
                                               input=data[key]))
        if errors:  # raised as a ValidationError, each error keeps its field's location
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data


class Resources(_Model):
    """Resources of one replica (pod)."""

    cpu: str | None = Field(None, description="CPU request = limit, e.g. 4 or 500m")
    memory: str | None = Field(None, description="memory request = limit, e.g. 16Gi")
    gpu: int = Field(0, ge=0, description="whole GPUs (nvidia.com/gpu) per replica")
    gpu_type: str | None = Field(
        None, description="GPU model, matched against the node label nvidia.com/gpu.product"
    )
    shared_memory: str | None = Field(
        None, description="size of /dev/shm (a memory-backed emptyDir), e.g. 8Gi"
    )
    rdma: int = Field(0, ge=0, description="RDMA devices (rdma/hca) per replica")
    ephemeral_storage: str | None = None

    @field_validator("cpu", "memory", "shared_memory", "ephemeral_storage", mode="before")
    @classmethod
    def _quantity(cls, value: Any, info: ValidationInfo) -> str | None:
        return check_quantity(value, str(info.field_name))

    @field_validator("gpu", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> Any:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(
                f"gpu {value} is fractional; Kubernetes schedules whole GPUs: use an integer "
                "(GPU sharing needs a device plugin such as MIG or time-slicing)"
            )
        if isinstance(value, str) and not value.isdigit():
            raise ValueError(f"gpu {value!r} must be a whole number of GPUs")
        return int(value) if isinstance(value, (float, str)) else value

    @field_validator("gpu_type")
    @classmethod
    def _gpu_label(cls, value: str | None) -> str | None:
        # matched against the node label nvidia.com/gpu.product
        return value if value is None else check_label_like(value, "gpu_type")

    @model_validator(mode="after")
    def _gpu_type_needs_gpu(self) -> Resources:
        if self.gpu_type and not self.gpu:
            raise ValueError(f"gpu_type {self.gpu_type!r} is set but gpu is 0; set gpu >= 1")
        return self


class Role(_Model):
    """One role of the job: `replicas` pods, optionally with their own image/command/env."""

    replicas: int = Field(1, description="number of pods of this role")
    resources: Resources | None = Field(None, description="overrides the job's resources")
    image: str | None = None
    command: list[str] | None = None
    shell: str | None = None
    env: dict[str, EnvValue] = Field(default_factory=dict)

    @field_validator("replicas")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"replicas must be >= 1 (got {value}); drop the role to not run it")
        if value > MAX_REPLICAS:
            raise ValueError(f"replicas {value} is more than {MAX_REPLICAS}, the most an Indexed Job runs")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return value if value is None else check_image(value, "image")

    @model_validator(mode="after")
    def _one_command(self) -> Role:
        if self.command is not None and self.shell is not None:
            raise ValueError("set either command (a list) or shell (a string), not both")
        return self


# Storage: what DLC calls data sources. Each mount puts one volume at mount_path.
class _Mount(_Model):
    mount_path: str = Field(description="absolute path inside the containers")
    read_only: bool = False
    sub_path: str | None = None

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not is_templated(value) and not value.startswith("/"):
            raise ValueError(f"mount_path {value!r} must be an absolute path such as /data")
        return value

    @field_validator("sub_path")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None and not is_templated(value) and (value.startswith("/") or has_backstep(value)):
            raise ValueError(f"sub_path {value!r} must be a relative path inside the volume, without '..'")
        return value


class PVCMount(_Mount):
    type: Literal["pvc"] = "pvc"
    claim_name: str = Field(min_length=1)


class NFSMount(_Mount):
    """NFS / NAS share."""

    type: Literal["nfs"] = "nfs"
    server: str = Field(min_length=1)
    path: str

    @field_validator("path")
    @classmethod
    def _absolute_export(cls, value: str) -> str:
        if not is_templated(value) and not value.startswith("/"):
            raise ValueError(f"path {value!r} must be the absolute path of the export, such as /exports/data")
        return value


class HostPathMount(_Mount):
    type: Literal["host_path"] = "host_path"
    path: str = Field(min_length=1)

    @field_validator("path")
    @classmethod
    def _no_backstep(cls, value: str) -> str:
        if has_backstep(value):
            raise ValueError(f"path {value!r} must not contain '..'")
        return value


class CSIMount(_Mount):
    """Inline CSI volume, for object stores (OSS, CPFS, S3 via a CSI driver...)."""

    type: Literal["csi"] = "csi"
    driver: str
    volume_attributes: dict[str, str] = Field(default_factory=dict)
    secret_name: str | None = Field(None, description="nodePublishSecretRef")

    @field_validator("driver", "secret_name")
    @classmethod
    def _dns(cls, value: str | None, info: ValidationInfo) -> str | None:
        return value if value is None else check_dns_subdomain(value, str(info.field_name))


class ConfigMapMount(_Mount):
    type: Literal["config_map"] = "config_map"
    name: str = Field(min_length=1)


class SecretMount(_Mount):
    type: Literal["secret"] = "secret"
    name: str = Field(min_length=1)


class EmptyDirMount(_Mount):
    type: Literal["empty_dir"] = "empty_dir"
    size_limit: str | None = None
    memory: bool = False

    @field_validator("size_limit", mode="before")
    @classmethod
    def _quantity(cls, value: Any) -> str | None:
        return check_quantity(value, "size_limit")


_MOUNT_TAGS = {"pvc", "nfs", "host_path", "csi", "config_map", "secret", "empty_dir"}

Storage = Annotated[
    PVCMount | NFSMount | HostPathMount | CSIMount | ConfigMapMount | SecretMount | EmptyDirMount,
    Field(discriminator="type"),
]


class CodeSource(_Model):
    """A git repository cloned by an init container into mount_path before the job starts."""

    repo: str = Field(description="git URL")
    revision: str = Field("main", description="branch, tag or commit")
    mount_path: str = "/workspace/code"
    image: str = Field("alpine/git:2.47.2", description="image with git for the clone step")
    secret_name: str | None = Field(
        None, description="Secret with git credentials (keys: username, password)"
    )

    @field_validator("mount_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"mount_path {value!r} must be an absolute path")
        return value

    # checked here, not when the clone runs: the init container would fail the job late
    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        return check_git_repo(value, "repo")

    @field_validator("revision")
    @classmethod
    def _revision(cls, value: str) -> str:
        return check_git_revision(value, "revision")

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value, "image")


class Topology(_Model):
    """Kueue's topology-aware scheduling (TAS) for every pod set of the job: keep its pods within
    one domain of a level (a rack, a block), named by the node label of that level, as Kueue's
    Topology lists it (e.g. cloud.provider.com/topology-rack, or kubernetes.io/hostname)."""

    required: str | None = Field(None, description="node label of the level the pods must share "
                                 "(the job waits until one domain of it fits them all)")
    preferred: str | None = Field(None, description="node label of the level the pods should share "
                                  "(Kueue spreads them to the next level up when none fits)")
    slice_level: str | None = Field(None, description="with slice_size: each group of slice_size "
                                    "pods must share a domain of this level")
    slice_size: int | None = Field(None, ge=1, description="pods per slice (with slice_level)")

    @field_validator("required", "preferred", "slice_level")
    @classmethod
    def _level(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None:
            check_label_key(value, f"scheduling.topology.{info.field_name}: node label")
        return value

    @model_validator(mode="after")
    def _one_level(self) -> Topology:
        if (self.required is None) == (self.preferred is None):
            raise ValueError("scheduling.topology needs exactly one of required or preferred (a node label "
                             "such as cloud.provider.com/topology-rack)")
        if (self.slice_level is None) != (self.slice_size is None):
            raise ValueError("scheduling.topology: slice_level and slice_size go together (each slice_size "
                             "pods share a domain of slice_level)")
        return self


class Scheduling(_Model):
    queue: str | None = Field(None, description="Kueue LocalQueue name")
    queue_priority: str | None = Field(
        None, description="Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class): decides "
        "who preempts whom in the queue; needs queue"
    )
    priority_class: str | None = None
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[JSONObject] = Field(default_factory=list)
    spot: Literal["none", "prefer", "require"] = Field(
        "none", description="run on spot/preemptible nodes: prefer them, or require them"
    )
    include_nodes: list[str] = Field(default_factory=list, description="only these nodes")
    exclude_nodes: list[str] = Field(default_factory=list, description="never these nodes")
    service_account: str | None = None
    topology: Topology | None = Field(
        None, description="Kueue topology-aware placement of the pods (needs queue and a flavor with a Topology)"
    )

    @field_validator("node_selector")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            check_label_key(key)
            check_label_value(key, val)
        return value

    @field_validator("queue", "queue_priority", "priority_class", "service_account")
    @classmethod
    def _dns_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and not is_templated(value):
            if len(value) > 63 or not re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", value):
                raise ValueError(
                    f"{info.field_name} {value!r} must be a lowercase DNS name (a-z, 0-9, '-', '.')"
                )
        return value

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[JSONObject]) -> list[JSONObject]:
        for i, tol in enumerate(value):
            check_toleration(tol, f"tolerations[{i}]")
        return value

    @field_validator("include_nodes", "exclude_nodes")
    @classmethod
    def _node_names(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # matched against the node label kubernetes.io/hostname: label value rules
        for node in value:
            check_label_like(node, f"{info.field_name}: node")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Scheduling:
        both = sorted(set(self.include_nodes) & set(self.exclude_nodes))
        if both:
            raise ValueError(f"nodes {both} are in both include_nodes and exclude_nodes")
        if self.queue_priority is not None and self.queue is None:
            raise ValueError(f"queue_priority {self.queue_priority!r} is a Kueue priority and needs a queue: "
                             "set scheduling.queue too, or drop queue_priority")
        if self.topology is not None and self.queue is None:
            raise ValueError("scheduling.topology is placed by Kueue and needs a queue: set scheduling.queue "
                             "to a LocalQueue whose ClusterQueue has a flavor with a Topology")
        return self


class FaultTolerance(_Model):
    max_restarts: int = Field(
        0, ge=0, description="times a failed replica is restarted before the job fails"
    )
    retryable_exit_codes: list[int] = Field(
        default_factory=list,
        description="only these exit codes are restarted; any other fails the job at once "
        "(empty: every failure is restarted up to max_restarts)",
    )
    restart_on_preemption: bool = Field(
        True, description="a preempted or evicted replica is replaced without counting a restart"
    )
    oom_retry_memory: str | None = Field(
        None, description="after an OOM kill, the task's next try runs every replica with this memory "
        "(e.g. 8Gi; needs Airflow 3.3's retry policies); unset: an OOM kill fails the task at once"
    )

    @field_validator("oom_retry_memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> str | None:
        return check_quantity(value, "oom_retry_memory")

    @field_validator("retryable_exit_codes")
    @classmethod
    def _codes(cls, value: list[int]) -> list[int]:
        bad = [c for c in value if not 1 <= c <= 255]
        if bad:
            raise ValueError(
                f"retryable_exit_codes {bad}: exit codes are 1..255 (0 is success): list failure codes only"
            )
        return sorted(set(value))


class HealthCheck(_Model):
    """Preflight check (DLC "sanity check"): runs in the job image before the main command."""

    command: list[str] = Field(description="e.g. [dlc-airflow, sanity-check]")

    @field_validator("command")
    @classmethod
    def _not_empty(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("health_check.command must not be empty")
        return value


class Checkpoint(_Model):
    uri: str = Field(description="root of this job's checkpoints: file://, s3://, oss://...")
    path: str | None = Field(
        None, description="where the containers see uri (a mount); defaults to uri's path for file://"
    )
    resume_from: str | None = Field(None, description="checkpoint to start from")
    keep_last: int = Field(3, ge=1)

    def container_path(self) -> str | None:
        if self.path:
            return self.path
        if self.uri.startswith("file://"):
            return self.uri[len("file://") :]
        if self.uri.startswith("/"):
            return self.uri
        return None


class Elastic(_Model):
    """torchrun elastic training: the job runs with between min and max worker nodes."""

    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)
    max_restarts: int = Field(3, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Elastic:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"elastic.min_replicas {self.min_replicas} > max_replicas {self.max_replicas}: "
                "min_replicas must be <= max_replicas"
            )
        return self


class DLCJob(_Model):
    """One DLC-style distributed job."""

    name: str | None = Field(
        None, description="base of the Kubernetes names (default: the Airflow task id)"
    )
    type: JobType = JobType.custom
    image: str = Field(description="container image of every role (a role may override it)")
    command: list[str] | None = Field(None, description="argv; never split by a shell")
    shell: str | None = Field(None, description="a shell command line, run with /bin/sh -c")
    working_dir: str | None = None
    env: dict[str, EnvValue] = Field(
        default_factory=dict,
        description="strings, or {secret: name, key: k}, {airflow_variable: name}, {airflow_connection: id, field: f}",
    )
    roles: dict[str, Role] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    storage: list[Storage] = Field(default_factory=list)
    code: CodeSource | None = None
    scheduling: Scheduling = Field(default_factory=Scheduling)
    fault_tolerance: FaultTolerance = Field(default_factory=FaultTolerance)
    health_check: HealthCheck | None = None
    checkpoint: Checkpoint | None = None
    max_running_time: timedelta | None = Field(
        None, description="the job fails after this long (seconds or '2h')"
    )
    ttl_after_finished: timedelta | None = Field(
        None, description="delete the finished job after this long"
    )
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    # framework options
    port: int | None = Field(None, ge=1, le=65535, description="rendezvous port (type default)")
    nproc_per_node: int = Field(1, ge=1, description="processes per pod (torch types)")
    elastic: Elastic | None = None
    slots_per_worker: int = Field(1, ge=1, description="MPI slots per worker (mpi, deepspeed)")
    launcher: Literal["torchrun", "mpi"] = Field(
        "torchrun", description="deepspeed/megatron launcher flavour"
    )

    # -- field checks ------------------------------------------------------------------
    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value or not value.strip():
            raise ValueError("image is required: the container image every replica runs")
        return check_image(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is None or is_templated(value):
            return value
        from dlc_airflow.naming import MAX_BASE_NAME

        if not DNS_LABEL.match(value):
            raise ValueError(
                f"name {value!r} must be lowercase letters, digits and '-', starting with a letter"
            )
        if len(value) > MAX_BASE_NAME:
            raise ValueError(
                f"name {value!r} is {len(value)} characters; at most {MAX_BASE_NAME} fit in every "
                f"derived Kubernetes name (e.g. <name>-worker-0): shorten it"
            )
        return value

    @field_validator("max_running_time", "ttl_after_finished", mode="before")
    @classmethod
    def _duration(cls, value: Any, info: ValidationInfo) -> timedelta | None:
        parsed = parse_duration(value, str(info.field_name))
        if parsed is not None and parsed.total_seconds() <= 0:
            raise ValueError(f"{info.field_name} must be positive")
        if info.field_name == "ttl_after_finished" and parsed is not None and parsed.total_seconds() > MAX_TTL_SECONDS:
            raise ValueError(f"ttl_after_finished is at most {MAX_TTL_SECONDS} seconds (about 68 years)")
        return parsed

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, EnvValue]) -> dict[str, EnvValue]:
        return _check_env(value, "env")

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            check_label_key(key)
            if key.startswith("dlc-airflow/"):
                raise ValueError(
                    f"label {key!r}: the dlc-airflow/ prefix is reserved for our own labels; use another prefix"
                )
            check_label_value(key, val)
        return value

    @field_validator("annotations")
    @classmethod
    def _annotation_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            check_label_key(key, "annotation key")  # the same rules as label keys
        return value

    @field_validator("roles", mode="before")
    @classmethod
    def _role_shorthand(cls, value: Any) -> Any:
        # roles: {worker: 4} is short for roles: {worker: {replicas: 4}}; any other scalar
        # (true, 2.5, "two") goes to replicas too, whose check says what is wrong with it
        if isinstance(value, dict):
            for k, v in value.items():
                if v is None or isinstance(v, (list, tuple)):
                    raise ValueError(f"role {k!r}: give the number of replicas (worker: 4) or the role's "
                                     "fields (worker: {replicas: 4, resources: ...}), not " + repr(v))
            return {k: ({"replicas": v} if isinstance(v, (int, float, str)) else v) for k, v in value.items()}
        return value

    # -- whole-job checks --------------------------------------------------------------
    @model_validator(mode="after")
    def _consistent(self) -> DLCJob:
        info = self.type_info
        if self.command is not None and self.shell is not None:
            raise ValueError("set either command (a list) or shell (a string), not both")
        if self.command is not None and not self.command:
            raise ValueError("command is an empty list; give the program and its arguments")
        if not self.roles:
            # validate_assignment would recurse; set the default roles directly
            object.__setattr__(self, "roles", {r: Role(replicas=n) for r, n in info.default_roles.items()})
        _check_roles(self, info)
        for role_name, role in self.roles.items():
            if role.env:
                _check_env(role.env, f"roles.{role_name}.env")
            if not self.has_command(role_name):
                raise ValueError(
                    f"roles.{role_name}: no command; set command (or shell) on the job or the role"
                )
        if self.elastic is not None and not info.torch:
            raise ValueError(f"elastic is only for pytorch, deepspeed and megatron, not {self.type.value}")
        if self.elastic is not None:
            workers = self.roles.get("worker")
            if workers and not self.elastic.min_replicas <= workers.replicas <= self.elastic.max_replicas:
                raise ValueError(
                    f"roles.worker.replicas {workers.replicas} is outside elastic "
                    f"[{self.elastic.min_replicas}, {self.elastic.max_replicas}]"
                )
        _check_oom_retry_memory(self)
        if self.nproc_per_node != 1 and not info.torch:
            raise ValueError(f"nproc_per_node is only for torch types, not {self.type.value}")
        if self.launcher != "torchrun" and self.type not in (JobType.deepspeed, JobType.megatron):
            raise ValueError("launcher is only for deepspeed and megatron")
        paths = [m.mount_path for m in self.storage]
        if self.code:
            paths.append(self.code.mount_path)
        dup = sorted({p for p in paths if paths.count(p) > 1})
        if dup:
            raise ValueError(f"storage: mount_path {dup} used more than once")
        reserved = _reserved_paths(self)
        if clash := sorted(set(paths) & set(reserved)):
            raise ValueError(f"storage: mount_path {clash[0]} is taken by {reserved[clash[0]]}; mount elsewhere")
        if self.checkpoint and self.checkpoint.container_path() is None:
            raise ValueError(
                f"checkpoint.uri {self.checkpoint.uri!r} is not a local path: set checkpoint.path "
                "to where the containers see it (a storage mount)"
            )
        _check_annotations_size(self)
        return self

    # -- helpers used by backends ------------------------------------------------------
    @property
    def type_info(self) -> TypeInfo:
        return JOB_TYPES[self.type]

    def has_command(self, role: str) -> bool:
        r = self.roles[role]
        return bool(r.command or r.shell or self.command or self.shell)

    def role_command(self, role: str) -> list[str]:
        """The argv of a role: the role's own command, else the job's."""
        r = self.roles[role]
        if r.command:
            return list(r.command)
        if r.shell:
            return ["/bin/sh", "-c", r.shell]
        if self.command:
            return list(self.command)
        return ["/bin/sh", "-c", self.shell or ""]

    def role_image(self, role: str) -> str:
        return self.roles[role].image or self.image

    def role_resources(self, role: str) -> Resources:
        return self.roles[role].resources or self.resources

    def role_env(self, role: str) -> dict[str, EnvValue]:
        return {**self.env, **self.roles[role].env}

    def total_replicas(self) -> int:
        return sum(r.replicas for r in self.roles.values())

    def to_dict(self) -> JSONObject:
        """JSON-safe dict that round-trips through model_validate (durations in seconds)."""
        data = self.model_dump(mode="json", exclude_defaults=True)
        if self.storage:
            # exclude_defaults drops each mount's `type`, the discriminator validation needs
            data["storage"] = [
                {"type": m.type, **m.model_dump(mode="json", exclude_defaults=True)} for m in self.storage
            ]
        for key in ("max_running_time", "ttl_after_finished"):
            value = getattr(self, key)
            if value is not None:
                data[key] = int(value.total_seconds())
        return data


# -- the hostfile: whether a job has one (the types that launch over MPI), where, how many slots --

MPI_HOSTFILE = "/etc/mpi/hostfile"
DEEPSPEED_HOSTFILE = "/etc/deepspeed/hostfile"


@dataclass(frozen=True)
class Hostfile:
    """Where a job's MPI / DeepSpeed hostfile goes and how many slots each worker has."""

    path: str
    slots: int


def hostfile_spec(job: DLCJob) -> Hostfile | None:
    """The job's hostfile, for the types that launch over MPI; None for the others.

    The one place that decides hostfile presence and slots: every backend asks here.
    DeepSpeed / Megatron with launcher="mpi" run one process per GPU, so a worker's slots
    are nproc_per_node unless slots_per_worker is given.
    """
    if job.type is JobType.mpi:
        return Hostfile(MPI_HOSTFILE, job.slots_per_worker)
    if job.type in (JobType.deepspeed, JobType.megatron) and job.launcher == "mpi":
        slots = job.slots_per_worker if "slots_per_worker" in job.model_fields_set else job.nproc_per_node
        return Hostfile(DEEPSPEED_HOSTFILE, slots)
    return None


def _reserved_paths(job: DLCJob) -> dict[str, str]:
    """Paths the backends mount themselves (shared memory, hostfiles) -> what takes them."""

    reserved = {}
    if job.resources.shared_memory or any(r.resources and r.resources.shared_memory for r in job.roles.values()):
        reserved["/dev/shm"] = "resources.shared_memory"
    if (hostfile := hostfile_spec(job)) is not None:
        reserved[hostfile.path] = "the MPI hostfile" if job.type is JobType.mpi else "the hostfile of launcher='mpi'"
    return reserved


def _check_env(env: dict[str, EnvValue], where: str) -> dict[str, EnvValue]:
    for key, val in env.items():
        if not ENV_NAME.match(key):
            raise ValueError(
                f"{where}: {key!r} is not a valid environment variable name: use letters, digits, '_', '-' "
                "and '.', starting with a letter or '_'"
            )
        if not isinstance(val, (str, *SOURCE_TYPES)):
            raise ValueError(f"{where}.{key} must be a string (quote numbers in YAML)")
    return env


def _check_oom_retry_memory(job: DLCJob) -> None:
    """A retry after an OOM kill must have more memory than any replica had."""
    more = job.fault_tolerance.oom_retry_memory
    if more is None or is_templated(more):
        return
    had = [("resources.memory", job.resources.memory)] + [
        (f"roles.{name}.resources.memory", role.resources.memory) for name, role in job.roles.items() if role.resources]
    for where, memory in had:
        if memory is not None and not is_templated(memory) and quantity_value(memory) >= quantity_value(more):
            raise ValueError(f"fault_tolerance.oom_retry_memory {more!r} is not more than {where} {memory!r}; "
                             "give the memory a retry after an OOM kill should have")


def _check_roles(job: DLCJob, info: TypeInfo) -> None:
    allowed = info.roles
    for role_name, role in job.roles.items():
        if allowed is None:  # custom: any single role name
            if not DNS_LABEL.match(role_name) or len(role_name) > MAX_ROLE_NAME:
                raise ValueError(
                    f"roles.{role_name}: a role name is a lowercase DNS label of at most "
                    f"{MAX_ROLE_NAME} characters"
                )
            continue
        if role_name not in allowed:
            raise ValueError(
                f"roles.{role_name}: a {job.type.value} job has roles {sorted(allowed)}, "
                f"not {role_name!r}"
            )
        most = allowed[role_name]
        if most is not None and role.replicas > most:
            raise ValueError(
                f"roles.{role_name}.replicas is {role.replicas}; a {job.type.value} job has at "
                f"most {most} {role_name}"
            )
    if allowed is None and len(job.roles) != 1:
        raise ValueError(f"a custom job has exactly one role, got {sorted(job.roles)}")
    for required in info.required_roles:
        if required not in job.roles:
            raise ValueError(f"roles: a {job.type.value} job needs a {required!r} role")
    if info.one_of_roles and not any(r in job.roles for r in info.one_of_roles):
        raise ValueError(
            f"roles: a {job.type.value} job needs one of {list(info.one_of_roles)}"
        )


# The API server's limit on one object's annotations, keys and values together; ours count
# towards it: the packed spec (dlc_airflow.specpack) and the task's ids (naming.job_annotations:
# dag, task and run ids of at most 250 characters each, with their keys).
ANNOTATIONS_LIMIT = 256 * 1024
OWN_IDS_RESERVE = 4 * (32 + 250)


def packed_size(data: JSONObject) -> int:
    """The bytes of the spec annotation dlc_airflow.specpack.pack makes of `data` (key
    `dlc-airflow/spec`, value `z1:` + base64 of zlib of the JSON; tests/unit/test_bad_input_catalogue
    checks they agree). An upper bound for the job: pack hides secret literals first."""
    import base64
    import json
    import zlib

    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    return len("dlc-airflow/spec") + len("z1:") + len(base64.b64encode(zlib.compress(text.encode(), 9)))


def _check_annotations_size(job: DLCJob) -> None:
    yours = sum(len(k.encode()) + len(v.encode()) for k, v in job.annotations.items())
    ours = packed_size(job.to_dict()) + OWN_IDS_RESERVE
    if yours + ours > ANNOTATIONS_LIMIT:
        field = "annotations" if yours >= ours else "the job spec (packed into an annotation)"
        raise ValueError(f"{field}: {yours} bytes of your annotations and {ours} of dlc-airflow's (the packed "
                         f"spec, the task's ids) exceed Kubernetes' {ANNOTATIONS_LIMIT} bytes per object; shorten "
                         "them, or put large data in a ConfigMap or a storage mount")


_MAX_ERRORS = 5  # more than this is one mistake repeated, or not a job spec at all


def first_error(exc: ValidationError) -> str:
    lines: list[str] = []
    for err in exc.errors():
        loc = _loc(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field; check the spelling (see `dlc-airflow schema`)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] in ("union_tag_not_found", "union_tag_invalid"):
            msg = _union_tag_message(err)
        line = f"{loc}: {msg}" if loc else msg
        if line not in lines:
            lines.append(line)
    more = f" (and {len(lines) - _MAX_ERRORS} more)" if len(lines) > _MAX_ERRORS else ""
    # one line whatever the input held (a key with a newline in it, say)
    return " ".join("; ".join(lines[:_MAX_ERRORS]).split("\n")) + more


# The tags of each discriminated union in the spec, by the field that holds its members.
_UNION_TAGS = {"storage": sorted(_MOUNT_TAGS)}


def _union_tag_message(err: Any) -> str:
    """A union member without its tag (or with an unknown one), in the spec's words:
    `type is missing: set type to one of ...` rather than pydantic's "Unable to extract tag"."""
    ctx = err.get("ctx") or {}
    key = str(ctx.get("discriminator", "type")).strip("'")
    field = next((str(p) for p in reversed(err["loc"]) if isinstance(p, str)), "")
    tags = _UNION_TAGS.get(field) or [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip()]
    choose = f"set {key} to one of {', '.join(tags)}" if tags else f"set {key}"
    if err["type"] == "union_tag_not_found":
        return f"{key} is missing: {choose}"
    return f"{key} {ctx.get('tag')!r} is unknown: {choose}"


def _loc(parts: tuple[Any, ...]) -> str:
    """('storage', 0, 'pvc', 'read_only') -> storage[0].read_only: list items by index, and
    without the mount type pydantic puts after a storage item (the discriminator's tag)."""
    out = ""
    for i, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).endswith("Mount") or (i and isinstance(parts[i - 1], int) and part in _MOUNT_TAGS):
            continue
        else:
            text = str(part) if str(part).isprintable() and not any(c.isspace() for c in str(part)) else repr(part)
            out += f".{text}" if out else text
    return out


def _model_what(cls: type) -> str:
    return "job spec" if cls.__name__ == "DLCJob" else f"{cls.__name__} spec"


