"""The job's spec travels with the job, so `dlc-airflow jobs clone` and `script` can rebuild it
from the job alone: on Kubernetes as an annotation of the primary object (JSON, zlib,
base64: a few hundred bytes for a typical spec; the API server allows 256 KiB of
annotations), in the job folder on the local and Slurm backends.

What is kept is `stored(job)`: secret sources stay references, and secret literals are
replaced by a placeholder (HIDDEN), so no value travels.
"""

from __future__ import annotations

import base64
import json
import zlib

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.naming import PREFIX
from dlc_airflow.secrets.resolve import HIDDEN, entries
from dlc_airflow.spec import DLCJob

SPEC_ANNOTATION = PREFIX + "spec"
_FORMAT = "z1:"  # zlib + base64 of the JSON; the prefix leaves room for another format


def stored(job: DLCJob) -> JSONObject:
    """job.to_dict() with every secret literal replaced by HIDDEN (references stay)."""
    data = job.to_dict()
    for entry in entries(job):
        if entry.hidden() and isinstance(entry.value, str):
            if entry.where == "env":
                data["env"][entry.name] = HIDDEN
            else:
                data["roles"][entry.where.split(".")[1]]["env"][entry.name] = HIDDEN
    return data


def pack(job: DLCJob) -> str:
    text = json.dumps(stored(job), separators=(",", ":"), sort_keys=True)
    return _FORMAT + base64.b64encode(zlib.compress(text.encode(), 9)).decode()


def unpack(value: str) -> JSONObject:
    """The spec dict from `pack`; ValueError when the value is not one."""
    if not value.startswith(_FORMAT):
        raise ValueError(f"not a packed dlc-airflow spec (it should start with {_FORMAT!r})")
    try:
        data = json.loads(zlib.decompress(base64.b64decode(value[len(_FORMAT):])))
    except (ValueError, zlib.error) as exc:
        raise ValueError(f"a damaged packed spec: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a packed spec holds a JSON object")
    return data
