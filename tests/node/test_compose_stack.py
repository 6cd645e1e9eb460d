"""docker/compose.yaml for real: podman-compose (Debian 12's) brings the stack up from the images
scripts/k8s-images built (Airflow with this provider; PostgreSQL from Debian's packages, as
`postgres:17` cannot be pulled here), its api-server answers, and a DAG of the README's kind
runs on the local cluster through it: the task, deferred to the stack's triggerer, submits a
job whose container runs on the real node, and the run's XCom carries what the container
computed. The stack reaches the cluster the way the compose file says a user's would: a
kubeconfig in DLC_KUBE_DIR, here the restricted ServiceAccount's token with the cluster's CA
and an address the containers reach. In CI a missing podman-compose, image or node fails it.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests.airflow.test_scheduler_reliability import jobs_of, wait
from tests.conftest import IN_CI
from tests.node.test_airflow_in_cluster import DAG, job
from tests.support.airflow_stack import free_port
from tests.support.cluster import REPO

COMPOSE_FILE = REPO / "docker" / "compose.yaml"
PROJECT = "dlc-compose-test"
PODMAN_STATE = Path(os.environ.get("DLC_PODMAN_STATE", Path.home() / ".cache" / "dlc-airflow" / "podman"))


def host_address(ca_server_names: list[str]) -> str:
    """An address of this machine that containers on a podman network reach and the API
    server's certificate names (loopback is the container's own)."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    ours = [field.split("/")[0] for line in shown.splitlines() for field in line.split()[3:4]]
    usable = [a for a in ours if not a.startswith("127.") and a in ca_server_names]
    assert usable, f"no address of this machine ({ours}) is in the API server's certificate ({ca_server_names})"
    return usable[0]


def certificate_addresses(server: str) -> list[str]:
    import ssl
    from urllib.parse import urlsplit

    from cryptography import x509

    url = urlsplit(server)
    pem = ssl.get_server_certificate((url.hostname, url.port or 443))
    names = x509.load_pem_x509_certificate(pem.encode()).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return [str(ip) for ip in names.value.get_values_for_type(x509.IPAddress)]


