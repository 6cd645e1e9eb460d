"""Shared fixtures. Cluster tests use `cluster`, `admin`, `namespace` and `kube`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Airflow reads its configuration on import: give the test session an Airflow home of its
# own (SQLite, no examples) before anything imports airflow.
AIRFLOW_HOME = Path(os.environ.get("DLC_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="dlc-airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(AIRFLOW_HOME / "dags"))
os.environ.setdefault("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{AIRFLOW_HOME}/airflow.db")
os.environ.setdefault("AIRFLOW__CORE__EXECUTOR", "LocalExecutor")
os.environ.setdefault("AIRFLOW__LOGGING__BASE_LOG_FOLDER", str(AIRFLOW_HOME / "logs"))

# Imported before any test starts threads: CPython 3.11.7's ast.parse (used by pytest's
# assertion rewriting on import) is not thread-safe, and a late import of hypothesis while
# watch threads import modules fails with "AST constructor recursion depth mismatch".
import hypothesis  # noqa: F401
import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def cluster():
    from tests.support.cluster import ClusterUnavailable, acquire_cluster

    try:
        found = acquire_cluster(IN_CI)
    except ClusterUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and no cluster: {exc}", pytrace=False)
        pytest.skip(str(exc))
    print(f"\ncluster tests run against: {found.source}")
    return found


@pytest.fixture(scope="session")
def admin(cluster):
    """Cluster-admin client: only for what a controller or an operator would do (status writes)."""
    return cluster.admin()


@pytest.fixture(scope="session")
def controllers(cluster):
    """The job controllers of the local control plane (Kueue, JobSet, Training Operator, Trainer,
    KubeRay), all running: in CI a missing one fails the test, elsewhere it skips."""
    from tests.support.cluster import controllers_running

    missing = [name for name, up in controllers_running().items() if not up]
    if missing:
        message = f"controllers not running: {', '.join(missing)} (scripts/k8s-local up runs them; see DLC_K8S_CONTROLLERS)"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return cluster


@pytest.fixture
def postgres():
    """The local PostgreSQL's URL (scripts/postgres-local), with a fresh airflow database: for
    the tests of Airflow in its production shape. In CI a server that is down fails the test."""
    from tests.support.postgres import PostgresMissing, fresh_database

    try:
        return fresh_database()
    except PostgresMissing as missing:
        if IN_CI:
            pytest.fail(str(missing), pytrace=False)
        pytest.skip(str(missing))


@pytest.fixture
def namespace(cluster, admin):
    """A fresh namespace where the restricted identity holds dlc-airflow's Role."""
    from tests.support.cluster import create_test_namespace, delete_namespace

    name = create_test_namespace(admin)
    yield name
    delete_namespace(admin, name)


@pytest.fixture
def kube(cluster, namespace):
    """A client as the restricted ServiceAccount, in the test's namespace."""
    return cluster.restricted(namespace)


@pytest.fixture(autouse=True)
def _clear_of_the_main_lanes_outages(request):
    """make test's second lane (DLC_TEST_LANE=side, scripts/test-lanes) shares the control plane
    with the main lane, whose fault tests restart the API server on purpose: each of its cluster
    tests holds the outage lock shared, so it never meets one."""
    if os.environ.get("DLC_TEST_LANE") != "side" or "cluster" not in request.fixturenames:
        yield
        return
    from tests.support.cluster import clear_of_outages

    with clear_of_outages(request.getfixturevalue("cluster")):
        yield


def pytest_collection_modifyitems(config, items):
    # Tests that need a cluster carry the `cluster` marker, whatever fixture brings it.
    for item in items:
        if {"cluster", "kube", "admin", "namespace", "controllers"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)
