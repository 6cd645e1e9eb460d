"""Fixtures of the local backend's tests."""

from __future__ import annotations

import pytest

from dlc_airflow.local.jobs import JobFolders


@pytest.fixture
def runner(tmp_path):
    """The local job folders of a fresh root; every job started is stopped afterwards."""
    r = JobFolders(tmp_path / "jobs")
    r.grace_seconds = 2.0
    yield r
    for name in r.find({}):  # never leave processes behind
        r.stop(name)