class ComposeStack:
    def __init__(self, tmp_path: Path, images: dict[str, str]) -> None:
        self.dags, self.kube = tmp_path / "dags", tmp_path / "kube"
        for folder in (self.dags, self.kube):
            folder.mkdir()
            folder.chmod(0o755)  # read by the containers' airflow user (uid 50000)
        self.port = free_port()
        self.password = secrets.token_urlsafe(12)
        self.env = {**os.environ, "CONTAINERS_CONF": str(PODMAN_STATE / "containers.conf"),
                    "DLC_AIRFLOW_IMAGE": images["airflow"], "DLC_POSTGRES_IMAGE": images["postgres"],
                    "DLC_DAGS_DIR": str(self.dags), "DLC_KUBE_DIR": str(self.kube),
                    "AIRFLOW_PORT": str(self.port), "DLC_ADMIN_PASSWORD": self.password}
        self._token: str | None = None

    def compose(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(["podman-compose", "-f", str(COMPOSE_FILE), "-p", PROJECT, *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env)
        assert done.returncode == 0, f"podman-compose {' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def podman(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, env=self.env)

    def write_kubeconfig(self, server: str, ca_file: str, token: str, namespace: str) -> None:
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "local",
                  "clusters": [{"name": "local", "cluster": {
                      "server": server, "certificate-authority-data": base64.b64encode(Path(ca_file).read_bytes()).decode()}}],
                  "users": [{"name": "dlc-airflow", "user": {"token": token}}],
                  "contexts": [{"name": "local", "context": {"cluster": "local", "user": "dlc-airflow",
                                                             "namespace": namespace}}]}
        path = self.kube / "config"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o644)

    def up(self) -> None:
        self.down()  # an earlier run's stack and volumes
        # podman-compose 1.0 does not wait on depends_on conditions: the migration first, as
        # the compose file's header says
        self.compose("up", "-d", "airflow-init")
        done = self.podman("wait", f"{PROJECT}_airflow-init_1", timeout=420)
        assert done.stdout.strip() == "0", f"airflow-init ended {done.stdout.strip()}: {self.logs('airflow-init')}"
        self.compose("up", "-d")
        wait(lambda: self.answers("/api/v2/version"), 300, "the stack's api-server to answer")

    def down(self) -> None:
        self.compose("down", "-v", timeout=300)
        # (podman-compose 1.0 leaves the project's network)
        self.podman("network", "rm", "--force", f"{PROJECT}_default")

    def logs(self, service: str) -> str:
        done = self.podman("logs", "--tail", "40", f"{PROJECT}_{service}_1")
        return (done.stdout + done.stderr)[-4000:]

    def answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        if self._token is None:
            self._token = self.call("POST", "/auth/token", {"username": "admin", "password": self.password},
                                    token=None)["access_token"]
        return self.call(method, path, body, token=self._token)

    def call(self, method: str, path: str, body: dict | None, token: str | None) -> dict:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **({"Authorization": f"Bearer {token}"} if token else {})})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read() or b"{}")

    def dag_parsed(self, dag_id: str) -> bool:
        try:
            return bool(self.api("GET", f"/api/v2/dags/{dag_id}"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise


@pytest.fixture
def compose_images(real_node) -> dict[str, str]:
    from tests.node.conftest import built_image
    from tests.support.realnode import airflow_image, postgres_image

    if not shutil.which("podman-compose"):
        message = "podman-compose is missing: scripts/podman-local up installs it"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # by their names in the build storage the images were built in (no pull)
    return {name: built_image(ref).replace("registry.local/", "localhost/", 1)
            for name, ref in (("airflow", airflow_image), ("postgres", postgres_image))}


@pytest.fixture
def stack(compose_images, cluster, namespace, tmp_path):
    running = ComposeStack(tmp_path, compose_images)
    configuration = cluster.admin().api.configuration
    address = host_address(certificate_addresses(configuration.host))
    port = configuration.host.rsplit(":", 1)[1]
    running.write_kubeconfig(f"https://{address}:{port}", configuration.ssl_ca_cert, cluster.token(), namespace)
    try:
        yield running  # (the test starts it, once its DAG is in the folder)
    finally:
        for service in ("airflow-scheduler", "airflow-triggerer"):  # (shown when the test failed)
            print(f"--- {service} ---\n{running.logs(service)}")
        running.down()


def test_the_compose_stack_runs_a_dag_on_the_local_cluster(stack, kube):
    dag_id = f"compose_{uuid.uuid4().hex[:6]}"
    (stack.dags / f"{dag_id}.py").write_text(
        DAG.format(dag_id=dag_id, tasks=json.dumps({"train": {"job": job()}})))  # (the default connection)
    (stack.dags / f"{dag_id}.py").chmod(0o644)
    # the dag-processor lists the folder when it starts (and every 5 minutes after)
    stack.up()
    wait(lambda: stack.dag_parsed(dag_id), 300, "the stack's dag-processor to parse the DAG")
    stack.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    run_id = stack.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None})["dag_run_id"]
    state = wait(lambda: (s := stack.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"])
                 in ("success", "failed") and s, 420, "the run to end")
    assert state == "success", stack.logs("airflow-scheduler")
    task = stack.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train")
    assert task["state"] == "success" and task["try_number"] == 1, task
    result = stack.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/train/xcomEntries/return_value")
    value = result["value"]
    while isinstance(value, str):
        value = json.loads(value)
    # the container ran on the real node and reported through its termination message, and
    # the job is the one job of this task in the namespace the stack's kubeconfig names
    assert value["outputs"]["sum"] == 5050 and value["outputs"]["pod"].startswith(value["job_name"]), value
    assert list(jobs_of(kube)) == [value["job_name"]]
