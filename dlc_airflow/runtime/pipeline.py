"""What a pipeline job (dlc_airflow.pipelines) is told: its data interval and its URIs.

The pipeline puts these in every job's env (see docs/pipelines.md):

    DLC_LINEAGE          the lineage name
    DLC_INTERVAL_START   start of the data interval, ISO 8601 UTC (inclusive)
    DLC_INTERVAL_END     end of the data interval (exclusive)
    DLC_INTERVAL_KEY     the interval's key in storage paths and the manifest
    DLC_STORAGE_URI      the storage root the URIs below live under (file://, s3://...)
    DLC_STORAGE_DIR      where this job sees DLC_STORAGE_URI as a local path (if it does)
    DLC_DATA_URI         this interval's preprocessed data (train, inference)
    DLC_OUTPUT_URI       where this job writes (preprocess: the data; inference: predictions)
    DLC_MODEL_URI        the checkpoint inference runs (the promoted model)

Training also gets the checkpoint env (DLC_CHECKPOINT_URI/DIR, DLC_RESUME_FROM): use
dlc_airflow.runtime.save_checkpoint and resume_path.

    from dlc_airflow.runtime import pipeline
    start, end = pipeline.interval()
    out = pipeline.output_dir()       # a local Path (the URI mapped through DLC_STORAGE_DIR)
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

from dlc_airflow.runtime.env import RuntimeEnvError

__all__ = [
    "data_dir",
    "data_uri",
    "interval",
    "interval_key",
    "lineage",
    "local_path",
    "model_dir",
    "model_uri",
    "output_dir",
    "output_uri",
]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _need(name: str, what: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeEnvError(
            f"{name} is not set: this job was not started as the {what} step of a dlc_airflow.pipelines pipeline "
            f"(set {name} to run it by hand)"
        )
    return value


def _time(name: str) -> datetime:
    raw = _need(name, "pipeline")
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        raise RuntimeEnvError(f"{name}={raw!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def interval() -> tuple[datetime, datetime]:
    """(start, end) of this run's data interval, UTC; the job processes [start, end)."""
    start, end = _time("DLC_INTERVAL_START"), _time("DLC_INTERVAL_END")
    if end <= start:
        raise RuntimeEnvError(f"DLC_INTERVAL_END {end.isoformat()} is not after DLC_INTERVAL_START {start.isoformat()}")
    return start, end


def interval_key() -> str:
    return _need("DLC_INTERVAL_KEY", "pipeline")


def lineage() -> str:
    return _need("DLC_LINEAGE", "pipeline")


def data_uri() -> str:
    """This interval's preprocessed data (what preprocess wrote)."""
    return _need("DLC_DATA_URI", "training or inference")


def output_uri() -> str:
    """Where this job writes its results."""
    return _need("DLC_OUTPUT_URI", "preprocess or inference")


def model_uri() -> str:
    """The checkpoint to run (inference)."""
    return _need("DLC_MODEL_URI", "inference")


def local_path(uri: str) -> Path:
    """A URI as a local path: under DLC_STORAGE_URI it maps to DLC_STORAGE_DIR (the mount);
    file:// URIs and absolute paths are local already; anything else is an error."""
    root, mounted = os.environ.get("DLC_STORAGE_URI"), os.environ.get("DLC_STORAGE_DIR")
    if root and mounted:
        base = root.rstrip("/")
        if uri == base or uri.startswith(base + "/"):
            return Path(mounted) / uri[len(base):].lstrip("/")
    if uri.startswith("file://"):
        path = uri[len("file://"):]
        if path.startswith("/"):
            return Path(path)
    elif not _SCHEME.match(uri) and uri.startswith("/"):
        return Path(uri)
    raise RuntimeEnvError(
        f"{uri!r} is not a local path: mount the store into the job (storage) and give the pipeline "
        "mount_path=, or read the URI with the store's own client"
    )


def data_dir() -> Path:
    return local_path(data_uri())


def output_dir() -> Path:
    return local_path(output_uri())


def model_dir() -> Path:
    return local_path(model_uri())
