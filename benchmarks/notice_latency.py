"""How fast a finished job is noticed, and what waiting costs the API server.

Side by side in one run, on the same jobs of the local control plane:
- ours: DLCJobTrigger (one shared watch per namespace and kind for all waiting triggers);
- cncf: the Kubernetes provider's KubernetesJobTrigger (polls each job; default 10 s, and
  also at 1 s, which users lower it to when they want faster notice).
All triggers of one approach run in one asyncio loop in a process of their own, as in a
triggerer; the three processes run at the same time. Each approach talks to the API server
through its own counting proxy (tests/support/faultproxy.py, no faults), so requests are
counted per approach. time.monotonic() is system-wide, so times compare across processes.

Latency = when the trigger yields its event - when an independent reference watch (direct,
no proxy) first saw the Job finished (SuccessCriteriaMet, then Complete). Run: `.venv/bin/python benchmarks/notice_latency.py [--jobs 10 50]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="dlc-bench-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

from dlc_airflow.k8s.backends import get_backend  # noqa: E402
from dlc_airflow.k8s.kinds import JOB  # noqa: E402
from dlc_airflow.k8s.runner import KubeRunner  # noqa: E402
from dlc_airflow.naming import TaskIdentity, job_name  # noqa: E402
from dlc_airflow.spec import DLCJob  # noqa: E402
from tests.support.cluster import acquire_cluster, create_test_namespace, delete_namespace  # noqa: E402


def kubeconfig_for(cluster, namespace: str, proxy, path: Path) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": proxy.url, "certificate-authority": proxy.ca_file}}],
        "users": [{"name": "u", "user": {"token": cluster.token()}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
        "current-context": "x"}))
    return path


class ReferenceWatch(threading.Thread):
    """Records when each Job is first finished (SuccessCriteriaMet or Complete), straight
    from the server."""

    def __init__(self, client, namespace):
        super().__init__(daemon=True)
        self.client, self.namespace = client, namespace
        self.complete: dict[str, float] = {}
        self._stop = threading.Event()

    def run(self):
        _, rv = self.client.list(JOB, self.namespace)
        while not self._stop.is_set():
            try:
                for _, obj in self.client.watch(JOB, self.namespace, resource_version=rv, timeout_seconds=30):
                    rv = obj["metadata"].get("resourceVersion", rv)
                    conds = obj.get("status", {}).get("conditions") or []
                    if any(c["type"] in ("SuccessCriteriaMet", "Complete") and c["status"] == "True" for c in conds):
                        self.complete.setdefault(obj["metadata"]["name"], time.monotonic())
            except Exception:  # noqa: BLE001 - reconnect
                time.sleep(0.1)

    def stop(self):
        self._stop.set()


async def run_ours(refs, conn_id, seen: dict):
    from dlc_airflow.airflow.trigger import DLCJobTrigger

    async def one(ref):
        trigger = DLCJobTrigger(ref=ref.to_dict(), conn_id=conn_id, stream_logs=False, end_from_trigger=False)
        async for _event in trigger.run():
            seen[ref.name] = time.monotonic()
            return
    await asyncio.gather(*(one(r) for r in refs))


async def run_cncf(refs, conn_id, namespace, poll, seen: dict):
    from airflow.providers.cncf.kubernetes.triggers.job import KubernetesJobTrigger

    async def one(ref):
        trigger = KubernetesJobTrigger(job_name=f"{ref.name}-worker", job_namespace=namespace, pod_names=[],
                                       pod_namespace=namespace, base_container_name="main",
                                       kubernetes_conn_id=conn_id, poll_interval=poll, get_logs=False,
                                       do_xcom_push=False)
        async for _event in trigger.run():
            seen[ref.name] = time.monotonic()
            return
    await asyncio.gather(*(one(r) for r in refs))


def grant_job_status(admin, namespace: str, extra_rules: tuple[dict, ...] = ()) -> None:
    """The cncf trigger reads jobs/status, which dlc-airflow's Role does not need (its operator
    also deletes the job's pods: extra_rules)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + namespace
    admin.request("POST", rbac + "/roles", body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "job-status"},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs/status"], "verbs": ["get"]}, *extra_rules]})
    admin.request("POST", rbac + "/rolebindings", body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "job-status"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "job-status"},
        "subjects": [{"kind": "ServiceAccount", "name": "dlc-airflow", "namespace": "dlc-system"}]})


