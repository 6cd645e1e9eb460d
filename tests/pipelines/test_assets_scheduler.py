"""A retraining lineage's Airflow Assets through the REAL scheduler (scheduler + dag-processor +
api-server, LocalExecutor, SQLite) on the local backend: every successful preprocessing emits
a data asset event, every promotion (and only a promotion) a model asset event carrying what
was promoted, and a DAG scheduled on the model asset runs after the promotions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pipelines import fakejobs
from tests.pipelines.test_backfill_scheduler import key
from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

DAG_ID = "assets_chain"
DAYS = ["2026-01-01", "2026-01-02", "2026-01-03"]

DAG_FILE = '''
from datetime import datetime, timezone
from dlc_airflow.pipelines import Gate, retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag(
    {dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    end_date=datetime(2026, 1, 3, tzinfo=timezone.utc), storage_root={root!r},
    **jobs({code!r}, {fail!r}), gate=Gate("accuracy", 0.55), backend="local", local_root={local!r},
    default_args={{"retries": 0}},
)
'''

DEPLOY_FILE = '''
import json
from datetime import datetime, timezone
from airflow.sdk import DAG, task
from dlc_airflow.pipelines import model_asset

MODEL = model_asset({root!r}, {dag_id!r})
with DAG("deploy_model", schedule=[MODEL], start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    @task
    def deploy(triggering_asset_events=None):
        with open({out!r}, "a") as handle:
            for event in triggering_asset_events[MODEL]:
                handle.write(json.dumps(event.extra) + "\\n")
    deploy()
'''


@pytest.fixture
def stack(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    fail = tmp_path / "fail"
    fail.mkdir()
    root = f"file://{tmp_path / 'lineage'}"
    (dags / f"{DAG_ID}.py").write_text(DAG_FILE.format(
        dag_id=DAG_ID, root=root, code=str(fakejobs.write(tmp_path / "code")), fail=str(fail),
        local=str(tmp_path / "jobs")))
    deployed = tmp_path / "deployed.jsonl"
    (dags / "deploy_model.py").write_text(DEPLOY_FILE.format(root=root, dag_id=DAG_ID, out=str(deployed)))
    repo = str(Path(__file__).resolve().parents[2])
    with AirflowStack(tmp_path / "home", dags, env={"PYTHONPATH": repo}) as s:
        s.deployed, s.manifest_path = deployed, tmp_path / "lineage" / DAG_ID / "lineage.json"
        yield s


def asset_events(stack, uri_suffix: str) -> list[dict]:
    rows = stack.query("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                       "WHERE a.uri LIKE ? ORDER BY e.id", f"%{uri_suffix}")
    return [json.loads(r["extra"]) if isinstance(r["extra"], str) else r["extra"] for r in rows]


def test_promotions_are_model_asset_events_and_a_downstream_dag_runs_on_them(stack):
    for dag_id in (DAG_ID, "deploy_model"):
        stack.wait_for_dag(dag_id)
        stack.airflow("dags", "unpause", dag_id)
    stack.airflow("backfill", "create", "--dag-id", DAG_ID, "--from-date", DAYS[0], "--to-date", DAYS[-1],
                  "--reprocess-behavior", "failed")
    stack.wait_for_runs(DAG_ID, len(DAYS), states={"success"}, timeout=900)
    manifest = json.loads(stack.manifest_path.read_text())
    keys = [key(d) for d in DAYS]
    # interval 1's accuracy (0.5) does not pass the gate: only 2 and 3 are promoted
    assert [p["interval"] for p in manifest["promotions"]] == keys[1:]

    model = asset_events(stack, f"/{DAG_ID}/model")
    assert [e["interval"] for e in model] == keys[1:], model
    for event, promoted in zip(model, manifest["promotions"], strict=True):
        assert (event["checkpoint"], event["metric"], event["value"]) == (
            promoted["checkpoint"], "accuracy", promoted["value"])
        assert event["job"].startswith("train-")
    data = asset_events(stack, f"/{DAG_ID}/data")
    assert len(data) == len(DAYS) and all(e["job"].startswith("preprocess-") and e["interval"] for e in data)

    # the downstream DAG ran on the promotions (Airflow may fold events that arrive together
    # into one run): every promotion reached it, once
    stack.wait_for_runs("deploy_model", 1, states={"success"}, timeout=300)

    def all_deployed():
        lines = stack.deployed.read_text().splitlines() if stack.deployed.exists() else []
        return [json.loads(line)["interval"] for line in lines] == keys[1:] or None

    stack._wait(all_deployed, 300, "both promotions to reach the downstream DAG", "scheduler")
    assert all(r["run_type"] == "asset_triggered" for r in stack.dag_runs("deploy_model"))
