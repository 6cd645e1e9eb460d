"""The guard for big DAGs on the no-worker path (tasks that start in the triggerer).

Airflow 3.3's triggerer keeps the whole serialized DAG with each trigger of a task that starts
in it (`workloads.RunTrigger(dag_data=...)`), so what a DAG costs there grows as (its tasks
starting there) x (its tasks): one DAG of 200 such tasks took the triggerer to 1.1 GiB, one of
1,000 to 5.5 GiB and a stall (benchmarks/README.md, "1,000 waiting tasks"). Past BUDGET, every
task of the DAG starts on a worker and then defers (the worker path), decided when Airflow
serializes the DAG (the scheduler acts on what it serialized) and said once per DAG.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

# (tasks starting in the triggerer) x (tasks in the DAG) a DAG may reach on that path:
# 200 x 200 ran well (1.1 GiB of triggerer), 1,000 x 1,000 stalled it
BUDGET = 40_000

_said: set[str] = set()
_said_lock = threading.Lock()


def over_budget(starting: int, tasks: int) -> bool:
    """Is a DAG of `tasks` tasks, `starting` of which start in the triggerer, past BUDGET? (pure)"""
    return starting * tasks > BUDGET


def too_big_to_start_in_triggerer(dag_id: str, tasks: Iterable[object], starts: Callable[[object], bool]) -> bool:
    """Does this DAG (its tasks; `starts(task)`: would it start in the triggerer) take the
    worker path? Logs the decision the first time it is taken for the DAG in this process."""
    tasks = list(tasks)
    starting = sum(1 for task in tasks if starts(task))
    if not over_budget(starting, len(tasks)):
        return False
    with _said_lock:
        first = dag_id not in _said
        _said.add(dag_id)
    if first:  # (first crossed while the DAG file is still adding tasks: no counts, they grow)
        log.warning("DAG %s has more tasks that would start in the triggerer than Airflow's triggerer holds well "
                    "(tasks starting there x tasks in the DAG > %d: it keeps the whole serialized DAG with each "
                    "such trigger): every task of it starts on a worker and then defers (start_in_triggerer=False "
                    "says so in the DAG itself)", dag_id, BUDGET)
    return True
