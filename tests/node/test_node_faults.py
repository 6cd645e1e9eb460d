"""Faults on real processes: a rank SIGKILLed in the middle of its all_reduce loop,
containerd restarted under running jobs, and the kubelet stopped under one until its node goes
NotReady. What the tasks do is checked, and how long the failure takes to end the job
(README: a killed rank ends a job without restarts within seconds; gloo's own timeout, 30
minutes, never comes into it)."""

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


def running_pods(kube, pods: int, timeout: float = 120) -> bool:
    """Whether `pods` of the job's pods run within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len([p for p in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]
                if p["status"].get("phase") == "Running"]) >= pods:
            return True
        time.sleep(0.5)
    return False


def restart_when_running(kube, pods: int, settle: float, *restart: str) -> tuple[list[str], threading.Thread]:
    """A thread that runs `scripts/k8s-node restart <restart...>` once `pods` of the job's pods
    run (and `settle` seconds more); what the script said lands in the list."""
    said: list[str] = []

    def run() -> None:
        if running_pods(kube, pods):
            time.sleep(settle)
            done = subprocess.run([str(K8S_NODE), "restart", *restart], capture_output=True, text=True, timeout=180)
            said.append(done.stderr)
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


def kubelet(action: str) -> str:
    """`scripts/k8s-node stop|start kubelet`; what it said."""
    return subprocess.run([str(K8S_NODE), action, "kubelet"], capture_output=True, text=True, timeout=180).stderr


def stop_the_kubelet_until_the_node_is_not_ready(kube) -> tuple[list[str], threading.Thread]:
    """A thread that stops the kubelet once the job's pod runs (and a tick has streamed), waits
    until the node lifecycle controller marks that running pod not ready (Ready=False with no
    reason: its node went NotReady), starts the kubelet again, and once the pod is Ready again
    tells the job to end (a file its loop looks for, made through containerd); what happened
    lands in the list."""
    said: list[str] = []

    def ready(pod: dict) -> str | None:
        return next((f"{c.get('status')}/{c.get('reason') or ''}" for c in pod["status"].get("conditions") or []
                     if c.get("type") == "Ready"), None)

    def until(want: str, timeout: float) -> float | None:
        start = time.monotonic()
        while time.monotonic() < start + timeout:
            if any(p["status"].get("phase") == "Running" and ready(p) == want
                   for p in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]):
                return time.monotonic() - start
            time.sleep(1)
        return None

    def run() -> None:
        if not running_pods(kube, 1):
            return
        time.sleep(6)
        said.append(kubelet("stop"))
        try:
            lost = until("False/", 240)
            said.append(f"pod not ready {lost:.0f} s after the kubelet stopped" if lost is not None else "pod still ready")
            time.sleep(5)  # the task's wait reads the job's events every 5 s
        finally:
            said.append(kubelet("start"))
        if until("True/", 60) is not None:
            time.sleep(5)
            for c in containers(kube.namespace):
                crictl("exec", c["id"], "touch", "/tmp/end")
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return said, thread


def test_a_kubelet_outage_under_a_running_job(kube, k8s_conn, dag_files, real_node, capfd):
    """The kubelet stops under a running job until the node goes NotReady (the node controller's
    grace period is 80 s in this cluster: k8s/cluster/kwokctl.yaml), then starts again. The
    containers go on (containerd's shims keep them); the task log says that the replica's node
    stopped reporting, then that the replica is no longer unwell; the log stream, cut while no
    kubelet serves it, resumes from where it was with no line lost or repeated; and the job
    ends as it would have (the pod tolerates an unreachable node for 300 s before eviction).
    The job ticks every 5 s until the test tells it to end, after the recovery."""
    source = ("import os, time\nprint('started', flush=True)\nticks = 0\n"
              "while ticks < 120 and not os.path.exists('/tmp/end'):\n"
              "    time.sleep(5)\n    print('tick', ticks, flush=True)\n    ticks += 1\n"
              "from dlc_airflow.runtime import report_output\nreport_output('ticks', ticks)\nprint('done', flush=True)\n")
    job = on_real_node(type="batch", command=["python3", "-c", source], resources={"cpu": "100m", "memory": "128Mi"})
    outage, thread = stop_the_kubelet_until_the_node_is_not_ready(kube)
    try:
        # a wait on a worker, which streams the logs and reads the job's events every 5 s (the
        # deferred wait reads them at state changes)
        dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job, queue_timeout=120,
                                     deferrable=False)
        ti = dag.test().get_task_instance("train")
    finally:  # whatever happened, the node is back for the next test
        thread.join(300)
        if "kubelet started" not in "".join(outage):
            kubelet("start")
    text = "".join(capfd.readouterr())
    assert len(outage) == 3 and "kubelet stopped" in outage[0] and "kubelet started" in outage[2], outage
    assert outage[1].startswith("pod not ready"), outage
    assert ti.state == "success", task_log(text)
    ticks = xcom(ti)["outputs"]["ticks"]
    assert 15 < ticks < 120, (outage, ticks)  # it ran through the outage and was told to end
    # what the wait said: the node's loss (its own line and the node controller's event on the
    # pod), then the recovery, each once
    lost = [line for line in text.splitlines() if "its node stopped reporting (NodeNotReady)" in line]
    back = [line for line in text.splitlines() if "replica worker-0 on node " in line and "no longer reported unwell" in line]
    assert len(lost) == 1 and "[warning" in lost[0] and "replica worker-0 on node " in lost[0], task_log(text)
    assert len(back) == 1 and text.index(lost[0]) < text.index(back[0]), task_log(text)
    assert "NodeNotReady: Node is not ready" in text, task_log(text)
    # each line the container printed, once, in order (the log line pads the message, then names its logger)
    lines = [line.split("[worker-0] ", 1)[1].split("  ", 1)[0].strip() for line in text.splitlines()
             if "[worker-0] " in line and "[DAG TEST]" not in line]
    assert lines == ["started", *(f"tick {i}" for i in range(ticks)), "done"], task_log(text)
