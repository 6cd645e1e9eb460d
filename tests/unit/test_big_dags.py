"""The guard for big DAGs on the no-worker path (dlc_airflow.airflow.big_dags): past a budget
of (tasks starting in the triggerer) x (tasks in the DAG), every task of the DAG starts on a
worker and defers; what Airflow serializes (what its scheduler acts on) says so, and the
decision is logged once per DAG. The budget's evidence: benchmarks/README.md."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

import pytest

from dlc_airflow.airflow.big_dags import BUDGET, over_budget
from dlc_airflow.airflow.compat import OFFERS
from tests.support.airflow_versions import dag_serialization

JOB = {"type": "batch", "image": "local", "command": ["true"]}


def test_the_budget():
    assert not over_budget(200, 200)  # ran well: 1.1 GiB of triggerer
    assert over_budget(201, 200) and over_budget(1000, 1000)
    assert not over_budget(0, 100_000)  # no task starts there: no cost there
    assert BUDGET == 200 * 200


def dag_of(tasks: int, *, others: int = 0):
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from dlc_airflow.operators import DLCJobOperator

    with DAG(f"big_{uuid.uuid4().hex[:6]}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        for i in range(tasks):
            DLCJobOperator(task_id=f"t{i}", backend="local", deferrable=True, job=JOB)
        for i in range(others):
            EmptyOperator(task_id=f"e{i}")
    return dag


def serialized_flags(dag) -> set[bool]:
    serialization = dag_serialization()
    stored = serialization.deserialize_dag(serialization.serialize_dag(dag))
    return {bool(task.start_from_trigger) for task in stored.tasks if task.task_id.startswith("t")}


@pytest.mark.parametrize("tasks, others, starts", [
    (20, 0, True),  # 20 x 20
    (200, 0, True),  # 200 x 200: at the budget
    (201, 0, False),
    (100, 400, False),  # 100 x 500: a big DAG counts all its tasks
])
def test_a_dag_past_the_budget_starts_every_task_on_a_worker(tasks, others, starts, caplog):
    with caplog.at_level(logging.WARNING, logger="dlc_airflow.airflow.big_dags"):
        dag = dag_of(tasks, others=others)
        flags = serialized_flags(dag)
    expected = starts and OFFERS.start_from_trigger  # Airflow 3.1 and 3.2 never start a task there
    assert flags == {expected}
    assert {bool(t.start_from_trigger) for t in dag.tasks if t.task_id.startswith("t")} == {expected}
    said = [m for m in caplog.messages if dag.dag_id in m]
    if OFFERS.start_from_trigger and not starts:
        assert len(said) == 1, said  # once per DAG, whatever the number of reads
        assert "has more tasks that would start in the triggerer" in said[0]
        assert "every task of it starts on a worker and then defers" in said[0]
    else:
        assert not said


def test_mapped_tasks_never_start_in_the_triggerer():
    """Airflow reads the class's flag for mapped tasks: the guard's descriptor gives False there."""
    from airflow.sdk import DAG
    from dlc_airflow.operators import DLCJobOperator

    assert DLCJobOperator.start_from_trigger is False
    with DAG(f"mapped_{uuid.uuid4().hex[:6]}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)) as dag:
        DLCJobOperator.partial(task_id="t_mapped", backend="local", deferrable=True).expand(job=[JOB, JOB])
    assert serialized_flags(dag) == {False}


def test_the_admin_sets_the_budget(monkeypatch, caplog):
    from dlc_airflow.airflow.settings import SettingError, big_dag_budget

    option = "AIRFLOW__DLC_AIRFLOW__BIG_DAG_BUDGET"
    assert big_dag_budget(BUDGET) == BUDGET
    monkeypatch.setenv(option, "100_000")
    assert big_dag_budget(BUDGET) == 100_000
    with caplog.at_level(logging.WARNING, logger="dlc_airflow.airflow.big_dags"):
        assert serialized_flags(dag_of(300)) == {OFFERS.start_from_trigger}  # 300 x 300 < 100,000
        monkeypatch.setenv(option, "400")
        dag = dag_of(21)  # 21 x 21 > 400
        assert serialized_flags(dag) == {False}
    said = [m for m in caplog.messages if dag.dag_id in m]
    if OFFERS.start_from_trigger:
        assert any("big_dag_budget sets the limit" in m and "> 400" in m for m in said), said
    else:  # Airflow 3.1 and 3.2 never start a task there: nothing to guard, nothing said
        assert not said
    for bad in ("0", "-5", "many", "1.5"):
        monkeypatch.setenv(option, bad)
        with pytest.raises(SettingError, match=r"\[dlc_airflow\] big_dag_budget .* must be a whole number"):
            big_dag_budget(BUDGET)
