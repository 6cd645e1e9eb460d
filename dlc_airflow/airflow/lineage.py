"""OpenLineage for DLCJobOperator, when apache-airflow-providers-openlineage is installed and
configured: a job's inputs are the data URIs it reads (the pipeline's DLC_DATA_URI and
DLC_MODEL_URI, the checkpoint it resumes from) and its outputs what it writes (DLC_OUTPUT_URI,
its checkpoint folder, and the URIs it reported: outputs `checkpoint`, `model_uri`...).

The provider's listener runs on the worker as a task ends; a task the trigger ends never
comes back to a worker, so with OpenLineage on, deferred DLC tasks resume on a worker for
their last step (DLCJobOperator._ends_in_triggerer).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from dlc_airflow.jsonvalue import JSONObject

INPUT_ENV = ("DLC_DATA_URI", "DLC_MODEL_URI")
OUTPUT_ENV = ("DLC_OUTPUT_URI",)
# reported outputs (dlc_airflow.runtime.report_output) that name a location the job wrote
OUTPUT_KEYS = ("checkpoint", "model_uri", "output_uri", "predictions")


def lineage_listener_on() -> bool:
    """The OpenLineage provider is installed and not disabled (its listener then runs)."""
    try:
        from airflow.providers.openlineage import conf
    except ImportError:
        return False
    try:
        return not conf.is_disabled()
    except Exception:  # noqa: BLE001 - a broken lineage config must not fail the job
        return False


def uris(job: JSONObject, result: JSONObject | None) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a rendered job spec and its result (pure)."""
    env = job.get("env") or {}
    inputs = [env[k] for k in INPUT_ENV if isinstance(env.get(k), str) and env[k]]
    outputs = [env[k] for k in OUTPUT_ENV if isinstance(env.get(k), str) and env[k]]
    checkpoint = job.get("checkpoint") or {}
    if checkpoint.get("resume_from"):
        inputs.append(checkpoint["resume_from"])
    if checkpoint.get("uri"):
        outputs.append(checkpoint["uri"])
    reported = (result or {}).get("outputs") or {}
    outputs += [v for k, v in reported.items() if k in OUTPUT_KEYS and isinstance(v, str) and "://" in v]
    return _unique(inputs), _unique(outputs)


def dataset(uri: str) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a URI: scheme://authority and the path
    (file:///data/x -> ("file", "/data/x"); s3://bucket/key -> ("s3://bucket", "key"))."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return "file", parts.path or uri
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")


def operator_lineage(job: JSONObject, result: JSONObject | None) -> Any:
    from airflow.providers.common.compat.openlineage.facet import Dataset
    from airflow.providers.openlineage.extractors import OperatorLineage

    inputs, outputs = uris(job, result)
    return OperatorLineage(inputs=[Dataset(*dataset(u)) for u in inputs],
                           outputs=[Dataset(*dataset(u)) for u in outputs])


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))
