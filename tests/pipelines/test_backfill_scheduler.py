"""Backfills through the REAL scheduler (scheduler + dag-processor + api-server, LocalExecutor,
SQLite) on the local backend: intervals train in order, each resuming from its predecessor;
a failed interval blocks the later ones until it is cleared and succeeds; clearing an old
interval resumes it from its own predecessor. Nothing is mocked."""

from __future__ import annotations

import json
import time
from datetime import UTC
from pathlib import Path

import pytest

from dlc_airflow.pipelines.lineage import Interval
from tests.pipelines import fakejobs
from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1500)]

DAG_ID = "backfill_chain"
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]

DAG_FILE = '''
import json
from datetime import datetime, timezone
from dlc_airflow.pipelines import Gate, retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag(
    {dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    end_date=datetime(2026, 1, 4, tzinfo=timezone.utc), storage_root={root!r},
    **jobs({code!r}, {fail!r}), gate=Gate("accuracy", 0.0), backend="local", local_root={local!r},
    default_args={{"retries": 0}},
)
'''


def key(day: str) -> str:
    from datetime import datetime, timedelta

    start = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return Interval(start, start + timedelta(days=1)).key


@pytest.fixture
def stack(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    fail = tmp_path / "fail"
    fail.mkdir()
    root = tmp_path / "lineage"
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE.format(
        dag_id=DAG_ID, root=f"file://{root}", code=str(fakejobs.write(tmp_path / "code")), fail=str(fail),
        local=str(tmp_path / "jobs")))
    repo = str(Path(__file__).resolve().parents[2])
    with AirflowStack(tmp_path / "home", dags, env={"PYTHONPATH": repo}) as s:
        s.fail_dir, s.manifest_path = fail, root / DAG_ID / "lineage.json"
        yield s


def manifest(stack) -> dict:
    return json.loads(stack.manifest_path.read_text())


def chain_of(entry: dict) -> list[dict]:
    path = Path(entry["checkpoint"].removeprefix("file://")) / "chain.json"
    return json.loads(path.read_text())


def run_for(stack, day: str) -> dict:
    (run,) = [r for r in stack.dag_runs(DAG_ID) if r["logical_date"].startswith(day)]
    return run


def test_backfill_trains_in_order_blocks_on_failure_and_reruns_resume_from_their_predecessor(stack):
    stack.wait_for_dag(DAG_ID)
    stack.airflow("dags", "unpause", DAG_ID)
    (stack.fail_dir / key(DAYS[2])).touch()  # interval 3 fails on its first attempt
    stack.airflow("backfill", "create", "--dag-id", DAG_ID, "--from-date", DAYS[0], "--to-date", DAYS[-1],
                  "--reprocess-behavior", "failed")  # Airflow requires it with depends_on_past

    # 1 and 2 succeed, 3 fails; 4 is blocked, not failed and not skipped past 3.
    stack.wait_for_runs(DAG_ID, 2, states={"success", "failed", "running"},
                        where=lambda r: r["state"] == "success")
    stack.wait_for_task(DAG_ID, run_for(stack, DAYS[2])["run_id"], "retrain.commit", {"failed"})
    run4 = run_for(stack, DAYS[3])
    stack.wait_for_task(DAG_ID, run4["run_id"], "retrain.preprocess", {"success"})  # the scheduler got to run 4
    time.sleep(10)  # several scheduler loops: long enough for the lineage task to start if it could
    assert run_for(stack, DAYS[2])["state"] == "failed"
    assert run_for(stack, DAYS[3])["state"] == "running"
    states4 = stack.task_states(DAG_ID, run4["run_id"])
    assert states4["retrain.lineage"] is None and states4["retrain.train"] is None, states4
    doc = manifest(stack)
    assert doc["intervals"][key(DAYS[2])]["status"] == "failed"
    assert key(DAYS[3]) not in doc["intervals"]  # interval 4 never began

    # Fix the cause and clear interval 3: it runs again and unblocks 4.
    (stack.fail_dir / key(DAYS[2])).unlink()
    stack.airflow("tasks", "clear", DAG_ID, "--start-date", DAYS[2], "--end-date", DAYS[2], "--yes")
    runs = stack.wait_for_runs(DAG_ID, 4, states={"success"})
    assert [r["run_type"] for r in runs] == ["backfill"] * 4
    doc = manifest(stack)
    keys = [key(d) for d in DAYS]
    assert [doc["intervals"][k]["resumed_from"] for k in keys] == [None, keys[0], keys[1], keys[2]]
    third = doc["intervals"][keys[2]]
    assert third["attempt"] == 2 and third["previous"][0]["status"] == "failed"
    for earlier, later in zip(keys, keys[1:], strict=False):  # each resumed from exactly its predecessor's checkpoint
        assert doc["intervals"][later]["resume_checkpoint"] == doc["intervals"][earlier]["checkpoint"]
    chain = chain_of(doc["intervals"][keys[3]])
    assert [c["interval"] for c in chain] == keys
    for a, b in zip(chain, chain[1:], strict=False):  # never two trainings of the lineage at once
        assert a["ended"] <= b["began"], (a, b)
    assert doc["promoted"]["interval"] == keys[3]

    # Clear an old interval: it resumes from its own predecessor, not from the newest.
    cleared_before = run_for(stack, DAYS[1])["clear_number"]
    stack.airflow("tasks", "clear", DAG_ID, "--start-date", DAYS[1], "--end-date", DAYS[1], "--yes")
    stack.wait_for_runs(DAG_ID, 4, states={"success"},
                        where=lambda r: r["clear_number"] > cleared_before or not r["logical_date"].startswith(DAYS[1]))
    doc = manifest(stack)
    second = doc["intervals"][keys[1]]
    assert second["attempt"] == 2 and second["resumed_from"] == keys[0]
    assert [c["interval"] for c in chain_of(second)] == keys[:2]
    assert doc["promoted"]["interval"] == keys[3]  # the old interval did not roll the model back
