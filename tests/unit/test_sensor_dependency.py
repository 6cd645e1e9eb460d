"""DLCJobSensor(task_id_of_job=...) is made downstream of that task of its own DAG, whichever
is created first (real DAGs of airflow.sdk; no database, nothing runs)."""

from __future__ import annotations

import copy
import textwrap
from datetime import UTC, datetime

import pytest
from airflow.sdk import DAG, TaskGroup
from dlc_airflow.operators import DLCJobOperator
from dlc_airflow.sensors import DLCJobSensor

from dlc_airflow.arguments import ArgumentError

JOB = {"type": "batch", "image": "registry.example.com/prep:1", "command": ["prep"], "roles": {"worker": 2}}
START = datetime(2026, 1, 1, tzinfo=UTC)


def dag(dag_id: str = "d") -> DAG:
    return DAG(dag_id, schedule=None, start_date=START)


def submit(task_id: str = "submit") -> DLCJobOperator:
    return DLCJobOperator(task_id=task_id, job=JOB, backend="local", wait_for_completion=False)


def test_job_task_first_the_sensor_is_downstream_at_once():
    with dag() as d:
        job = submit()
        wait = DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
    assert wait.upstream_task_ids == {"submit"} and job.downstream_task_ids == {"wait"}
    d.validate()
    d.check_cycle()
    assert wait.upstream_task_ids == {"submit"}


def test_sensor_first_the_dependency_is_set_when_the_dag_is_validated():
    with dag() as d:
        wait = DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
        job = submit()
    assert wait.upstream_task_ids == set()  # the job task did not exist when the sensor was made
    d.validate()  # what the DagBag (dag-processor, worker) and dag.test() call before using a DAG
    assert wait.upstream_task_ids == {"submit"} and job.downstream_task_ids == {"wait"}
    d.validate()  # again: nothing changes, nothing fails
    assert wait.upstream_task_ids == {"submit"}


def test_an_explicit_dependency_as_well_is_fine():
    with dag() as d:
        job = submit()
        wait = DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
        job >> wait
    d.validate()
    assert wait.upstream_task_ids == {"submit"}


def test_tasks_in_task_groups_are_named_by_their_full_id():
    with dag() as d:
        with TaskGroup("sensing"):
            wait = DLCJobSensor(task_id="wait", task_id_of_job="train.submit", backend="local")
        with TaskGroup("train"):
            submit()
    d.validate()
    assert wait.task_id == "sensing.wait" and wait.upstream_task_ids == {"train.submit"}


def test_several_sensors_on_one_job_and_a_dag_made_without_a_context_manager():
    d = dag()
    first = DLCJobSensor(task_id="first", task_id_of_job="submit", backend="local", dag=d)
    second = DLCJobSensor(task_id="second", task_id_of_job="submit", backend="local", dag=d)
    job = DLCJobOperator(task_id="submit", job=JOB, backend="local", dag=d)
    d.validate()
    assert first.upstream_task_ids == second.upstream_task_ids == {"submit"}
    assert job.downstream_task_ids == {"first", "second"}


@pytest.mark.parametrize("task_id_of_job", ["{{ params.job_task }}", "elsewhere"],
                         ids=["templated", "not-in-the-dag"])
def test_no_dependency_when_the_task_is_not_known_at_parse_time(task_id_of_job):
    """Documented: then the DAG author sets `job_task >> sensor` themselves."""
    with dag() as d:
        wait = DLCJobSensor(task_id="wait", task_id_of_job=task_id_of_job, backend="local")
        submit()
    d.validate()
    assert wait.upstream_task_ids == set()


def test_a_job_task_downstream_of_the_sensor_is_refused_with_one_line():
    with dag() as d:
        wait = DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
        job = submit()
        wait >> job
    with pytest.raises(ArgumentError, match=r"^wait: task_id_of_job 'submit' is downstream of the sensor"):
        d.validate()


def test_the_sensor_naming_itself_is_refused():
    with dag(), pytest.raises(ArgumentError, match="names the sensor itself"):
        DLCJobSensor(task_id="wait", task_id_of_job="wait", backend="local")


def test_a_deep_copy_of_the_dag_links_its_own_tasks():
    with dag() as d:
        DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
        submit()
    clone = copy.deepcopy(d)
    clone.validate()
    assert clone.task_dict["wait"].upstream_task_ids == {"submit"}
    assert d.task_dict["wait"].upstream_task_ids == set()  # the original is linked when it is validated
    d.validate()
    assert d.task_dict["wait"].upstream_task_ids == {"submit"}


def test_a_parsed_dag_file_stores_the_dependency(tmp_path):
    """Through Airflow's own DagBag and serializer, as the dag-processor stores the DAG."""
    from tests.support.airflow_versions import dag_serialization, dagbag_class

    DagBag, DagSerialization = dagbag_class(), dag_serialization()

    (tmp_path / "sensing.py").write_text(textwrap.dedent('''
        from datetime import datetime, timezone
        from airflow.sdk import DAG
        from dlc_airflow.operators import DLCJobOperator
        from dlc_airflow.sensors import DLCJobSensor

        with DAG("sensing", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
            DLCJobSensor(task_id="wait", task_id_of_job="submit", backend="local")
            DLCJobOperator(task_id="submit", backend="local", wait_for_completion=False,
                           job={"type": "custom", "image": "busybox", "command": ["true"]})
    '''))
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    stored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(bag.dags["sensing"]))
    assert stored.task_dict["wait"].upstream_task_ids == {"submit"}
