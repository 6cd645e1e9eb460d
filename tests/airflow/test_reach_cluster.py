"""What users touch, on the local control plane (the local backend's tests are in test_notify.py,
test_ui_browser.py, tests/pipelines/test_assets_scheduler.py): a deferred native job notifies
its state changes, emits its Asset's event with what it reported, and its report page (the
DLC jobs app's own code, fed from the metadata DB like the api-server's) shows its pods on
the timeline and its metric curves from the pod logs."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.airflow.test_notify import notes
from tests.airflow.test_operator_dagtest import RUN_FOR
from tests.support.cluster import pod_logs

DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG, Asset
from dlc_airflow.operators import DLCJobOperator
from tests.support.notifiers import FileNotifier

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}) as dag:
    DLCJobOperator(task_id="train", conn_id={conn!r}, backend="native", deferrable=True, job={job!r},
                   notify=[FileNotifier({notes!r})], outlets=[Asset(name={asset!r}, uri="s3://models/{asset}")])
'''

MESSAGE = '{"metrics": {"accuracy": 0.93}, "outputs": {"model_uri": "s3://models/digits/7"}}'


@pytest.mark.airflow
def test_a_native_job_notifies_emits_its_asset_and_has_a_report(kube, admin, k8s_conn, dag_files, tmp_path):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    log_file = tmp_path / "pod.log"
    log_file.write_text("".join(f'2026-12-02T10:00:0{i}.000000000Z stdout F DLC_METRICS {{"step": {i}, '
                                f'"loss": {1 - i / 10}}}\n' for i in range(1, 5)))
    job = {"type": "pytorch", "image": "registry.local/train:1", "command": ["python", "train.py"],
           "roles": {"master": 1, "worker": 1},
           "annotations": {RUN_FOR: "6s", "pod-complete.stage.kwok.x-k8s.io/message": MESSAGE}}
    dag_id, asset = f"r_{uuid.uuid4().hex[:8]}", f"model-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "notes.jsonl"
    undo = pod_logs(admin, kube.namespace, log_file)
    try:
        dag = dag_files(dag_id, DAG.format(dag_id=dag_id, conn=k8s_conn, job=job, notes=str(out), asset=asset))
        run = dag.test()
        ti = run.get_task_instance("train")
        assert ti.state == "success"
        from dlc_airflow.ui.app import _job_page, run_page

        page = _job_page(dag_id, run.run_id, "train", -1).body.decode()
        runs = run_page(dag_id, run.run_id).body.decode()
    finally:
        undo()
    # notifications from the triggerer (dag.test runs the trigger inline)
    got = notes(out)
    assert [n["event"] for n in got] == ["running", "succeeded"], got
    assert got[-1]["state"] == "SUCCEEDED" and "/dlc/jobs/" in got[-1]["link"]
    # the Asset's event, with what the job reported (the task came back to a worker to emit it)
    with create_session() as session:
        (event,) = (session.query(AssetEvent).join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                    .filter(AssetModel.name == asset).all())
        extra = event.extra
    assert extra["outputs"] == {"model_uri": "s3://models/digits/7"} and extra["metrics"] == {"accuracy": 0.93}
    assert extra["backend"] == "native" and extra["namespace"] == kube.namespace
    # the report page: both pods on the timeline, the loss curve from the pod logs
    assert 'data-replica="master-0"' in page and 'data-replica="worker-0"' in page
    assert 'data-metric="loss"' in page and 'data-points="4"' in page
    assert "SUCCEEDED" in runs and extra["job"] in runs
    assert json.dumps(0.93) in page or "0.93" in page
