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

Types: the `*_uri()` functions return the URI as the pipeline wrote it (a str: s3://...,
file://...); `local_path()` and the `*_dir()` functions return a `pathlib.Path` on this
machine: the URI under DLC_STORAGE_URI mapped to the same place under DLC_STORAGE_DIR (the
mount the pipeline's `mount_path=` made), a file:// URI or an absolute path as it is. Each
raises RuntimeEnvError, naming the variable, when the job was not started by a pipeline
step that sets it, or when the URI is not reachable as a local path (no mount).
`interval()` returns timezone-aware UTC datetimes.

    from dlc_airflow.runtime import pipeline
    start, end = pipeline.interval()           # datetimes, UTC: process [start, end)
    out = pipeline.output_dir()                # Path: /mnt/ml/digits/data/20260101T000000Z-20260102T000000Z
    out.mkdir(parents=True, exist_ok=True)     # the folder may not exist yet
    model = pipeline.model_dir() / "model.pt"  # inference: the promoted checkpoint, as a Path
    uri = pipeline.output_uri()                # str, for the store's own client or a report
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
    """(start, end) of this run's data interval as timezone-aware UTC datetimes; the job
    processes [start, end)."""
    start, end = _time("DLC_INTERVAL_START"), _time("DLC_INTERVAL_END")
    if end <= start:
        raise RuntimeEnvError(f"DLC_INTERVAL_END {end.isoformat()} is not after DLC_INTERVAL_START {start.isoformat()}")
    return start, end


def interval_key() -> str:
    """The interval's key (a str) in storage paths and the lineage manifest."""
    return _need("DLC_INTERVAL_KEY", "pipeline")


def lineage() -> str:
    """The lineage's name (a str)."""
    return _need("DLC_LINEAGE", "pipeline")


def data_uri() -> str:
    """This interval's preprocessed data (what preprocess wrote), as a URI (str)."""
    return _need("DLC_DATA_URI", "training or inference")


def output_uri() -> str:
    """Where this job writes its results, as a URI (str)."""
    return _need("DLC_OUTPUT_URI", "preprocess or inference")


def model_uri() -> str:
    """The checkpoint to run (inference), as a URI (str)."""
    return _need("DLC_MODEL_URI", "inference")


def local_path(uri: str | os.PathLike[str]) -> Path:
    """`uri` as a Path on this machine.

    A URI under DLC_STORAGE_URI maps to the same place under DLC_STORAGE_DIR (the mount):
    with DLC_STORAGE_URI=s3://ml/lineages and DLC_STORAGE_DIR=/mnt/ml,
    local_path("s3://ml/lineages/digits/ckpt") is Path("/mnt/ml/digits/ckpt"). A file:// URI
    with an absolute path, an absolute path (str or Path) are local already. Anything else
    (another store, a relative path) raises RuntimeEnvError: mount the store into the job.
    """
    uri = os.fspath(uri)
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
    """This interval's preprocessed data, data_uri() as a local Path (see local_path)."""
    return local_path(data_uri())


def output_dir() -> Path:
    """Where this job writes, output_uri() as a local Path (see local_path). The folder may not
    exist yet: create it (`mkdir(parents=True, exist_ok=True)`) before writing into it."""
    return local_path(output_uri())


def model_dir() -> Path:
    """The checkpoint inference runs, model_uri() as a local Path (see local_path): the
    folder save_checkpoint wrote (e.g. `model_dir() / "model.pt"`)."""
    return local_path(model_uri())
