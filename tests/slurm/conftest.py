"""Fixtures of the slurm tests: a real Slurm (scripts/slurm-local, or DLC_TEST_SLURM_URL),
a job root the nodes and the tests both see, runners and Airflow connections to it.

Without a serving Slurm these tests skip with the reason; with CI=true they fail instead
(CI starts the local Slurm in `make test`).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.airflow.conftest import airflow_db, dag_files  # noqa: F401 - the Airflow fixtures, here too
from tests.support.slurm import slurm_or_skip


@pytest.fixture(scope="session")
def slurm():
    found = slurm_or_skip()
    print(f"\nslurm tests run against: {found.source} ({found.url})")
    yield found
    found.cancel_ours()  # nothing of the tests keeps running after them


@pytest.fixture(scope="session")
def job_root(tmp_path_factory) -> Path:
    """Job folders: on this host the nodes and the tests see the same files."""
    return tmp_path_factory.mktemp("slurm-jobs")


@pytest.fixture
def runner(slurm, job_root):
    from dlc_airflow.slurm.runner import SlurmRunner

    return SlurmRunner(slurm.settings(job_root))


@pytest.fixture
def slurm_conn(slurm, job_root, monkeypatch, airflow_db):  # noqa: F811 - the fixture imported above
    """An Airflow connection of type slurm to the test cluster (from the environment)."""
    conn_id = f"slurm_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", slurm.connection(job_root))
    return conn_id


@pytest.fixture(scope="session")
def deadline_probe(slurm, job_root):
    """A job that runs past its max_running_time (1 minute), submitted when the first slurm
    test starts: slurmctld checks time limits every 30 s, so Slurm's TIMEOUT comes 60 to 90 s
    after the start. Waiting for it here, alone, would cost that much; started early, the
    wait overlaps the other tests and test_timeout reads the result (the fixture is autouse)."""
    from dlc_airflow.naming import TaskIdentity, job_name
    from dlc_airflow.slurm.runner import SlurmRunner
    from dlc_airflow.spec import DLCJob

    runner = SlurmRunner(slurm.settings(job_root))
    identity = TaskIdentity("slurm_tests", "deadline", f"probe-{uuid.uuid4().hex[:6]}")
    job = DLCJob(type="custom", image="none", roles={"main": 1}, max_running_time=60,
                 shell="echo started; sleep 600")
    ref, _ = runner.submit(job, job_name("deadline", identity, 1), identity, 1)
    return runner, ref, time.monotonic()


@pytest.fixture(scope="session", autouse=True)
def _start_deadline_probe(request):
    request.getfixturevalue("deadline_probe")  # (skips, or fails in CI, with `slurm`)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/slurm/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slurm)
