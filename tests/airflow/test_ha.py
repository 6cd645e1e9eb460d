"""HA through real Airflow on PostgreSQL (scripts/postgres-local): two schedulers and two
triggerers, deferred tasks that started in the triggerer (no worker). One triggerer is
SIGKILLed while every task waits; its triggers move to the other, which adopts each job
(the idempotent submit); then a scheduler is SIGKILLed too, and the other one runs the DAG
run to its end. Every task ends once: no duplicate Job, no lost finish.
benchmarks/airflow_ha.py runs the same with 100 tasks (DLC_HA_TASKS) and keeps its timings
(DLC_HA_REPORT)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from dlc_airflow.k8s.kinds import JOB, POD
from dlc_airflow.naming import LABEL_JOB, LABEL_TASK_KEY
from tests.support.airflow_stack import AirflowStack

REPO = Path(__file__).resolve().parents[2]
HOLD, RELEASE = "pod-hold.stage.kwok.x-k8s.io", "pod-release.stage.kwok.x-k8s.io"
TASKS = int(os.environ.get("DLC_HA_TASKS", "20"))
pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600 + 30 * TASKS)]

DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG("ha", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), max_active_tasks=100,
         default_args={{"retries": 0}}) as dag:
    for i in range({tasks}):
        DLCJobOperator(task_id=f"t{{i}}", conn_id={conn!r}, backend="native", deferrable=True, job={{
            "type": "batch", "image": "registry.local/prep:1", "command": ["prep"], "labels": {{"{hold}": "true"}}}})
'''


def alive_triggerers(stack) -> list[int]:
    return [r["id"] for r in stack.query(
        "SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running' AND end_date IS NULL "
        "AND latest_heartbeat > now() - interval '5 seconds'")]


def test_a_killed_triggerer_and_scheduler_hand_over_and_every_task_ends_once(postgres, kube, admin, k8s_conn, tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "ha.py").write_text(DAG.format(tasks=TASKS, conn=k8s_conn, hold=HOLD))
    env = {f"AIRFLOW_CONN_{k8s_conn.upper()}": os.environ[f"AIRFLOW_CONN_{k8s_conn.upper()}"],
           "PYTHONPATH": str(REPO), "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10"}
    # the second triggerer joins once the first holds every wait
    components = ("api-server", "scheduler", "scheduler:2", "dag-processor", "triggerer")
    with AirflowStack(tmp_path / "home", dags, env=env, components=components, database=postgres) as stack:
        stack.wait_for_dag("ha", timeout=300)
        stack.airflow("dags", "unpause", "ha")
        stack.airflow("dags", "trigger", "ha")
        # every task deferred straight from the scheduler (no worker), its trigger running
        stack._wait(lambda: len(stack.query("SELECT 1 FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
                                            "WHERE ti.dag_id = 'ha' AND t.triggerer_id IS NOT NULL")) == TASKS,
                    600, f"{TASKS} tasks deferred and assigned")
        assert not stack.query("SELECT 1 FROM task_instance WHERE dag_id = 'ha' AND queued_dttm IS NOT NULL")
        stack._wait(lambda: len([p for p in admin.list(POD, kube.namespace)[0]
                                 if (p.get("status") or {}).get("phase") == "Running"]) == TASKS, 300,
                    "every job's pod running")
        before = {r["task_id"]: r["triggerer_id"] for r in stack.query(
            "SELECT ti.task_id, t.triggerer_id FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
            "WHERE ti.dag_id = 'ha'")}
        assert len(set(before.values())) == 1, before  # the first triggerer waits on them all
        stack.start("triggerer:2")
        stack._wait(lambda: len(alive_triggerers(stack)) == 2, 120, "the second triggerer to run")
        killed = time.monotonic()
        stack.kill("triggerer")  # SIGKILL: no cleanup, no on_kill
        alive = ("api-server", "scheduler", "scheduler:2", "triggerer:2")  # the killed one is not
        survivors = stack._wait(lambda: alive_triggerers(stack) if len(alive_triggerers(stack)) == 1 else None,
                                120, "one triggerer left", *alive)

        def handed_over():
            now = {r["task_id"]: r["triggerer_id"] for r in stack.query(
                "SELECT ti.task_id, t.triggerer_id FROM task_instance ti JOIN trigger t ON ti.trigger_id = t.id "
                "WHERE ti.dag_id = 'ha'")}
            return now if len(now) == TASKS and set(now.values()) == set(survivors) else None
        after = stack._wait(handed_over, 180, "the killed triggerer's waits to move", *alive)
        assert all(before[t] != after[t] for t in before)  # every wait moved
        moved = time.monotonic() - killed
        time.sleep(5)  # the survivor's new triggers adopt their jobs (no submit of another)
        # one scheduler dies as well (SIGKILL, its executor with it): the other one alone runs
        # the DAG run to its end
        stack.kill("scheduler")
        alive = ("api-server", "scheduler:2", "triggerer:2")
        released = time.monotonic()
        for pod in admin.list(POD, kube.namespace)[0]:
            admin.patch(POD, pod["metadata"]["name"], {"metadata": {"labels": {RELEASE: "true"}}},
                        namespace=kube.namespace)
        stack._wait(lambda: len(stack.query("SELECT 1 FROM task_instance WHERE dag_id = 'ha' AND state IN "
                                            "('success', 'failed')")) == TASKS, 600, "every task to end", *alive)
        all_ended = time.monotonic() - released
        stack._wait(lambda: [r for r in stack.dag_runs("ha") if r["state"] == "success"], 300,
                    "the run to succeed with one scheduler left", *alive)
        tis = stack.query("SELECT task_id, state, try_number FROM task_instance WHERE dag_id = 'ha'")
        assert {(r["state"], r["try_number"]) for r in tis} == {("success", 1)}, tis
        results = {r["task_id"]: r["value"] for r in stack.query(
            "SELECT task_id, value FROM xcom WHERE dag_id = 'ha' AND key = 'return_value'")}
    # one Job per task (attempt 1), made once: the moved waits adopted theirs
    jobs = kube.list(JOB)[0]
    per_task: dict[str, set[str]] = {}
    for job in jobs:
        labels = job["metadata"]["labels"]
        per_task.setdefault(labels[LABEL_TASK_KEY], set()).add(labels[LABEL_JOB])
    assert len(per_task) == TASKS and all(len(names) == 1 and next(iter(names)).endswith("-1")
                                          for names in per_task.values()), per_task
    assert len(results) == TASKS
    states = {json.loads(v)["state"] if isinstance(v, str) else v["state"] for v in results.values()}
    assert states == {"SUCCEEDED"}
    if os.environ.get("DLC_HA_REPORT"):
        Path(os.environ["DLC_HA_REPORT"]).write_text(json.dumps({
            "tasks": TASKS, "kill_to_every_wait_moved_s": round(moved, 1),
            "release_to_every_task_ended_s": round(all_ended, 1), "jobs": len(jobs), "duplicate_jobs": len(jobs) - TASKS,
            "tasks_ended_once": sum(1 for r in tis if (r["state"], r["try_number"]) == ("success", 1))}, indent=2))
