"""Fixtures of the local backend's tests."""

from __future__ import annotations

import pytest

from dlc_airflow.local import LocalRunner


@pytest.fixture
def runner(tmp_path):
    """A LocalRunner in a fresh folder; every job it started is stopped afterwards."""
    r = LocalRunner(tmp_path / "jobs")
    r.grace_seconds = 2.0
    yield r
    for name in r.find({}):  # never leave processes behind
        r.stop(name)
