"""Where one DAG of N tasks that start in the triggerer stops running well on Airflow 3.3.

Airflow's triggerer sends the whole serialized DAG with each trigger of a `start_from_trigger`
task, so one DAG of N such tasks costs it O(N x N). For each N this runs one DAG of N plain
DLCJobOperator tasks through real Airflow (SQLite: api-server, scheduler, dag-processor,
triggerer) on the local control plane with the big-DAG guard lifted
(`[dlc_airflow] big_dag_budget` set past N x N), and records:

- the triggerer's peak RSS (supervisor + runner, sampled every second), and the runner's;
- how many tasks deferred and how many ended, within `--deadline` seconds of the run's start;
- whether the triggerer reported its runner deadlocked (its own log line, kept verbatim).

The jobs end by themselves (kwok completes their pods), so a shape that runs well ends every
task; one that stalls leaves them deferred.

    .venv/bin/python benchmarks/big_dag_threshold.py --tasks 400 600 800

Needs the local control plane (scripts/k8s-local up). Results: benchmarks/results/big_dag_threshold.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import psutil  # noqa: E402
from airflow_scale import tree_rss  # noqa: E402
from notice_latency import kubeconfig_for  # noqa: E402

from tests.support.airflow_stack import AirflowStack  # noqa: E402
from tests.support.cluster import acquire_cluster, create_test_namespace, delete_namespace  # noqa: E402

DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG("big", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), max_active_tasks={n},
         default_args={{"retries": 0}}):
    for i in range({n}):
        DLCJobOperator(task_id=f"t{{i}}", conn_id="bench", backend="native", deferrable=True,
                       job={{"type": "batch", "image": "registry.local/prep:1", "command": ["prep"]}})
'''
DEADLOCK = "appears deadlocked"


def runner_rss(triggerer_pid: int) -> float:
    """The trigger runner's RSS (the triggerer's child that runs the triggers), MiB."""
    try:
        children = psutil.Process(triggerer_pid).children(recursive=True)
        return max((c.memory_info().rss for c in children), default=0) / 2**20
    except psutil.NoSuchProcess:
        return 0.0


def measure(cluster, n: int, deadline: float) -> dict:
    admin = cluster.admin()
    namespace = create_test_namespace(admin, prefix="bigdag")
    tmp = Path(tempfile.mkdtemp(prefix=f"dlc-bigdag-{n}-"))
    dags = tmp / "dags"
    dags.mkdir()
    (dags / "big.py").write_text(DAG.format(n=n))
    proxy = cluster.fault_proxy()  # (it only forwards here)
    proxy.__enter__()
    kubeconfig = kubeconfig_for(cluster, namespace, proxy, tmp / "kubeconfig.json")
    env = {
        "AIRFLOW_CONN_BENCH": json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(kubeconfig), "namespace": namespace}}),
        "AIRFLOW__DLC_AIRFLOW__BIG_DAG_BUDGET": str(n * n),  # the guard lifted for this DAG
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(n + 10),
        "AIRFLOW__TRIGGERER__CAPACITY": str(n + 100),
        "AIRFLOW__TRIGGERER__MAX_TRIGGER_TO_SELECT_PER_LOOP": "1000",
        "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "1000",
        "PYTHONPATH": str(REPO),
    }
    result: dict = {"tasks": n, "tasks_x_dag_size": n * n, "deadline_s": deadline}
    try:
        with AirflowStack(tmp / "home", dags, env=env, parallelism=16) as stack:
            stack.wait_for_dag("big", timeout=900)
            stack.airflow("dags", "unpause", "big")
            stack.airflow("dags", "trigger", "big")
            began = time.monotonic()
            peak = peak_runner = 0.0
            counts = {"deferred": 0, "ended": 0}
            while time.monotonic() - began < deadline:
                peak = max(peak, tree_rss(stack.pid("triggerer")))
                peak_runner = max(peak_runner, runner_rss(stack.pid("triggerer")))
                rows = stack.query("SELECT state, COUNT(*) AS n FROM task_instance WHERE dag_id = 'big' GROUP BY state")
                states = {r["state"]: r["n"] for r in rows}
                counts = {"deferred": states.get("deferred", 0),
                          "ended": states.get("success", 0) + states.get("failed", 0)}
                if counts["ended"] >= n or DEADLOCK in stack.log("triggerer"):
                    break
                time.sleep(1)
            result.update({
                "seconds": round(time.monotonic() - began, 1),
                "triggerer_peak_rss_mib": round(peak, 1), "runner_peak_rss_mib": round(peak_runner, 1),
                "tasks_deferred_at_the_end": counts["deferred"], "tasks_ended": counts["ended"],
                "tasks_succeeded": len(stack.query("SELECT 1 FROM task_instance WHERE dag_id = 'big' "
                                                   "AND state = 'success'")),
                "deadlock_line": next((line.strip() for line in stack.log("triggerer").splitlines()
                                       if DEADLOCK in line), None),
            })
            result["ran_well"] = result["tasks_succeeded"] == n and result["deadlock_line"] is None
    finally:
        proxy.__exit__(None, None, None)
        delete_namespace(admin, namespace)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[400, 600, 800])
    parser.add_argument("--deadline", type=float, default=600.0,
                        help="seconds from the run's start for every task to end")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "big_dag_threshold.json"))
    args = parser.parse_args()
    cluster = acquire_cluster(in_ci=False)
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {"runs": {}}
    for n in args.tasks:
        result = measure(cluster, n, args.deadline)
        report["runs"][str(n)] = result
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
