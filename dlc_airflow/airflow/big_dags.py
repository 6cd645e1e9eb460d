"""The guard for big DAGs on the no-worker path (tasks that start in the triggerer).

Airflow 3.3's triggerer keeps the whole serialized DAG with each trigger of a task that starts
in it (`workloads.RunTrigger(dag_data=...)`), so what a DAG costs there grows as (its tasks
starting there) x (its tasks): one DAG of 200 such tasks took the triggerer to 1.1 GiB, one of
1,000 to 5.5 GiB and a stall (benchmarks/README.md, "1,000 waiting tasks"). Past BUDGET, every
task of the DAG starts on a worker and then defers (the worker path), decided when Airflow
serializes the DAG (the scheduler acts on what it serialized) and said once per DAG. The
admin may set another budget: `[dlc_airflow] big_dag_budget` (dlc_airflow.airflow.settings).

`StartFromTrigger` is DLCJobOperator's `start_from_trigger`: it keeps what the task asked for
and answers with the guard's decision; read on the class (as Airflow does for mapped tasks),
it is False.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

# (tasks starting in the triggerer) x (tasks in the DAG) a DAG may reach on that path:
# 200 x 200 ran well (1.1 GiB of triggerer); 400 x 400 ran but blocked the triggerer's loop
# for seconds at a time; 600 x 600 stalled it (benchmarks/results/big_dag_threshold.json)
BUDGET = 40_000

# where a DLCJobOperator keeps the start_from_trigger it asked for
WANTED = "_dlc_starts_in_triggerer"

_said: set[str] = set()
_said_lock = threading.Lock()


class StartFromTrigger:
    """A DLCJobOperator's `start_from_trigger` (see the module docstring)."""

    def __get__(self, task: Any, owner: type | None = None) -> bool:
        if task is None or not task.__dict__.get(WANTED, False):
            return False
        if not task.has_dag():
            return True
        return not too_big_to_start_in_triggerer(task.dag.dag_id, task.dag.task_dict.values())

    def __set__(self, task: Any, value: bool) -> None:
        task.__dict__[WANTED] = bool(value)


def starts_in_triggerer(task: object) -> bool:
    """Would this task of a DAG start in the triggerer (ours: as asked; others: their flag)?"""
    own = getattr(task, "__dict__", {})
    return bool(own[WANTED] if WANTED in own else getattr(task, "start_from_trigger", False))


def over_budget(starting: int, tasks: int, budget: int = BUDGET) -> bool:
    """Is a DAG of `tasks` tasks, `starting` of which start in the triggerer, past the budget? (pure)"""
    return starting * tasks > budget


def too_big_to_start_in_triggerer(dag_id: str, tasks: Iterable[object]) -> bool:
    """Does this DAG (its tasks) take the worker path? Logs the decision the first time it is
    taken for the DAG in this process."""
    from dlc_airflow.airflow.settings import big_dag_budget

    tasks = list(tasks)
    starting = sum(1 for task in tasks if starts_in_triggerer(task))
    budget = big_dag_budget(BUDGET)
    if not over_budget(starting, len(tasks), budget):
        return False
    with _said_lock:
        first = dag_id not in _said
        _said.add(dag_id)
    if first:  # (first crossed while the DAG file is still adding tasks: no counts, they grow)
        log.warning("DAG %s has more tasks that would start in the triggerer than Airflow's triggerer holds well "
                    "(tasks starting there x tasks in the DAG > %d: it keeps the whole serialized DAG with each "
                    "such trigger): every task of it starts on a worker and then defers (start_in_triggerer=False "
                    "says so in the DAG itself; [dlc_airflow] big_dag_budget sets the limit)", dag_id, budget)
    return True
