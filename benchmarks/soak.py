"""A randomized fault soak through real Airflow on the local control plane, with a printed seed,
in one of two shapes:

- `production` (the default): PostgreSQL (scripts/postgres-local), two schedulers and two
  triggerers, a dag-processor and an api-server, LocalExecutor;
- `sqlite`: SQLite with one scheduler and one triggerer (the shape of the first soaks).

every run (in batches side by side, 5 by default; faults strike each batch) triggers a DAG of
three DLC tasks - sync on a worker, deferred from a worker, started in the triggerer - whose
jobs succeed, fail with a retryable or a fatal exit code, or get a pod preempted, while faults
strike at random: SIGKILL of a task's process (mid-submit or mid-wait), of a triggerer, of a
scheduler; a PostgreSQL restart (production shape); an API server restart; 10-30% of the API
requests answered 429/500/503 or dropped. In the production shape each batch also gets one
component fault, from a shuffled round of four (a scheduler kill, a triggerer kill, a
PostgreSQL restart, an API server restart). A component that exits by itself is started again, as
a deployment's supervisor would, and counted in the report. Then it checks, per task instance:

- the final state is the one its job's scenario calls for;
- no duplicate job: never two attempts of one task instance alive at once (a direct watch
  records every Job of the namespace);
- no orphan: no job still running 30 s after its task ended;
- no lost finish: no task still waiting 120 s after its job ended.

    .venv/bin/python benchmarks/soak.py --runs 200 [--seed N] [--shape sqlite]
    # the report: benchmarks/results/soak-production.json (soak.json for the sqlite shape)

tests/airflow/test_soak.py runs 20 of them, in the production shape, in `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlc_airflow.k8s.kinds import JOB  # noqa: E402
from dlc_airflow.naming import LABEL_TASK_KEY  # noqa: E402

FAIL = "pod-container-running-failed.stage.kwok.x-k8s.io"
PREEMPT = "pod-preempt.stage.kwok.x-k8s.io"
RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"
# scenario -> (the job's extra spec, the task's final state)
SCENARIOS = {
    "ok": ({}, "success"),
    "fatal": ({"labels": {FAIL: "true"}, "annotations": {f"{FAIL}/exit-code": "3", f"{FAIL}/delay": "2s"},
               "fault_tolerance": {"max_restarts": 1, "retryable_exit_codes": [137]}}, "failed"),
    "retryable": ({"labels": {FAIL: "true"}, "annotations": {f"{FAIL}/exit-code": "137", f"{FAIL}/delay": "2s"},
                   "fault_tolerance": {"max_restarts": 1, "retryable_exit_codes": [137]}}, "failed"),
    "preempted": ({}, "success"),  # the soak preempts one of its pods (restart_on_preemption)
}
MODES = ("sync", "deferred", "triggerer")  # worker waits, worker defers, starts in the triggerer
SHAPES = {  # name -> the Airflow components it runs (a second instance is "name:2")
    "production": ("api-server", "scheduler", "scheduler:2", "dag-processor", "triggerer", "triggerer:2"),
    "sqlite": ("api-server", "scheduler", "dag-processor", "triggerer"),
}

DAG = '''
from datetime import datetime, timedelta, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

TASKS = {tasks!r}
# @once and unpaused: the run starts when the DAG is parsed (no `airflow dags` CLI process per run)
with DAG({dag_id!r}, schedule="@once", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc), catchup=False,
         is_paused_upon_creation=False, max_active_runs=4,
         default_args={{"retries": 2, "retry_delay": timedelta(seconds=1)}}) as dag:
    for task_id, (mode, spec) in TASKS.items():
        DLCJobOperator(task_id=task_id, conn_id="soak", backend="native", deferrable=mode != "sync", job=spec)
'''


def job_spec(scenario: str, mode: str, seconds: float) -> dict:
    extra, _ = SCENARIOS[scenario]
    spec = {"type": "batch", "image": "registry.local/soak:1", "command": ["soak"], "roles": {"worker": 2},
            "annotations": {RUN_FOR: f"{seconds:.0f}s", **extra.get("annotations", {})},
            "labels": dict(extra.get("labels", {})), "fault_tolerance": extra.get("fault_tolerance", {})}
    if mode == "deferred":  # a template keeps the task on the worker path (it defers from a worker)
        spec["env"] = {"RUN": "{{ run_id }}"}
    return spec


# When the Job controller has decided the job: FailureTarget and SuccessCriteriaMet come first,
# Complete and Failed only once every pod is gone (a kwok pod's deletion waits up to its 30 s
# grace). dlc-airflow's status ends the job at the first (k8s/backends/native.py), so a retry's
# next attempt may be created before Failed: counting only Complete and Failed called that a
# duplicate (seen when an API server restart slowed the Job controller down).
ENDED = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")


def finished(job: dict) -> bool:
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ENDED and c["status"] == "True" for c in conds)


class Jobs(threading.Thread):
    """Every Job of the namespace as a direct watch sees it: when each appeared, finished, went."""

    def __init__(self, admin, namespace: str) -> None:
        super().__init__(daemon=True)
        self.admin, self.namespace = admin, namespace
        self.seen: dict = {}  # name -> {"key", "created", "finished", "deleted"}
        self._stop = threading.Event()

    def run(self) -> None:
        rv = self._relist()
        while not self._stop.is_set():
            try:
                for etype, obj in self.admin.watch(JOB, self.namespace, resource_version=rv, timeout_seconds=30):
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if etype != "BOOKMARK":  # a bookmark only moves the resourceVersion on
                        self._see(obj, deleted=etype == "DELETED")
            except Exception:  # noqa: BLE001 - the API server restarts now and then: list and watch again
                time.sleep(0.5)
                try:
                    rv = self._relist()
                except Exception:  # noqa: BLE001
                    pass

    def _relist(self) -> str:
        """A list between two watches: what changed in the gap counts too (a finish, a new job)."""
        items, rv = self.admin.list(JOB, self.namespace)
        for obj in items:
            self._see(obj, deleted=False)
        listed = {obj["metadata"]["name"] for obj in items}
        for name, entry in self.seen.items():
            if name not in listed and entry["deleted"] is None:
                entry["deleted"] = time.time()
        return rv

    def _see(self, obj: dict, deleted: bool) -> None:
        if obj["metadata"].get("ownerReferences"):  # a native job's other role Jobs
            return
        name, now = obj["metadata"]["name"], time.time()
        entry = self.seen.setdefault(name, {"key": obj["metadata"].get("labels", {}).get(LABEL_TASK_KEY),
                                            "created": now, "finished": None, "deleted": None})
        if entry["finished"] is None and finished(obj):
            entry["finished"] = now
        if deleted:
            entry["deleted"] = now

    def still_running(self, name: str) -> bool:
        """The API server's word on a job the watch saw neither finish nor go."""
        job = self.admin.get(JOB, name, namespace=self.namespace)
        return job is not None and not finished(job)

    def stop(self) -> None:
        self._stop.set()


