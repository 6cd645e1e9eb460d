"""What a killed try does with its job (DLCJobOperator.on_kill): `runs_again` (pure) on the
task instance's state as Airflow has it when the kill arrives, and `current_state`, which
asks Airflow from a thread so that a kill that interrupted the task's own call to its
supervisor cannot hang it. The whole interleaving through the real scheduler:
tests/airflow/test_superseded_try_scheduler.py."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from dlc_airflow.airflow.lifecycle import current_state, runs_again


@pytest.mark.parametrize("state, again", [
    ("up_for_retry", True), ("queued", True), ("scheduled", True), ("deferred", True), ("up_for_reschedule", True),
    # this try's own state when a timeout or a worker's shutdown kills it: stop the job
    ("running", False),
    # marked failed or success by a person, cleared (restarting), or gone: stop the job
    ("failed", False), ("success", False), ("restarting", False), (None, False),
])
def test_runs_again(state, again):
    assert runs_again(state) is again


@dataclass
class TaskInstance:
    states: dict
    map_index: int = -1
    dag_id: str = "d"
    task_id: str = "train"
    run_id: str = "r"
    asked: list = field(default_factory=list)
    block: threading.Event | None = None

    def get_task_states(self, **query):
        self.asked.append(query)
        if self.block is not None:
            self.block.wait()
        return self.states


def test_current_state_reads_this_task_instance():
    ti = TaskInstance({"r": {"train": "up_for_retry", "other": "running"}})
    assert current_state(ti) == "up_for_retry"
    assert ti.asked == [{"dag_id": "d", "map_index": -1, "task_ids": ["train"], "run_ids": ["r"]}]
    mapped = TaskInstance({"r": {"train_3": "queued", "train_4": "running"}}, map_index=3)
    assert current_state(mapped) == "queued"


def test_current_state_gives_up_on_a_supervisor_that_does_not_answer():
    block = threading.Event()
    ti = TaskInstance({"r": {"train": "up_for_retry"}}, block=block)
    started = time.monotonic()
    assert current_state(ti, timeout=0.2) is None
    assert time.monotonic() - started < 5
    block.set()


def test_current_state_is_none_when_airflow_cannot_say():
    class Failing(TaskInstance):
        def get_task_states(self, **query):
            raise RuntimeError("no supervisor here")

    assert current_state(Failing({})) is None
    assert current_state(TaskInstance({"r": {}})) is None
