"""Faults on real processes: a rank SIGKILLed in the middle of its all_reduce loop,
containerd restarted under running jobs, and the kubelet stopped for a while under one. What the tasks do is checked, and how long the
failure takes to end the job (README: a killed rank ends a job without restarts within
seconds; gloo's own timeout, 30 minutes, never comes into it)."""

from __future__ import annotations

import json
import subprocess
import threading
import time

from dlc_airflow.k8s.kinds import POD
from dlc_airflow.naming import MANAGED_BY
from tests.airflow.test_operator_dagtest import xcom
from tests.node.test_ddp import task_log
from tests.node.workloads import create_script
from tests.support.realnode import K8S_NODE, crictl, on_real_node

# Every rank all_reduces once a second and says so; none of them ends on its own.
LOOP = '''
import time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(600):
    value = torch.tensor([1.0])
    dist.all_reduce(value)
    print(f"rank {rank} step {step} all_reduce {value.item():g}", flush=True)
    time.sleep(1)
'''


def containers(namespace: str) -> list[dict]:
    return [c for c in json.loads(crictl("ps", "-o", "json"))["containers"]
            if c["labels"].get("io.kubernetes.pod.namespace") == namespace]


def test_a_rank_killed_mid_all_reduce_ends_the_job(kube, admin, k8s_conn, dag_files, real_node, capfd):
    script = create_script(admin, kube.namespace, LOOP)
    job = on_real_node(type="pytorch", roles={"worker": 2}, command=["torchrun", "/scripts/main.py"],
                       env={"OMP_NUM_THREADS": "1"}, resources={"cpu": "250m", "memory": "1Gi"},
                       storage=[{"type": "config_map", "name": script, "mount_path": "/scripts", "read_only": True}])
    killed: list[float] = []

    def kill_rank_1():
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            for pod in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]:
                if "-worker-1-" in pod["metadata"]["name"] and pod["status"].get("phase") == "Running":
                    for c in containers(kube.namespace):
                        if c["labels"]["io.kubernetes.pod.name"] != pod["metadata"]["name"]:
                            continue
                        log = subprocess.run([str(K8S_NODE), "crictl", "logs", c["id"]], capture_output=True,
                                             text=True).stdout + subprocess.run(
                            [str(K8S_NODE), "crictl", "logs", c["id"]], capture_output=True, text=True).stderr
                        if "step 3 " in log:  # the ranks have met and are reducing
                            crictl("exec", c["id"], "pkill", "-KILL", "-f", "/scripts/main.py")
                            killed.append(time.monotonic())
                            return
            time.sleep(1)
    thread = threading.Thread(target=kill_rank_1, daemon=True)
    thread.start()
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job, queue_timeout=240, deferrable=True)
    ti = dag.test().get_task_instance("train")
    ended = time.monotonic()
    thread.join(5)
    text = "".join(capfd.readouterr())
    assert killed, task_log(text)
    assert ti.state == "failed"
    # the job ended within a minute of the kill (the Job controller counts the failed index,
    # dlc-airflow stops what is left); rank 0 was not left hanging in its all_reduce
    assert ended - killed[0] < 60, (ended - killed[0], task_log(text))
    assert "worker-1" in text and "exited with code" in text, task_log(text)
    deadline = time.monotonic() + 60
    while containers(kube.namespace):
        assert time.monotonic() < deadline, containers(kube.namespace)
        time.sleep(1)


def restart_when_running(kube, pods: int, settle: float, *restart: str) -> tuple[list[str], threading.Thread]:
    """A thread that runs `scripts/k8s-node restart <restart...>` once `pods` of the job's pods
    run (and `settle` seconds more); what the script said lands in the list."""
    said: list[str] = []

    def run() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = [p for p in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]
                       if p["status"].get("phase") == "Running"]
            if len(running) >= pods:
                time.sleep(settle)
                done = subprocess.run([str(K8S_NODE), "restart", *restart], capture_output=True, text=True, timeout=180)
                said.append(done.stderr)
                return
            time.sleep(0.5)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return said, thread


def test_restarting_containerd_under_running_jobs(kube, k8s_conn, dag_files, real_node, capfd):
    source = ("import time, socket\nprint('started on', socket.gethostname(), flush=True)\ntime.sleep(25)\n"
              "from dlc_airflow.runtime import report_output\nreport_output('host', socket.gethostname())\n"
              "print('done', flush=True)\n")
    job = on_real_node(type="batch", roles={"worker": 2}, command=["python3", "-c", source],
                       resources={"cpu": "250m", "memory": "256Mi"})
    restarted, thread = restart_when_running(kube, 2, 3, "containerd")
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job, queue_timeout=120)
    ti = dag.test().get_task_instance("train")
    thread.join(5)
    text = "".join(capfd.readouterr())
    assert restarted and "containerd restarted" in restarted[0], restarted
    assert ti.state == "success", task_log(text)
    assert "[worker-0] done" in text and "[worker-1] done" in text, task_log(text)
    assert xcom(ti)["outputs"]["host"].startswith(xcom(ti)["job_name"])



def test_a_kubelet_outage_under_a_running_job(kube, k8s_conn, dag_files, real_node, capfd):
    """The kubelet stops for 30 s while the job runs: the containers go on (containerd's shims
    keep them), the log stream, cut while no kubelet serves it, resumes from where it was with
    no line lost or repeated, and the job ends as it would have. (An outage longer than the node
    controller's grace period would make the node NotReady: 3 min 20 s in this cluster, set by
    kwok for its simulated nodes; not tested.)"""
    source = ("import time\nprint('started', flush=True)\n"
              "for i in range(12):\n    time.sleep(5)\n    print('tick', i, flush=True)\n"
              "from dlc_airflow.runtime import report_output\nreport_output('ticks', 12)\nprint('done', flush=True)\n")
    job = on_real_node(type="batch", command=["python3", "-c", source], resources={"cpu": "100m", "memory": "128Mi"})
    stopped, thread = restart_when_running(kube, 1, 6, "kubelet", "30")  # (a tick or so streamed first)
    # a wait on a worker, which streams the logs (the deferred wait reads them at state changes)
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job, queue_timeout=120, deferrable=False)
    ti = dag.test().get_task_instance("train")
    thread.join(5)
    text = "".join(capfd.readouterr())
    assert stopped and "kubelet restarted" in stopped[0], stopped
    assert ti.state == "success", task_log(text)
    assert xcom(ti)["outputs"] == {"ticks": 12}
    # each line the container printed, once, in order (the log line pads the message, then names its logger)
    lines = [line.split("[worker-0] ", 1)[1].split("  ", 1)[0].strip() for line in text.splitlines()
             if "[worker-0] " in line and "[DAG TEST]" not in line]
    assert lines == ["started", *(f"tick {i}" for i in range(12)), "done"], task_log(text)
