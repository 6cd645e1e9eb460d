"""Kubeflow Trainer's TrainJobStatus for real: the local Trainer runs its status server
(scripts/k8s-controllers start_trainer, feature gate on while the real node runs), a 2-pod
TrainJob on the real node reports progress with the runtime helper (`log_progress`), rank 0's
reports reach the server with the pod's projected token, and the TrainJob's
status.trainerStatus carries them: our status mapping reads it (JobStatus.progress) and the
deferred task's log shows the progress the shared watch brought."""

from __future__ import annotations

import re

from dlc_airflow.k8s.kinds import TRAIN_JOB
from tests.airflow.test_operator_dagtest import xcom
from tests.node.test_ddp import task_log
from tests.node.workloads import create_script
from tests.support.realnode import on_real_node

# 12 steps over ~12 s, reported every step; the Trainer server takes rank 0's (at most every
# 10 s, and the last one at the end)
PROGRESS = '''
import os, time
from dlc_airflow.runtime import log_progress
for step in range(1, 13):
    time.sleep(1)
    log_progress(step, 12, loss=1.0 / step)
print("rank", os.environ.get("RANK"), "done", flush=True)
'''


def test_trainjob_progress_reaches_trainer_status(kube, admin, controllers, k8s_conn, dag_files, real_node, capfd):
    namespace = kube.namespace
    script = create_script(admin, namespace, PROGRESS)
    job = on_real_node(type="pytorch", roles={"worker": 2}, command=["torchrun", "/scripts/main.py"],
                       env={"OMP_NUM_THREADS": "1"}, resources={"cpu": "250m", "memory": "512Mi"}, max_running_time="10m",
                       storage=[{"type": "config_map", "name": script, "mount_path": "/scripts", "read_only": True}])
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="trainer", job=job, queue_timeout=240,
                                 deferrable=True, on_finish="keep")
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    result = xcom(ti)
    # the Trainer's own record of what rank 0 reported (not ours: its status server wrote it)
    trainjob = admin.get(TRAIN_JOB, result["job_name"], namespace)
    reported = (trainjob.get("status") or {}).get("trainerStatus") or {}
    assert reported.get("progressPercentage") == 100, trainjob.get("status")
    assert reported.get("estimatedRemainingSeconds") == 0 and reported.get("lastUpdatedTime")
    assert {m["name"] for m in reported.get("metrics") or []} >= {"loss"}, reported
    # and what the task made of the job's progress
    assert result["progress"]["percent"] == 100.0 and result["progress"]["total"] == 12, result["progress"]
    # the deferred wait reads a Kubernetes job's logs only at its state changes: progress lines
    # while it ran came from status.trainerStatus through the shared watch (percent form)
    assert re.search(r"progress \d+%, ETA", text), task_log(text)
