"""Read and write a lineage manifest through Airflow's ObjectStoragePath.

file:// by default; s3://, gs://, oss://... work the same given `conn_id` (the Airflow
connection ObjectStoragePath uses for that store). A local manifest is replaced atomically
(written beside it, then renamed); object stores replace an object whole anyway.

Writers of one lineage are serialised by the pipeline (depends_on_past and
wait_for_downstream on its lineage task): a read-modify-write here is never concurrent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pipelines import lineage as lin

__all__ = ["ManifestStore", "check_openable"]

_LOCAL_SCHEMES = ("file", "local")


def check_openable(uri: str, what: str = "storage_root") -> None:
    """Raise ValueError unless ObjectStoragePath can open `uri`'s scheme here: file://, a
    filesystem an Airflow provider registers, or an installed fsspec implementation. Called
    at DAG parse time, so an unknown scheme fails before any job ran (not after preprocessing)."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"
    if scheme in _LOCAL_SCHEMES:
        return
    from airflow.sdk.io.fs import has_fs

    if has_fs(scheme):
        return
    import fsspec

    try:
        fsspec.get_filesystem_class(scheme)
        return
    except ImportError as exc:  # a known store whose library is missing ("Install s3fs to access S3")
        why = " ".join(str(exc).split()) or f"the {scheme} filesystem is not installed"
    except ValueError:
        why = f"no filesystem handles {scheme}://"
    raise ValueError(f"{what} {uri!r}: ObjectStoragePath cannot open {scheme}:// here ({why}); use file://, "
                     "or install the store's Airflow provider or fsspec library on the DAG processor and workers")


class ManifestStore:
    def __init__(self, uri: str, lineage: str, conn_id: str | None = None) -> None:
        self.uri = uri
        self.lineage = lineage
        self.conn_id = conn_id

    def _path(self, uri: str | None = None) -> Any:
        from airflow.sdk import ObjectStoragePath

        return ObjectStoragePath(uri or self.uri, conn_id=self.conn_id)

    def load(self) -> JSONObject:
        """The manifest; an empty one when there is none yet."""
        path = self._path()
        try:
            if not path.exists():
                return lin.empty_manifest(self.lineage)
            text = path.read_text()
        except OSError as exc:
            raise lin.LineageError(f"cannot read the lineage manifest {self.uri}: {exc}; check the storage "
                                   f"root and its connection ({self.conn_id or 'none'})") from None
        try:
            data = json.loads(text)
        except ValueError:
            raise lin.LineageError(f"the lineage manifest {self.uri} is not valid JSON; fix it or move it "
                                   "aside (a new lineage then starts from scratch)") from None
        return lin.check_manifest(data, where=f"the lineage manifest {self.uri}")

    def save(self, manifest: JSONObject) -> None:
        lin.check_manifest(manifest)
        text = json.dumps(manifest, indent=1, sort_keys=True)
        path = self._path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.protocol in ("file", "local", ""):
                tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}"
                tmp.write_text(text)
                tmp.rename(path)
            else:
                path.write_text(text)
        except OSError as exc:
            raise lin.LineageError(f"cannot write the lineage manifest {self.uri}: {exc}") from None

    def update(self, change: Callable[[JSONObject], JSONObject]) -> JSONObject:
        """Load, apply `change` (a pure function), save; returns the new manifest."""
        manifest = change(self.load())
        self.save(manifest)
        return manifest