class Soak:
    def __init__(self, cluster, seed: int, tmp: Path, shape: str = "production") -> None:
        from tests.support.airflow_stack import AirflowStack
        from tests.support.cluster import create_test_namespace
        from tests.support.postgres import fresh_database

        sys.path.insert(0, str(REPO / "benchmarks"))
        from notice_latency import kubeconfig_for

        self.cluster, self.rng, self.tmp, self.shape = cluster, random.Random(seed), tmp, shape
        components = SHAPES[shape]
        self.schedulers = [c for c in components if c.startswith("scheduler")]
        self.triggerers = [c for c in components if c.startswith("triggerer")]
        database = fresh_database() if shape == "production" else None  # before anything is made
        self.admin = cluster.admin()
        self.namespace = create_test_namespace(self.admin, prefix="soak")
        self.proxy = cluster.fault_proxy().__enter__()
        kubeconfig = kubeconfig_for(cluster, self.namespace, self.proxy, tmp / "kubeconfig.json")
        self.dags = tmp / "dags"
        self.dags.mkdir(parents=True, exist_ok=True)
        self.jobs = Jobs(self.admin, self.namespace)
        self.jobs.start()
        env = {"AIRFLOW_CONN_SOAK": json.dumps({"conn_type": "kubernetes", "extra": {
            "kube_config_path": str(kubeconfig), "namespace": self.namespace}}), "PYTHONPATH": str(REPO),
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            # a killed scheduler's running tasks are reset by the next one once it counts the
            # old one dead; Airflow's defaults (30 s, then a look every 5 min) would idle the soak
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
            "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
            # a killed triggerer's triggers move to the other one once it counts it dead (30 s)
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10"}
        self.stack = AirflowStack(tmp / "home", self.dags, env=env, parallelism=8, components=components,
                                  database=database).__enter__()
        self.exits: list[str] = []  # components that exited by themselves (started again)
        self.turns: list[str] = []  # production shape: the component faults still due this round

    def close(self) -> None:
        from tests.support.cluster import delete_namespace

        self.stack.__exit__(None, None, None)
        self.jobs.stop()
        self.proxy.__exit__(None, None, None)
        delete_namespace(self.admin, self.namespace)

    # -- a batch of runs, side by side ----------------------------------------------------------
    def run_batch(self, indices: list[int]) -> list[dict]:
        rng = self.rng
        runs = {}
        for index in indices:
            tasks, expected = {}, {}
            for t in range(3):
                scenario, mode = rng.choice(list(SCENARIOS)), rng.choice(MODES)
                tasks[f"t{t}_{scenario}_{mode}"] = (mode, job_spec(scenario, mode, rng.uniform(4, 9)))
                expected[f"t{t}_{scenario}_{mode}"] = SCENARIOS[scenario][1]
            dag_id = f"soak_{index}"
            (self.dags / f"{dag_id}.py").write_text(DAG.format(dag_id=dag_id, tasks=tasks))
            runs[dag_id] = (tasks, expected)
        for dag_id in runs:
            self.wait_until(lambda d=dag_id: self.stack.query("SELECT 1 FROM serialized_dag WHERE dag_id = ?", d),
                            300, f"DAG {dag_id} to be parsed")
        began = time.time()
        faults = self.strike(runs)
        for dag_id, (tasks, _) in runs.items():
            count = len(tasks)
            self.wait_until(lambda d=dag_id, n=count: self._ended(d, n), 900, f"run {dag_id} to end")
        time.sleep(30)  # an orphan is a job still running 30 s after its task ended
        return [self.check(dag_id, expected, began, faults) for dag_id, (_, expected) in runs.items()]

    def strike(self, runs: dict) -> list[str]:
        """Random faults while the runs go on (none to some of each kind)."""
        rng, done = self.rng, []
        share = rng.uniform(0.1, 0.3)
        if rng.random() < 0.6:
            kind = rng.choice(["error_share", "drop_share"])
            self.proxy.set(**{kind: share, "error_status": rng.choice([429, 500, 503])}) if kind == "error_share" \
                else self.proxy.set(drop_share=share)
            done.append(f"{kind}={share:.2f}")
        deadline = time.time() + rng.uniform(3, 10)
        while time.time() < deadline:
            time.sleep(0.5)
        preempting = [threading.Thread(target=self.preempt, args=(task,), daemon=True)
                      for tasks, _ in runs.values() for task in tasks if "preempted" in task]
        for thread in preempting:  # each waits for a pod of its task to run, side by side
            thread.start()
        if preempting:
            done.append("preempt a pod")
        for dag_id in runs:
            if rng.random() < 0.5:
                pid = self.task_process(dag_id)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    done.append("kill a task process")
        due = self.due_fault()
        if due == "triggerer" or rng.random() < 0.3:
            self.kill_and_start(rng.choice(self.triggerers))
            done.append("kill a triggerer")
        if due == "scheduler" or rng.random() < 0.2:
            self.kill_and_start(rng.choice(self.schedulers))
            done.append("kill a scheduler")
        if self.shape == "production" and (due == "postgres" or rng.random() < 0.2):
            from tests.support.postgres import restart

            restart()
            done.append("restart PostgreSQL")
        if (due == "apiserver" or rng.random() < 0.15) and self.cluster.local_workdir:
            self.cluster.restart_apiserver()
            done.append("restart the API server")
        time.sleep(rng.uniform(2, 6))
        self.proxy.set()
        for thread in preempting:
            thread.join(60)
        return done

    def due_fault(self) -> str | None:
        """Production shape: besides the random ones, each batch gets one component fault, in a
        shuffled round of all four, so every four batches kill a scheduler and a triggerer and
        restart PostgreSQL and the API server at least once."""
        if self.shape != "production":
            return None
        if not self.turns:
            self.turns = self.rng.sample(["scheduler", "triggerer", "postgres", "apiserver"], 4)
        return self.turns.pop()

    def kill_and_start(self, component: str) -> None:
        self.stack.kill(component)
        time.sleep(self.rng.uniform(1, 5))
        self.stack.start(component)

    def wait_until(self, predicate, timeout: float, what: str) -> None:
        """Like a deployment's supervisor: a component that exited is started again (and counted);
        the database may be restarting, so a failed read is only a "not yet"."""
        from tests.support.airflow_stack import StackError

        deadline = time.monotonic() + timeout
        while True:
            for component in self.stack.components:
                if not self.stack.running(component):
                    code = self.stack.procs[component].returncode
                    self.exits.append(f"{component} exited ({code})")
                    print(f"soak: {component} exited ({code}):\n{self.stack.log(component, 15)}", flush=True)
                    self.stack.start(component)
            error = None
            try:
                if predicate():
                    return
            except Exception as failed:  # noqa: BLE001 - PostgreSQL restarting, say
                error = failed
            if time.monotonic() > deadline:
                raise StackError(f"timed out after {timeout:.0f}s waiting for {what}" + (f": {error}" if error else ""))
            time.sleep(2.0)

    def preempt(self, task: str) -> None:
        from dlc_airflow.k8s.kinds import POD

        def running():
            pods = [p for p in self.admin.list(POD, self.namespace)[0]
                    if p["metadata"]["name"].startswith(task.replace("_", "-")[:20])
                    and (p.get("status") or {}).get("phase") == "Running"]
            return pods or None
        try:
            pod = self.stack._wait(running, 60, f"a running pod of {task}", poll=0.5)[0]
            self.admin.patch(POD, pod["metadata"]["name"], {"metadata": {
                "labels": {PREEMPT: "true"}, "annotations": {f"{PREEMPT}/delay": "0s"}}}, namespace=self.namespace)
        except Exception:  # noqa: BLE001 - the job may have ended first: nothing to preempt
            pass

    def task_process(self, dag_id: str) -> int | None:
        """The pid of one running task of the run: its LocalExecutor worker (the supervisor) or
        the task process under it, at random. Both are titled with the task instance's id."""
        running = [r["id"] for r in self.stack.query(
            "SELECT id FROM task_instance WHERE dag_id = ? AND state = 'running'", dag_id)]
        if not running:
            return None
        ti_id = str(self.rng.choice(running)).replace("-", "")  # SQLite keeps uuids as bare hex
        procs = []
        for scheduler in self.schedulers:
            try:
                procs += psutil.Process(self.stack.pid(scheduler)).children(recursive=True)
            except Exception:  # noqa: BLE001 - that scheduler is down right now
                continue
        found = []
        for proc in procs:
            try:
                if ti_id in " ".join(proc.cmdline()).replace("-", ""):
                    found.append(proc.pid)
            except psutil.Error:
                continue
        return self.rng.choice(found) if found else None

    def _ended(self, dag_id: str, count: int) -> bool:
        rows = self.stack.query("SELECT state FROM task_instance WHERE dag_id = ?", dag_id)
        return len(rows) == count and all(r["state"] in ("success", "failed") for r in rows)

    def check(self, dag_id: str, expected: dict, began: float, faults: list[str]) -> dict:
        from dlc_airflow.naming import TaskIdentity

        rows = {r["task_id"]: r for r in self.stack.query(
            "SELECT task_id, state, end_date, run_id FROM task_instance WHERE dag_id = ?", dag_id)}
        problems = []
        for task, want in expected.items():
            row = rows[task]
            if row["state"] != want:
                problems.append(f"{task}: {row['state']}, expected {want}")
            key = TaskIdentity(dag_id, task, row["run_id"]).key
            mine = sorted(((n, j) for n, j in self.jobs.seen.items() if j["key"] == key),
                          key=lambda nj: nj[1]["created"])
            ended = (datetime_ts(row["end_date"]) or time.time())
            for (_, a), (_, b) in zip(mine, mine[1:], strict=False):
                a_end = min(x for x in (a["finished"], a["deleted"], time.time()) if x)
                if b["created"] < a_end - 0.5:
                    problems.append(f"{task}: duplicate job, two attempts alive at once")
            for name, job in mine:
                if job["finished"] is None and job["deleted"] is None and self.jobs.still_running(name):
                    problems.append(f"{task}: orphan, a job still running 30 s after the task ended")
                elif (job["finished"] or job["deleted"]) < ended - 120:
                    problems.append(f"{task}: lost finish, the task ended 120 s after its job")
        return {"dag_id": dag_id, "faults": faults, "expected": expected,
                "states": {t: r["state"] for t, r in rows.items()}, "problems": problems,
                "seconds": round(time.time() - began, 1)}


def datetime_ts(value) -> float | None:
    from datetime import datetime

    if value is None:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def soak(runs: int, seed: int, out: Path | None = None, side_by_side: int = 5, cluster=None,
         shape: str = "production") -> dict:
    """`cluster`: the tests' cluster fixture (it fails in CI when the control plane is missing)."""
    from tests.support.cluster import acquire_cluster

    print(f"soak: seed {seed}, {runs} runs, {shape} shape", flush=True)
    cluster = cluster or acquire_cluster(in_ci=os.environ.get("CI") == "true")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="dlc-soak-") as tmp:
        s = Soak(cluster, seed, Path(tmp), shape)
        results: list[dict] = []
        try:
            while len(results) < runs:
                batch = list(range(len(results), min(runs, len(results) + side_by_side)))
                for result in s.run_batch(batch):
                    results.append(result)
                    print(json.dumps(result), flush=True)
        finally:
            s.close()
    counts = {kind: sum(1 for r in results for p in r["problems"] if kind in p)
              for kind in ("duplicate", "orphan", "lost finish")}
    under_fault = Counter(f.split("=")[0] for r in results for f in r["faults"])  # runs a fault kind struck
    report = {"seed": seed, "shape": shape, "components": list(SHAPES[shape]), "runs": len(results),
              "tasks": sum(len(r["expected"]) for r in results), "wall_s": round(time.monotonic() - began),
              "wrong_final_state": sum(1 for r in results for p in r["problems"] if "expected" in p),
              **counts, "faults": sorted(under_fault), "runs_under_fault": dict(sorted(under_fault.items())),
              "components_exited_by_themselves": s.exits, "results": results}
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--side-by-side", type=int, default=5, help="runs at once (faults strike each batch)")
    parser.add_argument("--shape", choices=list(SHAPES), default="production")
    parser.add_argument("--out", help="default: benchmarks/results/soak-production.json (soak.json: sqlite)")
    args = parser.parse_args()
    out = Path(args.out or REPO / "benchmarks" / "results" /
               ("soak.json" if args.shape == "sqlite" else f"soak-{args.shape}.json"))
    report = soak(args.runs, args.seed, out, side_by_side=args.side_by_side, shape=args.shape)
    print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2))
    bad = report["wrong_final_state"] + report["duplicate"] + report["orphan"] + report["lost finish"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
