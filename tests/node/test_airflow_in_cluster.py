"""Airflow itself in the cluster: the triggerer and the scheduler (whose LocalExecutor runs the
tasks: the worker) run as pods of docker/airflow.Dockerfile's image on the real node, with
in-cluster config only (the ServiceAccount's token, no kubeconfig anywhere), bound to nothing
but the job runner's Role in the jobs' namespace.

This machine runs the rest: the metadata database (scripts/postgres-local), the api-server
(the Execution API the workers report to) and the dag-processor. Airflow's pods share the
node's network to reach them on its loopback (hostNetwork; in a real deployment they are
Services), and the DAGs and logs folders by hostPath. Nothing on this machine runs a
scheduler or a triggerer, so every task that ends here ended through the pods.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from dlc_airflow.k8s.errors import KubeError
from dlc_airflow.k8s.kinds import POD, SECRET, ResourceKind
from tests.airflow.test_scheduler_reliability import jobs_of, wait
from tests.support.airflow_stack import AirflowStack
from tests.support.cluster import REPO, SA_NAME, SA_NAMESPACE, ensure_service_account
from tests.support.realnode import NODE_LABEL, NODE_TAINT, on_real_node

K8S_LOCAL = REPO / "scripts" / "k8s-local"
DEPLOYMENT = ResourceKind("apps/v1", "Deployment", "deployments")
COMPONENTS = ("scheduler", "triggerer")
MARK = {"dlc-airflow/test": "airflow-in-cluster"}

DAG = '''
import json
from datetime import datetime, timezone

from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    for task_id, kwargs in json.loads({tasks!r}).items():
        DLCJobOperator(task_id=task_id, backend="native", deferrable=True, **kwargs)
'''

# what the job's container reports: where it ran and a value it computed
REPORT = ("import os, socket; from dlc_airflow.runtime import report_output; "
          "import time; time.sleep(float(os.environ.get('LINGER', '0'))); "
          "report_output('pod', socket.gethostname()); report_output('sum', sum(range(101)))")


# run in a pod: the connection the tasks use, as the API server sees it
WHOAMI = """
import json, os
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.connection import KubeConnection
connection = KubeConnection("dlc")
user = KubeClient(connection.api_client).whoami()["username"]
kubeconfig = bool(os.environ.get("KUBECONFIG")) or os.path.exists(os.path.expanduser("~/.kube/config"))
print(json.dumps({"user": user, "namespace": connection.resolve_namespace(), "kubeconfig": kubeconfig}))
"""


def job(linger: int = 0) -> dict:
    return on_real_node(type="batch", command=["python3", "-c", REPORT], env={"LINGER": str(linger)},
                        resources={"cpu": "100m", "memory": "128Mi"})


class AirflowInCluster:
    """The host's half (api-server, dag-processor) and the pods' half (scheduler, triggerer)."""

    def __init__(self, admin, image: str, database: str, namespace: str, tmp_path: Path) -> None:
        self.admin, self.image = admin, image
        self.dags = tmp_path / "dags"
        self.dags.mkdir()
        connection = {"conn_type": "kubernetes", "extra": {"in_cluster": True, "namespace": namespace}}
        self.stack = AirflowStack(tmp_path / "home", self.dags, components=("api-server", "dag-processor"),
                                  database=database, env={
                                      "AIRFLOW_CONN_DLC": json.dumps(connection),
                                      # a deleted triggerer's triggers move within seconds
                                      "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                                  })
        self.suffix = uuid.uuid4().hex[:6]

    def start(self) -> None:
        remove_airflow_pods(self.admin)
        ensure_service_account(self.admin)  # (the identity the pods run as)
        self.stack.start()
        # the pods run as the image's airflow user (uid 50000): it writes the task logs
        for folder in (self.stack.home, self.stack.home / "logs"):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o777)
        self.dags.chmod(0o755)
        env = {k: v for k, v in self.stack.env.items() if k.startswith("AIRFLOW")}
        self.admin.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": self.name("env"), "labels": MARK},
                           "stringData": env}, namespace=SA_NAMESPACE)
        for component in COMPONENTS:
            self.admin.request("POST", DEPLOYMENT.path(SA_NAMESPACE), body=self.deployment(component))
        for component in COMPONENTS:
            self.wait_alive(component)

    def wait_alive(self, component: str, timeout: float = 240) -> str:
        """The component's running pod, once its Airflow job heartbeats in the database; a pod
        that crashed fails the wait with its log."""
        job_type = {"scheduler": "SchedulerJob", "triggerer": "TriggererJob"}[component]

        def alive() -> str | None:
            for pod in self.pods(component):
                for status in pod["status"].get("containerStatuses", []):
                    if status.get("restartCount"):
                        log = self.admin.read_log(pod["metadata"]["name"], SA_NAMESPACE, tail_lines=40, previous=True)
                        raise AssertionError(f"the {component} pod restarted:\n{log}")
            pod = self.running_pod(component)
            beats = self.stack.query("SELECT id FROM job WHERE job_type = ? AND state = 'running' AND "
                                     "latest_heartbeat > now() - interval '5 seconds'", job_type)
            return pod if pod and beats else None
        return wait(alive, timeout, f"the {component} pod to run and heartbeat")

    def name(self, what: str) -> str:
        return f"airflow-{what}-{self.suffix}"

    def deployment(self, component: str) -> dict:
        labels = {"app": self.name(component), **MARK}
        folders = {"home": self.stack.home, "dags": self.dags}
        container = {
            "name": component, "image": self.image,
            # the logs are files in the shared folder, read where they are: no log server
            "args": [component, "--skip-serve-logs"],
            "envFrom": [{"secretRef": {"name": self.name("env")}}],
            "volumeMounts": [{"name": n, "mountPath": str(p)} for n, p in folders.items()],
            "resources": {"requests": {"cpu": "100m", "memory": "512Mi"}},
        }
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": self.name(component), "namespace": SA_NAMESPACE, "labels": MARK},
                "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                    "metadata": {"labels": labels},
                    "spec": {"serviceAccountName": SA_NAME, "hostNetwork": True,
                             "nodeSelector": NODE_LABEL, "tolerations": [NODE_TAINT],
                             "containers": [container],
                             "volumes": [{"name": n, "hostPath": {"path": str(p), "type": "Directory"}}
                                         for n, p in folders.items()]}}}}

    def pods(self, component: str) -> list[dict]:
        return self.admin.list(POD, SA_NAMESPACE, labels={"app": self.name(component)})[0]

    def running_pod(self, component: str) -> str | None:
        running = [p for p in self.pods(component)
                   if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
        return running[0]["metadata"]["name"] if running else None

    def identity_in(self, component: str) -> dict:
        """Who the `dlc` connection is to the API server, asked from inside the component's pod."""
        done = subprocess.run([str(K8S_LOCAL), "kubectl", "-n", SA_NAMESPACE, "exec", self.running_pod(component),
                               "--", "python3", "-c", WHOAMI], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def add_dag(self, tasks: dict[str, dict]) -> str:
        dag_id = f"incluster_{uuid.uuid4().hex[:6]}"
        path = self.dags / f"{dag_id}.py"
        tasks = {task_id: {"conn_id": "dlc", **kwargs} for task_id, kwargs in tasks.items()}
        path.write_text(DAG.format(dag_id=dag_id, tasks=json.dumps(tasks)))
        path.chmod(0o644)
        self.stack.wait_for_dag(dag_id)
        self.stack.airflow("dags", "unpause", dag_id)
        return dag_id

    def trigger(self, dag_id: str) -> str:
        run_id = f"manual__{uuid.uuid4().hex[:8]}"
        self.stack.airflow("dags", "trigger", dag_id, "--run-id", run_id)
        return run_id

    def result(self, dag_id: str, run_id: str, task_id: str) -> dict:
        rows = self.stack.query("SELECT value FROM xcom WHERE dag_id = ? AND run_id = ? AND task_id = ? "
                                "AND key = 'return_value'", dag_id, run_id, task_id)
        value = rows[0]["value"]
        while isinstance(value, (str, bytes)):
            value = json.loads(value)
        return value

    def stop(self) -> None:
        try:
            for pod in self.admin.list(POD, SA_NAMESPACE, labels=MARK)[0]:  # (shown when the test failed)
                try:
                    text = self.admin.read_log(pod["metadata"]["name"], SA_NAMESPACE, tail_lines=60)
                except KubeError as exc:  # (not started)
                    text = str(exc)
                print(f"--- {pod['metadata']['name']} ---\n{text}")
        finally:
            remove_airflow_pods(self.admin)
            self.stack.stop()


def remove_airflow_pods(admin) -> None:
    """Every Deployment and Secret of this module (an earlier run's too), its pods gone: no
    Airflow component may outlive its test, since the next test resets the database."""
    for kind in (DEPLOYMENT, SECRET):
        for obj in admin.list(kind, SA_NAMESPACE, labels=MARK)[0]:
            admin.delete(kind, obj["metadata"]["name"], SA_NAMESPACE, propagation="Foreground")
    wait(lambda: not admin.list(POD, SA_NAMESPACE, labels=MARK)[0], 120, "Airflow's pods to end")


@pytest.fixture
def airflow(admin, airflow_image, postgres, namespace, tmp_path):
    deployed = AirflowInCluster(admin, airflow_image, postgres, namespace, tmp_path)
    try:
        deployed.start()
        yield deployed
    finally:
        deployed.stop()


def test_tasks_submit_and_wait_from_airflow_pods_with_in_cluster_config(airflow, kube):
    dag_id = airflow.add_dag({"in_triggerer": {"job": job()},
                              "from_worker": {"job": job(), "start_in_triggerer": False}})
    run_id = airflow.trigger(dag_id)
    airflow.stack.wait_for_runs(dag_id, 1, {"success"}, timeout=300)
    names = sorted(jobs_of(kube))
    assert len(names) == 2  # one job per task
    for task_id in ("in_triggerer", "from_worker"):
        result = airflow.result(dag_id, run_id, task_id)
        # the job's container ran on the real node and said so through its termination message
        assert result["outputs"]["sum"] == 5050 and result["outputs"]["pod"].startswith(result["job_name"])
        assert result["job_name"] in names and result["attempt"] == 1
    # one started in the triggerer pod, never queued for a worker; the other was, and deferred
    started_there = airflow.stack.task_instance(dag_id, run_id, "in_triggerer")
    assert started_there["queued_dttm"] is None and started_there["try_number"] == 1, started_there
    assert "started in the triggerer: no worker slot" in airflow.stack.task_log(dag_id, run_id, "in_triggerer")
    submitted_there = airflow.stack.task_instance(dag_id, run_id, "from_worker")
    assert submitted_there["queued_dttm"] is not None and submitted_there["try_number"] == 1, submitted_there
    assert "submitted job" in airflow.stack.task_log(dag_id, run_id, "from_worker")
    # what the tasks' connection is, seen from inside both pods: the ServiceAccount's token and
    # the cluster's Service address, no kubeconfig to fall back on
    for component in COMPONENTS:
        seen = airflow.identity_in(component)
        assert seen == {"user": f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}", "namespace": kube.namespace,
                        "kubeconfig": False}, (component, seen)