def measure(cluster, jobs: int) -> dict:
    admin = cluster.admin()
    namespace = create_test_namespace(admin, prefix="bench")
    grant_job_status(admin, namespace)
    tmp = Path(tempfile.mkdtemp(prefix="dlc-bench-"))
    approaches = {"dlc-airflow (shared watch)": None, "cncf KubernetesJobTrigger poll=10s": 10.0,
                  "cncf KubernetesJobTrigger poll=1s": 1.0}
    proxies = {name: cluster.fault_proxy() for name in approaches}
    try:
        for p in proxies.values():
            p.__enter__()
        conns = {}
        for i, (name, proxy) in enumerate(proxies.items()):
            conn_id = f"bench_{i}"
            kc = kubeconfig_for(cluster, namespace, proxy, tmp / f"kc{i}.json")
            os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kc), "namespace": namespace}})
            conns[name] = conn_id
        refs_file = tmp / "refs.json"
        # Start the three "triggerers" first and let them import everything: the jobs must
        # not finish before anyone waits on them.
        workers = {
            name: subprocess.Popen(
                [sys.executable, __file__, "--worker", json.dumps(
                    {"refs": str(refs_file), "conn_id": conns[name], "namespace": namespace, "poll": poll})],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=os.environ.copy())
            for name, poll in approaches.items()
        }
        for proc in workers.values():
            assert proc.stdout.readline().strip() == "ready"
        ref_watch = ReferenceWatch(admin, namespace)
        ref_watch.start()
        runner = KubeRunner(cluster.restricted(namespace), get_backend("native"))
        rng = random.Random(1)
        refs = []
        for i in range(jobs):
            ident = TaskIdentity("bench", f"t{i}", uuid.uuid4().hex)
            job = DLCJob(type="batch", image="registry.local/prep:1", command=["prep"],
                         annotations={"pod-complete.stage.kwok.x-k8s.io/delay": f"{rng.uniform(15, 30):.1f}s"})
            ref, _ = runner.submit(job, job_name(f"b{i}", ident, 1), ident, 1)
            refs.append(ref)
        before = {name: p.requests for name, p in proxies.items()}
        start = time.monotonic()
        refs_file.with_suffix(".tmp").write_text(json.dumps([r.to_dict() for r in refs]))
        refs_file.with_suffix(".tmp").rename(refs_file)
        seen = {name: json.loads(proc.communicate(timeout=600)[0].strip().splitlines()[-1])
                for name, proc in workers.items()}
        wall = time.monotonic() - start
        ref_watch.stop()
        results = {}
        for name in approaches:
            lat = [seen[name][r.name] - ref_watch.complete[f"{r.name}-worker"] for r in refs
                   if f"{r.name}-worker" in ref_watch.complete]
            results[name] = {
                "jobs": jobs,
                "median_s": round(statistics.median(lat), 3),
                "p95_s": round(sorted(lat)[max(0, int(len(lat) * 0.95) - 1)], 3),
                "max_s": round(max(lat), 3),
                "api_requests": proxies[name].requests - before[name],
                "requests_per_job_minute": round((proxies[name].requests - before[name]) / jobs / (wall / 60), 1),
                "triggerer_peak_rss_mib": round(seen[name]["_peak_rss_mib"], 1),
            }
        return results
    finally:
        for p in proxies.values():
            p.__exit__(None, None, None)
        delete_namespace(admin, namespace)


def worker(spec: dict) -> None:
    """One approach's triggers in one event loop; prints {job: monotonic time noticed}."""
    import airflow.providers.cncf.kubernetes.triggers.job  # noqa: F401 - import before "ready"

    import dlc_airflow.airflow.trigger  # noqa: F401
    from dlc_airflow.jobref import JobRef

    print("ready", flush=True)
    refs_file = Path(spec["refs"])
    while not refs_file.exists():
        time.sleep(0.05)
    refs = [JobRef.from_dict(r) for r in json.loads(refs_file.read_text())]
    seen: dict[str, float] = {}
    if spec["poll"] is None:
        asyncio.run(run_ours(refs, spec["conn_id"], seen))
    else:
        asyncio.run(run_cncf(refs, spec["conn_id"], spec["namespace"], spec["poll"], seen))
    import resource

    seen["_peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(seen))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 50])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "notice_latency.json"))
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    cluster = acquire_cluster(in_ci=False)
    report = {str(n): measure(cluster, n) for n in args.jobs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for n, rows in report.items():
        print(f"\n{n} jobs waiting at once")
        print(f"{'approach':40} {'median':>8} {'p95':>8} {'max':>8} {'requests':>9} {'req/job/min':>12} {'RSS MiB':>8}")
        for name, r in rows.items():
            print(f"{name:40} {r['median_s']:>7.3f}s {r['p95_s']:>7.3f}s {r['max_s']:>7.3f}s "
                  f"{r['api_requests']:>9} {r['requests_per_job_minute']:>12} {r['triggerer_peak_rss_mib']:>8}")


if __name__ == "__main__":
    main()
