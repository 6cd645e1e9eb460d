"""What a namespace full of other pods costs the shared watches: they list and watch only
dlc-airflow's objects (a label selector), so 10,000 foreign pods are neither sent nor kept.

In one namespace of the local control plane: N foreign pods (no labels of ours, for a
scheduler that does not exist, so they stay Pending and nothing garbage-collects them) and a few of our jobs. A process waits on our
jobs with the shared watches (as a triggerer does) and reports what the watches received and
hold, and its RSS; side by side, the same watch without the selector (what watching every pod
would cost).

    .venv/bin/python benchmarks/watch_memory.py --foreign 10000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.cluster import acquire_cluster, create_test_namespace, delete_namespace  # noqa: E402

PROBE = '''
import json, resource, sys, time
sys.path.insert(0, {repo!r})
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.kinds import POD
from dlc_airflow.k8s.watch import SharedWatch

client = KubeClient.from_kubeconfig({kubeconfig!r}, namespace={namespace!r})
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
watch = SharedWatch(client, {namespace!r}, POD)
if {unselected!r}:
    watch.selector = None  # every pod of the namespace (what a watch without our selector does)
seen = []
began = time.monotonic()
unsubscribe = watch.subscribe({job!r}, lambda objs: seen.append(len(objs.live)))
while not seen:
    time.sleep(0.01)
listed = time.monotonic() - began
time.sleep(2)
with watch._lock:
    kept = sum(len(o.live) for o in watch._objects.values())
print(json.dumps({{"first_status_s": round(listed, 3), "objects_kept": kept, "job_pods": seen[-1],
                   "rss_growth_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss0, 1)}}))
unsubscribe()
watch.stop()
'''


def foreign_pod(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"foreign-{i}", "labels": {"app": "other"}},
            "spec": {"schedulerName": "no-such-scheduler", "containers": [{"name": "c", "image": "registry.local/other:1"}]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--foreign", type=int, default=10000)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "watch_memory.json"))
    args = parser.parse_args()
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.kinds import POD
    from dlc_airflow.k8s.runner import KubeRunner
    from dlc_airflow.naming import TaskIdentity
    from dlc_airflow.spec import DLCJob

    cluster = acquire_cluster(in_ci=False)
    admin = cluster.admin()
    namespace = create_test_namespace(admin, prefix="wmem")
    try:
        began = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: admin.create(foreign_pod(i), namespace), range(args.foreign)))
        made = time.monotonic() - began
        runner = KubeRunner(cluster.restricted(namespace), get_backend("native"))
        job = DLCJob(type="batch", image="registry.local/prep:1", command=["prep"], roles={"worker": 4},
                     annotations={"pod-complete.stage.kwok.x-k8s.io/delay": "600s"})
        ref, _ = runner.submit(job, "ours-0123456789-1", TaskIdentity("wmem", "t", "r"), 1)
        time.sleep(5)
        kubeconfig = Path("/tmp/wmem-kubeconfig.json")
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": admin.api.configuration.host,
                                                   "certificate-authority": admin.api.configuration.ssl_ca_cert}}],
            "users": [{"name": "u", "user": {"token": cluster.token()}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": namespace}}],
            "current-context": "x"}))
        report = {"foreign_pods": args.foreign, "seconds_to_create_them": round(made, 1),
                  "pods_in_namespace": len(admin.list(POD, namespace)[0])}
        for name, unselected in (("shared watch (our label selector)", False), ("a watch of every pod", True)):
            probe = PROBE.format(repo=str(REPO), kubeconfig=str(kubeconfig), namespace=namespace,
                                 unselected=unselected, job=ref.name)
            done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
            report[name] = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
                "error": done.stderr[-2000:]}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
        print(json.dumps(report, indent=2))
    finally:
        delete_namespace(admin, namespace)


if __name__ == "__main__":
    main()
