"""A probe for benchmarks/airflow_scale.py --breakdown: where Airflow's share of "job finished ->
task ended" goes after our trigger yields its event. Loaded (as sitecustomize, through
PYTHONPATH) by every process of the benchmark's Airflow, it acts only in the triggerer when
DLC_BREAKDOWN_LOG is set, and appends one JSON line per step to that file:

- "sent": the trigger runner (the triggerer's child process) sends the events its triggers
  yielded since its last sync to its supervisor (TriggerRunner.process_trigger_events);
- "submitting" / "submitted": the supervisor hands one event to the database
  (Trigger.submit_event), which ends the task instance (its end_date).

Benchmark code only: never imported by dlc_airflow.
"""

from __future__ import annotations

import json
import os
import sys
import time

LOG = os.environ.get("DLC_BREAKDOWN_LOG")


def _write(record: dict) -> None:
    with open(LOG, "a") as out:  # type: ignore[arg-type]
        out.write(json.dumps(record) + "\n")


def _install() -> None:
    from airflow.jobs import triggerer_job_runner as runner_module
    from airflow.models.trigger import Trigger

    sends = runner_module.TriggerRunner.process_trigger_events

    def process_trigger_events(self, finished_ids):
        msg = sends(self, finished_ids)
        if msg.events:
            _write({"step": "sent", "t": time.time(), "ids": [e.trigger_id for e in msg.events]})
        return msg

    runner_module.TriggerRunner.process_trigger_events = process_trigger_events

    submit = Trigger.submit_event.__func__  # a classmethod wrapped by provide_session

    def submit_event(cls, trigger_id, event, **kwargs):
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            tasks = list(session.scalars(select(TaskInstance.task_id).where(TaskInstance.trigger_id == trigger_id)))
        _write({"step": "submitting", "t": time.time(), "id": trigger_id, "tasks": tasks})
        result = submit(cls, trigger_id, event, **kwargs)
        _write({"step": "submitted", "t": time.time(), "id": trigger_id, "tasks": tasks})
        return result

    Trigger.submit_event = classmethod(submit_event)


if LOG and "triggerer" in " ".join(sys.argv):
    _install()
