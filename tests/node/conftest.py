"""Tests that run real containers on the local cluster's real node (scripts/k8s-node).

They check what the workload did (an all_reduce result, files written, a commit cloned, a
termination message, an OOM kill), never only a phase. In CI a missing node fails them.
"""

from __future__ import annotations

import pytest

from tests.conftest import IN_CI


@pytest.fixture(scope="session")
def real_node(cluster):
    from tests.support.realnode import NodeUnavailable, check_node, runtime_image

    try:
        check_node(cluster.admin())
        image = runtime_image()
    except NodeUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and no real node: {exc}", pytrace=False)
        pytest.skip(str(exc))
    return image


def built_image(ref_of) -> str:
    """An image's reference from the images' refs file; in CI a missing one fails the test."""
    from tests.support.realnode import NodeUnavailable

    try:
        return str(ref_of())
    except NodeUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and {exc}", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def frameworks(real_node):
    """The frameworks image (TensorFlow, XGBoost, DeepSpeed, Ray, Megatron Core, Open MPI)."""
    from tests.support.realnode import frameworks_image

    return built_image(frameworks_image)


@pytest.fixture(scope="session")
def airflow_image(real_node):
    """docker/airflow.Dockerfile's image: Airflow with this provider, for Airflow's own pods."""
    from tests.support.realnode import airflow_image

    return built_image(airflow_image)


# Real Airflow (a migrated metadata DB, connections as the restricted identity, DAG files):
# the fixtures of the Airflow end-to-end tests.
from tests.airflow.conftest import airflow_db, dag_files, k8s_conn  # noqa: E402, F401
