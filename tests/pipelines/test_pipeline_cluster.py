"""The pipeline on the real local control plane (kube-apiserver, controllers, kwok nodes):
dag.test runs preprocess -> train -> inference as native batch/v1 Jobs, in order, and each
Job carries the right URIs. Two consecutive intervals: the second resumes from the first.

The pods do not run code (kwok nodes): each "runs" for the time in its annotation and ends
with the termination message in another annotation - for the training job, the
{"outputs": {"checkpoint": ...}} document dlc_airflow.runtime writes on a real cluster.
Everything else - Airflow, the API server, the Job controller, our lineage manifest - is real.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from dlc_airflow.k8s.kinds import JOB
from dlc_airflow.naming import MANAGED_BY
from dlc_airflow.pipelines.layout import Layout
from dlc_airflow.pipelines.lineage import Interval
from tests.airflow.test_operator_dagtest import xcom

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
MESSAGE = "pod-complete.stage.kwok.x-k8s.io/message"
IMAGE = "dlc-airflow/runtime:dev"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

DAG = '''
import json
from datetime import datetime, timezone
from dlc_airflow.pipelines import Gate, retraining_dag
from dlc_airflow.pipelines.layout import Layout

layout = Layout({root!r}, {dag_id!r}, mount_path="/mnt/lineage")
# the nodes' shared storage, where the cluster sees the storage root
volume = [{{"type": "host_path", "path": "/srv/lineage", "mount_path": "/mnt/lineage"}}]


def job(script, kind, **annotations):
    return {{"name": script, "type": kind, "image": {image!r}, "roles": {{"worker": 2}},
             "command": ["python", f"/workspace/jobs/{{script}}.py"], "storage": volume,
             "annotations": {{{run_for!r}: "1s", **annotations}}}}


# the training pods "report" the checkpoint save_checkpoint would have written
report = json.dumps({{"metrics": {{"accuracy": 0.9}},
                      "outputs": {{"checkpoint": layout.checkpoints_template() + "/step-000010"}}}})
dag = retraining_dag(
    {dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    storage_root={root!r}, mount_path="/mnt/lineage",
    preprocess=job("preprocess", "batch"), train=job("train", "pytorch", **{{{message!r}: report}}),
    inference=job("infer", "batch"), gate=Gate("accuracy", 0.5),
    backend="native", conn_id={conn_id!r}, default_args={{"retries": 0}},
    operator_kwargs={{"queue_timeout": 60, "timeout": 180}},
)
'''


def env_of(job: dict) -> dict[str, str]:
    container = job["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def jobs_by_task(kube) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for job in kube.list(JOB, labels={MANAGED_BY: "dlc-airflow"})[0]:
        task = job["metadata"]["labels"]["dlc-airflow/task-id"]
        found.setdefault(task, []).append(job)
    return found


def test_pipeline_runs_three_jobs_in_order_with_the_right_uris(kube, k8s_conn, dag_files, tmp_path, monkeypatch):

    # the lineage folder is a host path: the admin's policy must allow it (denied by default on a cluster)
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps(
        {"host_paths": [{"prefix": "/srv/lineage", "writable": True}]}))
    dag_id = f"pipe_{k8s_conn[4:]}"
    root = f"file://{tmp_path}/lineage"
    dag = dag_files(dag_id, DAG.format(dag_id=dag_id, root=root, image=IMAGE, conn_id=k8s_conn,
                                       run_for=RUN_FOR, message=MESSAGE))
    layout = Layout(root, dag_id, mount_path="/mnt/lineage")
    days = [Interval(T0 + timedelta(days=k), T0 + timedelta(days=k + 1)) for k in range(2)]
    seen: set[str] = set()
    for k, interval in enumerate(days):
        dag_run = dag.test(logical_date=interval.end)  # a manual run covers the interval ending at its date
        states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
        assert set(states.values()) == {"success"}, states
        new = {task: [j for j in jobs if j["metadata"]["uid"] not in seen] for task, jobs in jobs_by_task(kube).items()}
        pre, train, infer = (new[f"retrain.{t}"] for t in ("preprocess", "train", "inference"))
        assert len(pre) == len(train) == len(infer) == 1  # pytorch with only workers: one Job each
        pre, train, infer = pre[0], train[0], infer[0]
        seen |= {pre["metadata"]["uid"], train["metadata"]["uid"], infer["metadata"]["uid"]}

        # in order: train is created after preprocess completed, inference after train completed
        assert pre["status"]["completionTime"] <= train["metadata"]["creationTimestamp"]
        assert train["status"]["completionTime"] <= infer["metadata"]["creationTimestamp"]
        for job in (pre, train, infer):
            container = job["spec"]["template"]["spec"]["containers"][0]
            assert container["image"] == IMAGE
            env = env_of(job)
            assert env["DLC_INTERVAL_START"] == interval.start.isoformat()
            assert env["DLC_INTERVAL_END"] == interval.end.isoformat()
            assert env["DLC_INTERVAL_KEY"] == interval.key
            assert env["DLC_STORAGE_URI"] == root and env["DLC_STORAGE_DIR"] == "/mnt/lineage"
        assert env_of(pre)["DLC_OUTPUT_URI"] == layout.data(interval)
        train_env = env_of(train)
        assert train_env["DLC_DATA_URI"] == layout.data(interval)
        assert train_env["DLC_CHECKPOINT_URI"] == layout.checkpoints(interval)
        assert train_env["DLC_CHECKPOINT_DIR"] == f"/mnt/lineage/{dag_id}/checkpoints/{interval.key}"
        expected_resume = f"{layout.checkpoints(days[k - 1])}/step-000010" if k else None
        assert train_env.get("DLC_RESUME_FROM") == expected_resume
        infer_env = env_of(infer)
        assert infer_env["DLC_DATA_URI"] == layout.data(interval)
        assert infer_env["DLC_MODEL_URI"] == f"{layout.checkpoints(interval)}/step-000010"
        assert infer_env["DLC_OUTPUT_URI"] == layout.predictions(interval)
        assert xcom(dag_run.get_task_instance("retrain.train"))["outputs"]["checkpoint"] == infer_env["DLC_MODEL_URI"]

    manifest = json.loads((tmp_path / "lineage" / dag_id / "lineage.json").read_text())
    assert [manifest["intervals"][d.key]["resumed_from"] for d in days] == [None, days[0].key]
    assert manifest["promoted"]["interval"] == days[1].key
