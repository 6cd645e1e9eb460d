"""The reference DAGs in dags/ parse in a real DagBag, and (c) is (a) pointed at a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(scope="module")
def dagbag(tmp_path_factory):
    import os

    from tests.support.airflow_versions import dagbag_class

    DagBag = dagbag_class()

    os.environ.setdefault("DLC_LINEAGE_ROOT", f"file://{tmp_path_factory.mktemp('lineage')}")
    return DagBag(dag_folder=str(DAGS))


def test_reference_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"retraining_digits", "retraining_digits_cluster", "sweep_digits"} <= set(dagbag.dag_ids)


def test_retraining_dag_has_data_intervals_and_the_lineage_gate(dagbag):
    dag = dagbag.dags["retraining_digits"]
    assert type(dag.timetable).__name__ == "CronDataIntervalTimetable"
    lineage, train = dag.get_task("retrain.lineage"), dag.get_task("retrain.train")
    assert lineage.depends_on_past and lineage.wait_for_downstream and train.depends_on_past
    assert {"retrain.train", "retrain.commit", "retrain.promote"} <= set(lineage.downstream_task_ids)
    assert train.job["type"] == "pytorch" and train.job["roles"]["worker"]["replicas"] == 2
    for task_id in ("retrain.preprocess", "retrain.inference"):
        assert dag.get_task(task_id).job["roles"]["worker"]["replicas"] == 2


def test_cluster_dag_is_the_local_one_but_for_the_backend(dagbag):
    local, cluster = dagbag.dags["retraining_digits"], dagbag.dags["retraining_digits_cluster"]
    assert set(local.task_ids) == set(cluster.task_ids)
    for task_id in ("retrain.preprocess", "retrain.train", "retrain.inference"):
        a, b = local.get_task(task_id), cluster.get_task(task_id)
        assert (a.backend, b.backend) == ("local", "native") and b.conn_id == "dlc_cluster"
        assert a.job["image"] == b.job["image"] == "dlc-airflow/runtime:dev"
        same = str(a.job).replace("retraining_digits", "LINEAGE")
        assert same == str(b.job).replace("retraining_digits_cluster", "LINEAGE")


def test_sweep_maps_one_training_job_per_learning_rate(dagbag):
    dag = dagbag.dags["sweep_digits"]
    train = dag.get_task("train")
    jobs = train.expand_input.value["job"]
    assert [j["env"]["LR"] for j in jobs] == ["0.01", "0.05", "0.2"]
    assert len({j["checkpoint"]["uri"] for j in jobs}) == 3  # one checkpoint folder per trial