def test_deleting_the_triggerer_pod_moves_its_wait_to_the_replacement(airflow, kube, admin):
    dag_id = airflow.add_dag({"train": {"job": job(linger=40)}})
    run_id = airflow.trigger(dag_id)
    airflow.stack.wait_for_task(dag_id, run_id, "train", {"deferred"}, timeout=240)
    names = wait(lambda: list(jobs_of(kube)), 60, "the job")
    first = airflow.running_pod("triggerer")
    admin.delete(POD, first, SA_NAMESPACE)  # as a node drain or a rollout would: SIGTERM, then gone
    wait(lambda: (pod := airflow.running_pod("triggerer")) and pod != first, 120, "the replacement triggerer pod")
    wait(lambda: admin.get(POD, first, SA_NAMESPACE) is None, 60, "the deleted triggerer pod to be gone")
    assert airflow.stack.task_instance(dag_id, run_id, "train")["state"] == "deferred"
    airflow.stack.wait_for_runs(dag_id, 1, {"success"}, timeout=300)
    assert list(jobs_of(kube)) == names  # the replacement adopted the one job
    result = airflow.result(dag_id, run_id, "train")
    assert result["state"] == "SUCCEEDED" and result["attempt"] == 1 and result["outputs"]["sum"] == 5050
    assert airflow.stack.task_instance(dag_id, run_id, "train")["try_number"] == 1
