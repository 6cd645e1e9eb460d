"""What the training job resumed from is what the lineage manifest says, with real Airflow
(dag.test) and real local jobs: interval 1, interval 1 again (a re-run: it must start from
scratch although its earlier attempt's checkpoint is in the checkpoint directory), then
interval 2 (from interval 1's re-run). Each job reports `resumed_from` through
dlc_airflow.runtime.resume_path; the train task's XCom carries it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dlc_airflow.pipelines.lineage import Interval
from dlc_airflow.runtime.metrics import read_outputs
from tests.airflow.test_operator_dagtest import xcom
from tests.pipelines import fakejobs

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAG = '''
from datetime import datetime, timezone
from dlc_airflow.pipelines import retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag({dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
                     storage_root={root!r}, **jobs({code!r}, {fail!r}, TRAIN_SECONDS="0"),
                     backend="local", local_root={local!r}, default_args={{"retries": 0}})
'''


def interval_of(checkpoint: str | None) -> str | None:
    """The interval key of a checkpoint URI .../checkpoints/<interval>/step-N."""
    return Path(checkpoint).parent.name if checkpoint else None


def test_each_job_resumed_from_what_the_manifest_says(dag_files, tmp_path):
    import uuid

    dag_id = f"resume_{uuid.uuid4().hex[:8]}"
    fail = tmp_path / "fail"
    fail.mkdir()
    root, local = tmp_path / "lineage", tmp_path / "jobs"
    dag = dag_files(dag_id, DAG.format(dag_id=dag_id, root=f"file://{root}", code=str(fakejobs.write(tmp_path / "code")),
                                       fail=str(fail), local=str(local)))
    days = [Interval(T0 + timedelta(days=k), T0 + timedelta(days=k + 1)) for k in range(2)]

    def run(interval: Interval) -> tuple[dict, dict]:
        """Run the interval; (the train task's XCom, the interval's manifest entry)."""
        dag_run = dag.test(logical_date=interval.end)
        tis = {ti.task_id.split(".")[-1]: ti for ti in dag_run.get_task_instances()}
        assert {k: ti.state for k, ti in tis.items()} == dict.fromkeys(tis, "success"), dag_run.run_id
        manifest = json.loads((root / dag_id / "lineage.json").read_text())
        return xcom(tis["train"]), manifest["intervals"][interval.key]

    def check(result: dict, entry: dict) -> None:
        reported = result["outputs"]["resumed_from"]
        assert reported == entry["resume_checkpoint"]
        assert interval_of(reported) == entry["resumed_from"]
        # every replica (not only the coordinator, whose outputs win in the XCom) agrees
        replicas = sorted((local / result["job_name"] / "outputs").glob("*.json"))
        assert len(replicas) == 2
        assert [read_outputs(p)["outputs"]["resumed_from"] for p in replicas] == [reported, reported]

    def chain(checkpoint: str) -> list[str]:
        """The intervals the checkpoint grew from (fakejobs records them), oldest first."""
        return [c["interval"] for c in json.loads((Path(checkpoint[len("file://"):]) / "chain.json").read_text())]

    first, entry = run(days[0])
    check(first, entry)
    assert entry["attempt"] == 1 and entry["resumed_from"] is None and first["outputs"]["resumed_from"] is None
    stale = Path(entry["checkpoint"][len("file://"):])
    assert stale.is_dir() and chain(entry["checkpoint"]) == [days[0].key]

    # the re-run of the first interval: its directory still holds attempt 1's checkpoint
    rerun, entry = run(days[0])
    assert rerun["job_name"] != first["job_name"]
    check(rerun, entry)
    assert entry["attempt"] == 2 and entry["resumed_from"] is None and rerun["outputs"]["resumed_from"] is None
    assert chain(entry["checkpoint"]) == [days[0].key]  # trained from scratch, not on top of attempt 1
    rerun_checkpoint = entry["checkpoint"]

    second, entry = run(days[1])
    check(second, entry)
    assert entry["resumed_from"] == days[0].key and second["outputs"]["resumed_from"] == rerun_checkpoint
    assert chain(entry["checkpoint"]) == [days[0].key, days[1].key]
