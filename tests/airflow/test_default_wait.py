"""A DAG that sets nothing about waiting, through the real scheduler and triggerer
(benchmarks/default_wait.py): by default its tasks wait in the triggerer, so four jobs run
at once under `[core] parallelism = 2` and no task holds a worker slot while its job runs;
with `[dlc_airflow] default_deferrable = false` each waits on a worker, two at a time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from default_wait import measure, most_at_once

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]


def test_most_at_once_counts_overlaps():
    assert most_at_once([(0, 2), (1, 3), (2, 4)]) == 2  # one ends as the next starts
    assert most_at_once([(0, 5), (1, 2), (1, 3)]) == 3
    assert most_at_once([]) == 0


def test_by_default_every_job_runs_at_once_and_no_worker_slot_is_held(tmp_path):
    result = measure("deferred", tasks=4, parallelism=2, seconds=8, tmp=tmp_path)
    assert result["task_states"] == {"success": 4}, result
    assert result["jobs_ran"] == 4 and result["most_jobs_alive_at_once"] == 4, result
    assert result["most_worker_slots_held"] == 0, result  # plain specs start in the triggerer


def test_an_admin_who_turns_it_off_gets_waits_on_workers(tmp_path):
    result = measure("sync", tasks=4, parallelism=2, seconds=8, tmp=tmp_path)
    assert result["task_states"] == {"success": 4}, result
    assert result["jobs_ran"] == 4 and result["most_jobs_alive_at_once"] == 2, result
    assert result["most_worker_slots_held"] == 2, result
