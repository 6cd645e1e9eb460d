"""A lineage's Airflow Assets: its preprocessed data and its promoted model.

    from dlc_airflow.pipelines import model_asset
    with DAG("serve_digits", schedule=[model_asset("file:///data/lineages", "digits")]): ...

A downstream DAG scheduled on `model_asset` runs after each promotion; the asset event's
extra says what was promoted: {interval, checkpoint, metric, value, job}. Every successful
preprocessing emits an event of `data_asset` with {interval, data_uri, job}.

The model's event comes through an AssetAlias: the promote step (or the commit step without
a gate) succeeds whether or not it promoted, and only a promotion adds an event.
"""

from __future__ import annotations

from typing import Any

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pipelines.layout import DATA, Layout


def announce_job(outlets: list[Any], events: Any, result: JSONObject, interval: tuple[Any, Any]) -> None:
    """An asset event per Asset in a DLC task's `outlets`, saying which job made it and what
    it reported (`events`: the task context's outlet_events; `interval`: its data interval)."""
    from airflow.sdk import Asset

    start, end = interval
    extra = {"job": result["job_name"], "backend": result["backend"], "namespace": result["namespace"],
             "outputs": result["outputs"], "metrics": result["metrics"],
             "interval": [start.isoformat(), end.isoformat()] if start and end else None}
    for outlet in outlets:
        if isinstance(outlet, Asset):
            events[outlet].extra = extra


def model_asset(storage_root: str, lineage: str) -> Any:
    """The lineage's promoted model (uri: `<storage_root>/<lineage>/model`)."""
    from airflow.sdk import Asset

    layout = Layout(storage_root, lineage)
    return Asset(name=f"dlc-model/{lineage}", uri=f"{layout.base}/model", group="model")


def data_asset(storage_root: str, lineage: str) -> Any:
    """The lineage's preprocessed data (uri: `<storage_root>/<lineage>/data`)."""
    from airflow.sdk import Asset

    layout = Layout(storage_root, lineage)
    return Asset(name=f"dlc-data/{lineage}", uri=f"{layout.base}/{DATA}")


def promotions(lineage: str) -> Any:
    """The alias the promote (or commit) step adds a `model_asset` event to, on promotion."""
    from airflow.sdk import AssetAlias

    return AssetAlias(f"dlc-model-promotions/{lineage}")
