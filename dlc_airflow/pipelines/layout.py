"""Where a lineage keeps its things, as URIs (pure functions and Jinja templates).

    <root>/<lineage>/lineage.json                      the manifest (dlc_airflow.pipelines.lineage)
    <root>/<lineage>/data/<interval key>/              preprocessed data of one interval
    <root>/<lineage>/checkpoints/<interval key>/       that interval's checkpoints (step-N/)
    <root>/<lineage>/predictions/<interval key>/       inference output of that interval

`root` is the storage root as Airflow's ObjectStoragePath names it (file:///..., s3://...,
gs://..., oss://...); a plain absolute path means file://. The jobs get these URIs in
their env; where they see the root at another path (a mount), `mount_path` says where and
dlc_airflow.runtime.pipeline.local_path maps a URI to it.

Every URI exists twice: as a Python function of an Interval (for the tasks that run in
Airflow) and as a Jinja template of the run's data interval (for job specs, rendered by
Airflow when the task runs). tests/unit/test_pipeline_layout.py checks they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlc_airflow.pipelines.lineage import Interval

__all__ = ["INTERVAL_KEY_TEMPLATE", "Layout", "normalize_root"]

MANIFEST = "lineage.json"
DATA, CHECKPOINTS, PREDICTIONS = "data", "checkpoints", "predictions"

# The run's data interval as Interval.key renders it (Airflow gives pendulum datetimes).
_STAMP = "%Y%m%dT%H%M%SZ"
INTERVAL_KEY_TEMPLATE = (
    "{{ data_interval_start.in_timezone('UTC').strftime('" + _STAMP + "') }}-"
    "{{ data_interval_end.in_timezone('UTC').strftime('" + _STAMP + "') }}"
)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_LINEAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def normalize_root(root: str) -> str:
    """`root` as a URI without a trailing slash; a plain absolute path becomes file://."""
    text = str(root).strip()
    if not text:
        raise ValueError("storage_root is empty: give a URI such as file:///data/lineage or s3://bucket/lineage")
    if not _SCHEME.match(text):
        if not text.startswith("/"):
            raise ValueError(f"storage_root {text!r} is neither a URI (file://, s3://...) nor an absolute path")
        text = "file://" + text
    if text.startswith("file://") and not text[len("file://"):].startswith("/"):
        raise ValueError(f"storage_root {text!r}: a file:// URI needs an absolute path (file:///...)")
    return text.rstrip("/")


@dataclass(frozen=True)
class Layout:
    """The URIs of one lineage under a storage root."""

    root: str
    lineage: str
    mount_path: str | None = None  # where the jobs see `root`; default: root's path for file://

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", normalize_root(self.root))
        if not _LINEAGE.match(self.lineage or ""):
            raise ValueError(f"lineage {self.lineage!r} must be letters, digits, '_', '.' and '-' (a folder name)")
        if self.mount_path is not None and not self.mount_path.startswith("/"):
            raise ValueError(f"mount_path {self.mount_path!r} must be an absolute path inside the job containers")

    @property
    def base(self) -> str:
        return f"{self.root}/{self.lineage}"

    @property
    def manifest(self) -> str:
        return f"{self.base}/{MANIFEST}"

    @property
    def job_root(self) -> str | None:
        """Where the jobs see `root` as a local path, or None (they read the URIs themselves)."""
        if self.mount_path:
            return self.mount_path.rstrip("/") or "/"
        if self.root.startswith("file://"):
            return self.root[len("file://"):]
        return None

    def local_for_jobs(self, uri: str) -> str | None:
        """The path a job sees for a URI under root (None if the jobs have no local view)."""
        if self.job_root is None or not uri.startswith(self.root):
            return None
        return self.job_root.rstrip("/") + uri[len(self.root):]

    # -- per interval (Python) ----------------------------------------------------------
    def data(self, interval: Interval) -> str:
        return f"{self.base}/{DATA}/{interval.key}"

    def checkpoints(self, interval: Interval) -> str:
        return f"{self.base}/{CHECKPOINTS}/{interval.key}"

    def predictions(self, interval: Interval) -> str:
        return f"{self.base}/{PREDICTIONS}/{interval.key}"

    # -- per interval (Jinja, rendered by Airflow from the run's data interval) ------------
    def data_template(self) -> str:
        return f"{self.base}/{DATA}/{INTERVAL_KEY_TEMPLATE}"

    def checkpoints_template(self) -> str:
        return f"{self.base}/{CHECKPOINTS}/{INTERVAL_KEY_TEMPLATE}"

    def predictions_template(self) -> str:
        return f"{self.base}/{PREDICTIONS}/{INTERVAL_KEY_TEMPLATE}"
