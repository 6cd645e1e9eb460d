"""The evaluation gate with real Airflow (dag.test) and real local jobs: a model is promoted
only when its metric passes; inference runs the promoted model, falls back to the previously
promoted one, or is skipped when there is none; the lineage continues regardless."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dlc_airflow.pipelines.lineage import Interval
from tests.pipelines import fakejobs

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAG = '''
from datetime import datetime, timezone
from dlc_airflow.pipelines import Gate, retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag({dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
                     storage_root={root!r}, **jobs({code!r}, {fail!r}), gate=Gate("accuracy", 0.55),
                     backend="local", local_root={local!r}, default_args={{"retries": 0}})
'''


def test_gate_promotes_falls_back_and_skips(dag_files, tmp_path):
    import uuid

    dag_id = f"gate_{uuid.uuid4().hex[:8]}"
    fail = tmp_path / "fail"
    fail.mkdir()
    root = tmp_path / "lineage"
    dag = dag_files(dag_id, DAG.format(dag_id=dag_id, root=f"file://{root}", code=str(fakejobs.write(tmp_path / "code")),
                                       fail=str(fail), local=str(tmp_path / "jobs")))
    days = [Interval(T0 + timedelta(days=k), T0 + timedelta(days=k + 1)) for k in range(3)]
    (fail / f"{days[0].key}.accuracy").write_text("0.1")  # below the gate, nothing promoted before
    (fail / f"{days[2].key}.accuracy").write_text("0.2")  # below the gate, day 2's model promoted

    def run(interval: Interval) -> dict:
        dag_run = dag.test(logical_date=interval.end)
        return {ti.task_id.split(".")[-1]: ti.state for ti in dag_run.get_task_instances()}

    def predictions(interval: Interval) -> set[str]:
        folder = root / dag_id / "predictions" / interval.key
        return {json.loads(p.read_text())["model"] for p in folder.glob("shard-*.json")}

    states = run(days[0])
    assert states["commit"] == "success" and states["promote"] == "skipped" and states["inference"] == "skipped"
    assert predictions(days[0]) == set()

    states = run(days[1])
    assert states["promote"] == "success" and states["inference"] == "success"
    manifest = json.loads((root / dag_id / "lineage.json").read_text())
    own = manifest["intervals"][days[1].key]["checkpoint"]
    assert manifest["promoted"]["interval"] == days[1].key and predictions(days[1]) == {own}
    # the lineage does not care about the gate: day 2 resumed from the unpromoted day 1
    assert manifest["intervals"][days[1].key]["resumed_from"] == days[0].key

    states = run(days[2])
    assert states["promote"] == "success" and states["inference"] == "success"
    manifest = json.loads((root / dag_id / "lineage.json").read_text())
    assert manifest["promoted"]["interval"] == days[1].key  # not moved
    assert predictions(days[2]) == {own}  # inference ran the previously promoted model
    assert manifest["intervals"][days[2].key]["resumed_from"] == days[1].key
    assert [Path(p["checkpoint"]).parent.name for p in manifest["promotions"]] == [days[1].key]
