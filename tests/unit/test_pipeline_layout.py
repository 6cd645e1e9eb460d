"""Storage layout, the manifest store (real files through ObjectStoragePath), the cadence
timetables and the runtime side (dlc_airflow.runtime.pipeline)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import jinja2
import pendulum
import pytest

from dlc_airflow.pipelines import lineage as lin
from dlc_airflow.pipelines.layout import INTERVAL_KEY_TEMPLATE, Layout, normalize_root
from dlc_airflow.runtime import RuntimeEnvError
from dlc_airflow.runtime import pipeline as rt


def test_jinja_templates_render_the_same_uris_as_python():
    layout = Layout("s3://bucket/ml/", "digits", mount_path="/mnt/ml")
    start = pendulum.datetime(2026, 3, 1, 2, 0, tz="Europe/Berlin")  # 01:00 UTC
    end = start.add(hours=6)
    interval = lin.Interval(start, end)
    context = {"data_interval_start": start, "data_interval_end": end}

    def render(text: str) -> str:
        return jinja2.Template(text).render(**context)

    assert render(INTERVAL_KEY_TEMPLATE) == interval.key == "20260301T010000Z-20260301T070000Z"
    assert render(layout.data_template()) == layout.data(interval) == f"s3://bucket/ml/digits/data/{interval.key}"
    assert render(layout.checkpoints_template()) == layout.checkpoints(interval)
    assert render(layout.predictions_template()) == layout.predictions(interval)
    assert layout.manifest == "s3://bucket/ml/digits/lineage.json"
    assert layout.local_for_jobs(layout.data(interval)) == f"/mnt/ml/digits/data/{interval.key}"


def test_roots():
    assert normalize_root("/data/x/") == "file:///data/x"
    assert Layout("/data/x", "l").job_root == "/data/x"
    assert Layout("gs://b/x", "l").job_root is None
    for bad, match in [("", "empty"), ("data/x", "absolute"), ("file://data", "absolute path")]:
        with pytest.raises(ValueError, match=match):
            normalize_root(bad)
    with pytest.raises(ValueError, match="folder name"):
        Layout("/x", "a/b")


def test_store_round_trips_through_object_storage(tmp_path):
    from dlc_airflow.pipelines.store import ManifestStore

    store = ManifestStore(f"file://{tmp_path}/root/digits/lineage.json", "digits")
    assert store.load() == lin.empty_manifest("digits")  # nothing yet: an empty lineage
    interval = lin.Interval(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
    store.update(lambda m: lin.begin_attempt(m, interval, run_id="r", predecessor=None))
    on_disk = json.loads((tmp_path / "root/digits/lineage.json").read_text())
    assert on_disk["intervals"][interval.key]["status"] == "running"
    assert [p.name for p in (tmp_path / "root/digits").iterdir()] == ["lineage.json"]  # no temp file left
    (tmp_path / "root/digits/lineage.json").write_text("{not json")
    with pytest.raises(lin.LineageError, match="not valid JSON"):
        store.load()


def test_cadence_becomes_a_data_interval_timetable():
    from dlc_airflow.airflow.compat import data_interval_timetables

    CronDataIntervalTimetable, DeltaDataIntervalTimetable = data_interval_timetables()

    from dlc_airflow.pipelines import cadence_timetable

    assert isinstance(cadence_timetable("0 3 * * *"), CronDataIntervalTimetable)
    assert isinstance(cadence_timetable("@daily"), CronDataIntervalTimetable)
    assert isinstance(cadence_timetable(timedelta(hours=6)), DeltaDataIntervalTimetable)
    for bad in ("every day", "@once", timedelta(0), 5):
        with pytest.raises(ValueError):
            cadence_timetable(bad)


def test_runtime_reads_the_interval_and_maps_uris(monkeypatch, tmp_path):
    monkeypatch.setenv("DLC_INTERVAL_START", "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv("DLC_INTERVAL_END", "2026-01-02T00:00:00+00:00")
    monkeypatch.setenv("DLC_STORAGE_URI", "s3://bucket/ml")
    monkeypatch.setenv("DLC_STORAGE_DIR", "/mnt/ml")
    monkeypatch.setenv("DLC_DATA_URI", "s3://bucket/ml/digits/data/k")
    assert rt.interval() == (datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
    assert str(rt.data_dir()) == "/mnt/ml/digits/data/k"
    assert str(rt.local_path(f"file://{tmp_path}/x")) == f"{tmp_path}/x"
    with pytest.raises(RuntimeEnvError, match="not a local path"):
        rt.local_path("gs://other/x")
    with pytest.raises(RuntimeEnvError, match="DLC_MODEL_URI is not set"):
        rt.model_uri()
    monkeypatch.setenv("DLC_INTERVAL_END", "2025-12-31T00:00:00+00:00")
    with pytest.raises(RuntimeEnvError, match="not after"):
        rt.interval()
