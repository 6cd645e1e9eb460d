"""N waiting tasks through real Airflow: the scheduler, the triggerer, the dag-processor and the
api-server (LocalExecutor) on the local control plane, side by side with the cncf provider's
KubernetesJobOperator, one approach after the other, in one of two shapes (soak.SHAPES):
`sqlite` (one scheduler, one triggerer) or `production` (PostgreSQL, two schedulers, two
triggerers; scripts/postgres-local up). The approaches:

- `dlc-triggerer`: DLCJobOperator(deferrable=True) with a plain spec: it starts in the triggerer
  (start_from_trigger) and never takes a worker slot;
- `dlc-worker`: the same with a templated spec: a worker submits, then defers;
- `cncf`: KubernetesJobOperator(deferrable=True, wait_until_job_complete=True, get_logs=True).

Each approach reaches the API server through its own counting proxy. The jobs' pods are held
running (kwok stage pod-hold) until the benchmark releases them, so the wait is steady while
requests are counted, and the finishes come in waves (10 jobs every 0.5 s by default).

Measured per approach and N: DAG run start -> task deferred (p50/p95/max), the scheduler and
its workers' CPU seconds per task until all are deferred, API requests per waiting job-hour
(steady window, logs on), triggerer RSS and CPU, job finished -> task ended (p50/p95/max; the
job's finish as a direct watch saw it, the TI's end_date), and how much of that is Airflow's
own after our trigger yielded (its log line -> end_date). On PostgreSQL also the database's
connections and its statements and transactions per second (pg_stat_statements,
pg_stat_database) over the steady window. And the DAG file parse time.

    .venv/bin/python benchmarks/airflow_scale.py --tasks 50 200 --approaches dlc-triggerer dlc-worker cncf
    .venv/bin/python benchmarks/airflow_scale.py --tasks 1000 --approaches dlc-triggerer
    # the production shape: 4,000 waiting tasks in DAGs of 20 and one DAG of 1,000 (the big-DAG guard)
    .venv/bin/python benchmarks/airflow_scale.py --shape production --tasks 4000 --per-dag 20 --one-dag 1000 \
        --approaches dlc-triggerer

Needs the local control plane (scripts/k8s-local up). Results: benchmarks/results/airflow_scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import psutil  # noqa: E402
from notice_latency import grant_job_status, kubeconfig_for  # noqa: E402
from soak import SHAPES, Jobs  # noqa: E402
from soak import datetime_ts as parse_time  # noqa: E402

from tests.support.airflow_stack import AirflowStack  # noqa: E402
from tests.support.cluster import (  # noqa: E402
    acquire_cluster,
    create_test_namespace,
    delete_namespace,
    pod_logs,
)
from tests.support.postgres import fresh_database  # noqa: E402

HOLD = "pod-hold.stage.kwok.x-k8s.io"
RELEASE = "pod-release.stage.kwok.x-k8s.io"

DAG = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
{imports}

PER = {per}
for d in range({n} // PER):
  with DAG(f"{prefix}{{d}}", schedule={schedule}, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
           max_active_tasks=PER, default_args={{"retries": 0}}) as dag:
    for i in range({first} + d * PER, {first} + (d + 1) * PER):
{task}
'''

TASKS = {
    "dlc-triggerer": ("from dlc_airflow.operators import DLCJobOperator", '''\
        DLCJobOperator(task_id=f"t{{i}}", conn_id="bench", backend="native", deferrable=True, job={{
            "type": "batch", "image": "registry.local/prep:1", "command": ["prep"],
            "labels": {{"{hold}": "true"}}}})'''),
    "dlc-worker": ("from dlc_airflow.operators import DLCJobOperator", '''\
        DLCJobOperator(task_id=f"t{{i}}", conn_id="bench", backend="native", deferrable=True, job={{
            "type": "batch", "image": "registry.local/prep:1", "command": ["prep"],
            "labels": {{"{hold}": "true"}}, "env": {{"RUN": "{{{{ run_id }}}}"}}}})'''),
    "cncf": ("from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator", '''\
        KubernetesJobOperator(task_id=f"t{{i}}", kubernetes_conn_id="bench", namespace="{namespace}",
                              image="registry.local/prep:1", cmds=["prep"], labels={{"{hold}": "true"}},
                              deferrable=True, wait_until_job_complete=True, get_logs=True,
                              job_poll_interval=10)'''),
}


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None, "n": 0}
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3), "p95": round(ordered[max(0, int(len(ordered) * 0.95) - 1)], 3),
            "max": round(ordered[-1], 3), "n": len(ordered)}


def tree_cpu(pid: int, descendants_only: bool = False) -> float:
    """CPU seconds of a process and its live descendants (and of the children they reaped)."""
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + ([] if descendants_only else [root])
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def tree_rss(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
    except psutil.NoSuchProcess:
        return 0.0


def instances(stack: AirflowStack, command: str) -> list[int]:
    """The pids of every instance of a component ("triggerer" and "triggerer:2")."""
    return [stack.pid(c) for c in stack.components if c.split(":", 1)[0] == command]


def cpu_of(stack: AirflowStack, command: str, descendants_only: bool = False) -> float:
    return sum(tree_cpu(pid, descendants_only) for pid in instances(stack, command))


def db_activity(stack: AirflowStack) -> dict[str, float]:
    """PostgreSQL's counters for the airflow database: open connections, transactions, and the
    statements run (pg_stat_statements, loaded by scripts/postgres-local)."""
    row = stack.query("SELECT numbackends, xact_commit + xact_rollback AS transactions FROM pg_stat_database "
                      "WHERE datname = current_database()")[0]
    calls = stack.query("SELECT COALESCE(SUM(calls), 0) AS calls FROM pg_stat_statements "
                        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")[0]
    return {"connections": int(row["numbackends"]), "transactions": int(row["transactions"]),
            "statements": int(calls["calls"])}


def bench_nodes(admin, pods: int) -> list[str]:
    """kwok nodes for the pods the cluster's own untainted nodes cannot hold (2,500 across
    them; 2,000 kept for the rest): 1,000 pods each, deleted after the run."""
    names = [f"bench-{i}" for i in range(max(0, -(-(pods - 2000) // 1000)))]
    capacity = {"cpu": "1000", "memory": "4Ti", "pods": "1000", "ephemeral-storage": "1Ti"}
    for name in names:
        admin.create({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
            "spec": {"taints": []}, "status": {"allocatable": capacity, "capacity": capacity}})
    return names


def percentiles_by(values: dict[str, float], big: set[str]) -> tuple[dict, dict]:
    """The percentiles of the tasks of the DAGs of a usual size, and of the big DAG's."""
    return (percentiles([v for task, v in values.items() if task not in big]),
            percentiles([v for task, v in values.items() if task in big]))


