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


@pytest.fixture(scope="session")
def frameworks(real_node):
    """The frameworks image (TensorFlow, XGBoost, DeepSpeed, Ray, Open MPI)."""
    from tests.support.realnode import NodeUnavailable, frameworks_image

    try:
        return frameworks_image()
    except NodeUnavailable as exc:
        if IN_CI:
            pytest.fail(f"CI=true and no frameworks image: {exc}", pytrace=False)
        pytest.skip(str(exc))


# Real Airflow (a migrated metadata DB, connections as the restricted identity, DAG files):
# the fixtures of the Airflow end-to-end tests.
from tests.airflow.conftest import airflow_db, dag_files, k8s_conn  # noqa: E402, F401
