"""The DLC job spec: what a DAG author writes, validated before anything touches a cluster.

    models.py     DLCJob and its parts (roles, resources, storage, scheduling...), and the
                  hostfile a job's type implies (`hostfile_spec`)
    load.py       parse_job (a dict or DLCJob), load_job (YAML / JSON), json_schema
    envsource.py  env values from secrets: the references a spec may hold
    fields.py     field-level checks (quantities, labels, DNS names, durations, images, git)

DAG files import this package: it loads pydantic and nothing of Airflow or Kubernetes.
"""

from dlc_airflow.errors import SpecError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.spec.fields import MAX_ROLE_NAME, is_templated, parse_duration
from dlc_airflow.spec.load import json_schema, load_job, parse_job
from dlc_airflow.spec.models import (
    DEEPSPEED_HOSTFILE,
    MPI_HOSTFILE,
    Checkpoint,
    CodeSource,
    ConfigMapMount,
    CSIMount,
    DLCJob,
    Elastic,
    EmptyDirMount,
    FaultTolerance,
    HealthCheck,
    Hostfile,
    HostPathMount,
    NFSMount,
    PVCMount,
    Resources,
    Role,
    Scheduling,
    SecretMount,
    Storage,
    Topology,
    hostfile_spec,
)

__all__ = [
    "DEEPSPEED_HOSTFILE",
    "MAX_ROLE_NAME",
    "MPI_HOSTFILE",
    "CSIMount",
    "Checkpoint",
    "CodeSource",
    "ConfigMapMount",
    "DLCJob",
    "Elastic",
    "EmptyDirMount",
    "FaultTolerance",
    "HealthCheck",
    "HostPathMount",
    "Hostfile",
    "JobType",
    "NFSMount",
    "PVCMount",
    "Resources",
    "Role",
    "Scheduling",
    "SecretMount",
    "SpecError",
    "Storage",
    "Topology",
    "hostfile_spec",
    "is_templated",
    "json_schema",
    "load_job",
    "parse_duration",
    "parse_job",
]
