"""The default wait, measured: one DAG of N tasks that set nothing about waiting (no
`deferrable`), each a local job of S seconds, through the real scheduler and triggerer
(LocalExecutor, SQLite, `[core] parallelism` P), twice:

- `deferred`: the default ([dlc_airflow] default_deferrable unset): a task waits in the
  triggerer (started there, or on a worker that then defers);
- `sync`: `[dlc_airflow] default_deferrable = false`: each task waits on a worker, as every
  DLC task did before, and as Airflow's `[operators] default_deferrable` (false) would have it.

Measured: the DAG run's wall time, the most jobs alive at once (from the times each job
wrote itself: what the workload saw), and the most task instances holding a worker slot at
once (state `running`, read from the metadata DB every 0.5 s).

    .venv/bin/python benchmarks/default_wait.py [--tasks 20 --parallelism 4 --seconds 20]

tests/airflow/test_default_wait.py runs it with 4 tasks and parallelism 2.
Results: benchmarks/results/default_wait.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

OUT = {out!r}
with DAG("default_wait", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         max_active_tasks={tasks}, default_args={{"retries": 0}}):
    for i in range({tasks}):
        # nothing about waiting: the default decides
        DLCJobOperator(task_id=f"t{{i}}", backend="local", local_root={local!r}, job={{
            "type": "batch", "image": "local", "command": [{python!r}, "-c", (
                "import json, time; began = time.time(); time.sleep({seconds}); "
                "json.dump([began, time.time()], open(" + repr(f"{{OUT}}/t{{i}}.json") + ", 'w'))")]}})
'''


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at one instant."""
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    alive = peak = 0
    for _, step in edges:  # an end before a start at the same instant: (t, -1) sorts first
        alive += step
        peak = max(peak, alive)
    return peak


def measure(mode: str, tasks: int, parallelism: int, seconds: float, tmp: Path) -> dict:
    from tests.support.airflow_stack import AirflowStack

    dags, out = tmp / mode / "dags", tmp / mode / "out"
    dags.mkdir(parents=True)
    out.mkdir(parents=True)
    (dags / "default_wait.py").write_text(DAG.format(tasks=tasks, seconds=seconds, python=sys.executable,
                                                     local=str(tmp / mode / "jobs"), out=str(out)))
    env = {"PYTHONPATH": str(REPO)}
    if mode == "sync":
        env["AIRFLOW__DLC_AIRFLOW__DEFAULT_DEFERRABLE"] = "false"
    with AirflowStack(tmp / mode / "home", dags, env=env, parallelism=parallelism) as stack:
        stack.wait_for_dag("default_wait", timeout=300)
        stack.airflow("dags", "unpause", "default_wait")
        held, stop = [0], threading.Event()

        def count_slots() -> None:  # task instances on a worker right now
            while not stop.is_set():
                try:
                    rows = stack.query("SELECT count(*) AS n FROM task_instance WHERE state = 'running'")
                    held[0] = max(held[0], rows[0]["n"])
                except Exception:  # noqa: BLE001 - SQLite busy: the next look counts
                    pass
                time.sleep(0.5)

        watcher = threading.Thread(target=count_slots, daemon=True)
        watcher.start()
        began = time.monotonic()
        stack.airflow("dags", "trigger", "default_wait")
        stack.wait_for_runs("default_wait", count=1, timeout=600 + 4 * tasks * seconds)
        wall = time.monotonic() - began
        stop.set()
        watcher.join()
        states = stack.query("SELECT state, count(*) AS n FROM task_instance GROUP BY state")
    intervals = [tuple(json.loads(p.read_text())) for p in out.glob("t*.json")]
    return {"mode": mode, "tasks": tasks, "parallelism": parallelism, "job_seconds": seconds,
            "jobs_ran": len(intervals), "most_jobs_alive_at_once": most_at_once(intervals),  # type: ignore[arg-type]
            "most_worker_slots_held": held[0], "dag_run_wall_s": round(wall, 1),
            "task_states": {r["state"]: r["n"] for r in states}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "default_wait.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlc-default-wait-") as tmp:
        results = [measure(mode, args.tasks, args.parallelism, args.seconds, Path(tmp)) for mode in ("deferred", "sync")]
    report = {"date": time.strftime("%Y-%m-%d"), "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