def measure(cluster, approach: str, n: int, steady: float, wave: int, gap: float, per_dag: int = 0,
            breakdown: bool = False, shape: str = "sqlite", big: int = 0) -> dict:
    """per_dag: tasks per DAG (0: one DAG of n tasks, triggered by hand; else DAGs that run at
    once when parsed, as many as n needs); big: one more DAG of that many tasks, run at once
    (the big-DAG guard sends them through a worker). breakdown: the triggerer probe
    (benchmarks/triggerer_probe) times Airflow's steps after our trigger yields."""
    from dlc_airflow.k8s.kinds import NODE, POD

    total = n + big
    admin = cluster.admin()
    namespace = create_test_namespace(admin, prefix="scale")
    grant_job_status(admin, namespace, ({"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},))
    nodes = bench_nodes(admin, total)
    tmp = Path(tempfile.mkdtemp(prefix=f"dlc-scale-{approach}-"))
    (tmp / "job.log").write_text("".join(f"2026-12-04T00:00:0{i}.000000000Z stdout F step {i} loss 0.{9 - i}\n"
                                         for i in range(3)))
    stop_logs = pod_logs(admin, namespace, tmp / "job.log")  # logs on: every pod has some
    dags = tmp / "dags"
    dags.mkdir()
    imports, task = TASKS[approach]
    per = per_dag or n
    (dags / "scale.py").write_text(DAG.format(imports=imports, n=n, per=per, first=0, prefix="scale_",
                                              schedule='"@once"' if per_dag else None,
                                              task=task.format(hold=HOLD, namespace=namespace)))
    if big:  # in a file of its own, as a team's DAG would be (a worker parses the file of its task)
        (dags / "scale_big.py").write_text(DAG.format(imports=imports, n=big, per=big, first=n, prefix="scale_big",
                                                      schedule='"@once"', task=task.format(hold=HOLD, namespace=namespace)))
    proxy = cluster.fault_proxy()
    proxy.__enter__()
    kubeconfig = kubeconfig_for(cluster, namespace, proxy, tmp / "kubeconfig.json")
    env = {
        "AIRFLOW_CONN_BENCH": json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(kubeconfig), "namespace": namespace}}),
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": str(total + 10),
        "AIRFLOW__TRIGGERER__CAPACITY": str(total + 100),
        "AIRFLOW__TRIGGERER__MAX_TRIGGER_TO_SELECT_PER_LOOP": "1000",
        "AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY": "1000",
        # a worker parses its task's DAG file on a loaded machine (default 30 s)
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "PYTHONPATH": str(REPO),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False" if per_dag else "True",
    }
    probe_log = tmp / "breakdown.jsonl"
    if breakdown:
        env["PYTHONPATH"] = f"{REPO / 'benchmarks' / 'triggerer_probe'}{os.pathsep}{REPO}"
        env["DLC_BREAKDOWN_LOG"] = str(probe_log)
    production = shape == "production"
    finishes = Jobs(admin, namespace)  # when each Job finished, as a direct watch saw it
    finishes.start()
    result: dict = {"approach": approach, "tasks": total, "shape": shape, "components": list(SHAPES[shape])}
    if big:
        result["tasks_in_dags_of_usual_size"], result["tasks_in_the_big_dag"] = n, big
    try:
        # 16 worker slots in all: one scheduler's, or 8 for each of two
        with AirflowStack(tmp / "home", dags, env=env, parallelism=8 if production else 16, components=SHAPES[shape],
                          database=fresh_database() if production else None) as stack:
            cpu0 = {c: cpu_of(stack, c) for c in ("scheduler", "triggerer")}
            workers0 = cpu_of(stack, "scheduler", descendants_only=True)
            if not per_dag:
                stack.wait_for_dag("scale_0", timeout=600)
                stack.airflow("dags", "unpause", "scale_0")
                stack.airflow("dags", "trigger", "scale_0")
            deferred_at: dict[str, float] = {}
            peak_connections = 0

            def all_deferred():
                nonlocal peak_connections
                rows = stack.query("SELECT ti.task_id, t.created_date FROM task_instance ti JOIN trigger t "
                                   "ON ti.trigger_id = t.id WHERE ti.dag_id LIKE 'scale%'")
                for r in rows:
                    deferred_at.setdefault(r["task_id"], parse_time(r["created_date"]))
                bad = stack.query("SELECT task_id, state FROM task_instance WHERE dag_id LIKE 'scale%' "
                                  "AND state IN ('failed', 'upstream_failed')")
                if bad:
                    raise AssertionError(f"tasks failed before waiting: {bad[:5]}")
                if production:
                    peak_connections = max(peak_connections, db_activity(stack)["connections"])
                return len(deferred_at) >= total or None
            stack._wait(all_deferred, 3600, f"{total} tasks deferred", poll=2.0)
            run_start = {r["dag_id"]: parse_time(r["start_date"]) for r in stack.query(
                "SELECT dag_id, start_date FROM dag_run WHERE dag_id LIKE 'scale%'")}
            tis = stack.query("SELECT dag_id, task_id, queued_dttm, start_date FROM task_instance "
                              "WHERE dag_id LIKE 'scale%'")
            in_big = {r["task_id"] for r in tis if r["dag_id"].startswith("scale_big")}
            dag_of = {r["task_id"]: r["dag_id"] for r in tis}
            to_deferred = {t: at - run_start[dag_of[t]] for t, at in deferred_at.items()}
            result["run_start_to_deferred_s"], big_deferred = percentiles_by(to_deferred, in_big)
            # where that goes: waiting for a worker slot (queued -> start) vs the task's own start (start -> deferred)
            result["queued_to_started_s"] = percentiles([parse_time(r["start_date"]) - parse_time(r["queued_dttm"])
                                                         for r in tis if r["queued_dttm"] and r["start_date"]])
            result["started_to_deferred_s"] = percentiles([deferred_at[r["task_id"]] - parse_time(r["start_date"])
                                                           for r in tis if r["queued_dttm"] and r["start_date"]
                                                           and r["task_id"] in deferred_at])
            result["scheduler_and_workers_cpu_s_per_task"] = round(
                (cpu_of(stack, "scheduler") - cpu0["scheduler"]) / total, 3)
            result["workers_cpu_s_per_task"] = round(
                (cpu_of(stack, "scheduler", descendants_only=True) - workers0) / total, 3)
            if big:
                result["big_dag"] = {
                    "guard_logged": any("more tasks that would start in the triggerer" in f.read_text(errors="replace")
                                        for f in (stack.home / "logs" / "dag_processor").rglob("*.log")),
                    "tasks_started_on_a_worker": len([r for r in tis if r["task_id"] in in_big and r["queued_dttm"]]),
                    "run_start_to_deferred_s": big_deferred}
            # every pod running (held): then the steady wait
            stack._wait(lambda: len([p for p in admin.list(POD, namespace)[0]
                                     if (p.get("status") or {}).get("phase") == "Running"]) >= total or None,
                        1200, f"{total} pods running", poll=5.0)
            time.sleep(5)
            count0, trig0, t0 = proxy.requests, cpu_of(stack, "triggerer"), time.monotonic()
            db0 = db_activity(stack) if production else {}
            time.sleep(steady)
            window = time.monotonic() - t0
            result["requests_per_waiting_job_hour"] = round((proxy.requests - count0) / total / (window / 3600), 2)
            result["steady_window_s"] = round(window, 1)
            result["triggerer_cpu_s_per_waiting_job_hour"] = round(
                (cpu_of(stack, "triggerer") - trig0) / total / (window / 3600), 3)
            rss = [tree_rss(pid) for pid in instances(stack, "triggerer")]
            result["triggerer_rss_mib"] = round(sum(rss), 1)
            result["triggerer_rss_mib_each"] = [round(r, 1) for r in rss]
            result["triggerer_rss_kib_per_waiting_task"] = round(sum(rss) * 1024 / total, 1)
            if production:
                db1 = db_activity(stack)
                result["database"] = {
                    "connections_while_waiting": db1["connections"], "peak_connections_while_deferring": peak_connections,
                    "statements_per_s": round((db1["statements"] - db0["statements"]) / window, 1),
                    "transactions_per_s": round((db1["transactions"] - db0["transactions"]) / window, 1)}
            # release the pods in waves; each job's finish as the direct watch sees it
            pods = sorted(admin.list(POD, namespace)[0], key=lambda p: p["metadata"]["name"])
            for i in range(0, len(pods), wave):
                for pod in pods[i:i + wave]:
                    admin.patch(POD, pod["metadata"]["name"], {"metadata": {"labels": {RELEASE: "true"}}},
                                namespace=namespace)
                time.sleep(gap)
            stack._wait(lambda: len(stack.query("SELECT 1 FROM task_instance WHERE dag_id LIKE 'scale%' AND state IN "
                                                "('success','failed')")) >= total or None, 1800, "every task to end",
                        poll=2.0)
            ended = {r["task_id"]: parse_time(r["end_date"]) for r in stack.query(
                "SELECT task_id, end_date, state FROM task_instance WHERE dag_id LIKE 'scale%'")}
            result["tasks_failed"] = len(stack.query("SELECT 1 FROM task_instance WHERE dag_id LIKE 'scale%' "
                                                     "AND state != 'success'"))
            latencies: dict[str, float] = {}
            airflow_part: dict[str, float] = {}
            yielded = yield_times(stack.home, approach)
            done_at = {name: seen["finished"] for name, seen in finishes.seen.items() if seen["finished"]}
            for job, done in done_at.items():
                task = job_task(job, approach)
                if task in ended and ended[task]:
                    latencies[task] = ended[task] - done
                    if task in yielded:
                        airflow_part[task] = ended[task] - yielded[task]
            result["finish_to_ended_s"] = percentiles(list(latencies.values()))
            result["of_which_airflow_after_yield_s"] = percentiles(list(airflow_part.values()))
            if big:
                result["big_dag"]["finish_to_ended_s"] = percentiles_by(latencies, in_big)[1]
            if breakdown:
                result["airflow_steps_s"] = airflow_steps(probe_log, yielded, ended)
            result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        stop_logs()
        finishes.stop()
        proxy.__exit__(None, None, None)
        # a run cut short leaves pods held running: kwok would never finish them, and their Job's
        # finalizer would keep the namespace terminating
        for pod in admin.list(POD, namespace)[0]:
            if (pod.get("status") or {}).get("phase") == "Running" and pod["metadata"].get("finalizers"):
                admin.patch(POD, pod["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace=namespace)
        delete_namespace(admin, namespace)
        for name in nodes:
            admin.delete(NODE, name)
    return result


def airflow_steps(probe_log: Path, yielded: dict[str, float], ended: dict[str, float | None]) -> dict:
    """Airflow's share, step by step (benchmarks/triggerer_probe): our trigger's yield -> the
    trigger runner sends it to its supervisor -> the supervisor starts writing it -> written
    -> the task instance's end_date."""
    sent: dict[int, float] = {}
    submitting: dict[str, tuple[int, float]] = {}
    submitted: dict[str, float] = {}
    for line in probe_log.read_text().splitlines() if probe_log.exists() else []:
        record = json.loads(line)
        if record["step"] == "sent":
            for trigger_id in record["ids"]:
                sent.setdefault(trigger_id, record["t"])
        for task in record.get("tasks", []):
            if record["step"] == "submitting":
                submitting[task] = (record["id"], record["t"])
            elif record["step"] == "submitted":
                submitted[task] = record["t"]
    steps: dict[str, list[float]] = {"yield_to_runner_sends": [], "runner_sends_to_supervisor_writes": [],
                                     "supervisor_writes_event": [], "written_to_end_date": []}
    for task, (trigger_id, writing) in submitting.items():
        if task not in yielded or trigger_id not in sent or task not in submitted or not ended.get(task):
            continue
        steps["yield_to_runner_sends"].append(sent[trigger_id] - yielded[task])
        steps["runner_sends_to_supervisor_writes"].append(writing - sent[trigger_id])
        steps["supervisor_writes_event"].append(submitted[task] - writing)
        steps["written_to_end_date"].append(ended[task] - submitted[task])  # type: ignore[operator]
    return {name: percentiles(values) for name, values in steps.items()}


def job_task(job: str, approach: str) -> str:
    """The task id t<i> of a job: ours are named <task>-<hash>-<attempt>; the provider's
    job-<task>-<random> (or <task>-<random>)."""
    match = re.match(r"^(?:job-)?(t\d+)-", job)
    return match.group(1) if match else job


def yield_times(home: Path, approach: str) -> dict[str, float]:
    """When our trigger finished its wrap-up (its 'succeeded' line in the task's log)."""
    if not approach.startswith("dlc"):
        return {}
    found: dict[str, float] = {}
    for path in (home / "logs").glob("dag_id=scale_*/*/task_id=*/attempt=*.log"):
        task = path.parent.name.removeprefix("task_id=")
        for line in path.read_text(errors="replace").splitlines():
            if " succeeded (queued " in line:
                try:
                    found[task] = parse_time(json.loads(line)["timestamp"])
                except (ValueError, KeyError):
                    pass
    return found


def parse_cost() -> dict:
    """Seconds to import a DAG file of 50 tasks (min of 5), beside an EmptyOperator DAG's."""
    files = {
        "EmptyOperator": ("from airflow.providers.standard.operators.empty import EmptyOperator",
                          "EmptyOperator(task_id=f't{i}')"),
        "dlc-airflow": ("from dlc_airflow.operators import DLCJobOperator",
                        "DLCJobOperator(task_id=f't{i}', backend='native', deferrable=True, "
                        "job={'type': 'batch', 'image': 'r/p:1', 'command': ['p']})"),
        "cncf": ("from airflow.providers.cncf.kubernetes.operators.job import KubernetesJobOperator",
                 "KubernetesJobOperator(task_id=f't{i}', image='r/p:1', cmds=['p'], deferrable=True)"),
    }
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (imp, task) in files.items():
            path = Path(tmp) / f"dag_{name.replace('-', '_')}.py"  # not dlc_airflow.py: it would shadow the package
            path.write_text(f"from datetime import datetime\nfrom airflow.sdk import DAG\n{imp}\n"
                            f"with DAG('p', schedule=None, start_date=datetime(2026, 1, 1)):\n"
                            f"    for i in range(50):\n        {task}\n")
            times = []
            for _ in range(5):
                began = time.monotonic()
                subprocess.run([sys.executable, str(path)], check=True, capture_output=True)
                times.append(time.monotonic() - began)
            out[name] = round(min(times), 3)
    return {"seconds": out, "over_empty": {k: round(v - out["EmptyOperator"], 3) for k, v in out.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--approaches", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steady", type=float, default=120.0, help="seconds of steady waiting counted")
    parser.add_argument("--wave", type=int, default=10, help="jobs released at once")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between waves")
    parser.add_argument("--per-dag", type=int, default=0, help="tasks per DAG (0: all in one DAG)")
    parser.add_argument("--one-dag", type=int, default=0,
                        help="with --per-dag: one more DAG of this many tasks (past the big-DAG guard's budget)")
    parser.add_argument("--shape", choices=list(SHAPES), default="sqlite",
                        help="production: PostgreSQL, two schedulers, two triggerers (scripts/postgres-local up)")
    parser.add_argument("--breakdown", action="store_true",
                        help="time Airflow's steps after our trigger yields (benchmarks/triggerer_probe)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "airflow_scale.json"))
    args = parser.parse_args()
    cluster = acquire_cluster(in_ci=False)
    out = Path(args.out)
    report = json.loads(out.read_text()) if out.exists() else {}
    report["parse"] = parse_cost()
    print(json.dumps(report["parse"]), flush=True)
    for n in args.tasks:
        for approach in args.approaches:
            began = time.monotonic()
            result = measure(cluster, approach, n, args.steady, args.wave, args.gap, args.per_dag, args.breakdown,
                             args.shape, args.one_dag)
            result["wall_s"] = round(time.monotonic() - began, 1)
            key = f"{approach}/{n}" + (f" in DAGs of {args.per_dag}" if args.per_dag else "") \
                + (f" and one DAG of {args.one_dag}" if args.one_dag else "") \
                + (" (breakdown)" if args.breakdown else "") + (" (production shape)" if args.shape == "production" else "")
            report.setdefault("runs", {})[key] = result
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(report, indent=2))
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
