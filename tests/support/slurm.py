"""Which Slurm cluster the slurm tests run against, and helpers to look at it.

Order: DLC_TEST_SLURM_URL (+ DLC_TEST_SLURM_USER, DLC_TEST_SLURM_TOKEN_FILE: a user's own
cluster) > the local Slurm of scripts/slurm-local (its `env`), of the version
DLC_TEST_SLURM_VERSION names (22.05 by default, or 24.11). DLC_TEST_SLURM_API_VERSION pins the
OpenAPI version the tests' connections speak (default: the newest the daemon serves). Outside
CI a cluster that is not serving skips the slurm tests with the reason; with CI=true it fails them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.client import SlurmClient, SlurmError
from dlc_airflow.slurm.settings import SlurmSettings

REPO = Path(__file__).resolve().parents[2]
SLURM_LOCAL = REPO / "scripts" / "slurm-local"
_LIVE = {"PENDING", "RUNNING", "SUSPENDED", ""}


class SlurmUnavailable(Exception):
    pass


def local_command() -> list[str]:
    """scripts/slurm-local for the version the tests run against."""
    version = os.environ.get("DLC_TEST_SLURM_VERSION")
    return [str(SLURM_LOCAL), *(["--version", version] if version else [])]


API_VERSION = os.environ.get("DLC_TEST_SLURM_API_VERSION") or None


@dataclass
class TestSlurm:
    url: str
    user: str
    token_file: str
    source: str
    # how the cluster preempts: "partition" (the spot partition is below debug) or "qos" (the
    # urgent QOS preempts the spot QOS: slurmdbd keeps them)
    preempt_by: str = "partition"

    def settings(self, job_root: str | Path, **changes) -> SlurmSettings:
        base = SlurmSettings(conn_id="test", url=self.url, user=self.user, token_file=self.token_file,
                             job_root=str(job_root), poll_interval=0.5, api_version=API_VERSION)
        return dataclasses.replace(base, **changes)

    def connection(self, job_root: str | Path, **extra) -> str:
        """An AIRFLOW_CONN_* value (JSON) for a slurm connection to this cluster."""
        pinned = {"api_version": API_VERSION} if API_VERSION else {}
        return json.dumps({"conn_type": "slurm", "host": self.url, "login": self.user,
                           "extra": {"token_file": self.token_file, "job_root": str(job_root),
                                     "poll_interval": 0.5, **pinned, **extra}})

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """scontrol of the local Slurm (of its version), as an admin on the cluster would run it."""
        return subprocess.run([*local_command(), "run", "scontrol", *args], capture_output=True, text=True,
                              timeout=60, check=check)

    def client(self) -> SlurmClient:
        return SlurmClient(self.settings("/tmp"))

    def jobs(self, name: str | None = None, prefix: str | None = None) -> list[JobRecord]:
        records = self.client().jobs()
        return [r for r in records if (name is None or r.name == name) and (prefix is None or r.name.startswith(prefix))]

    def live(self, name: str | None = None, prefix: str | None = None) -> list[JobRecord]:
        return [r for r in self.jobs(name, prefix) if r.state in _LIVE]

    def cancel_ours(self) -> None:
        client = self.client()
        for record in client.jobs():
            if record.state in _LIVE and record.comment.startswith("dlc-airflow:"):
                client.cancel(record.job_id)


def acquire_slurm() -> TestSlurm:
    if os.environ.get("DLC_TEST_SLURM_URL"):
        found = TestSlurm(os.environ["DLC_TEST_SLURM_URL"], os.environ.get("DLC_TEST_SLURM_USER", "root"),
                          os.environ.get("DLC_TEST_SLURM_TOKEN_FILE", ""), "DLC_TEST_SLURM_URL",
                          os.environ.get("DLC_TEST_SLURM_PREEMPT_BY", "partition"))
        _ping(found)
        return found
    try:
        done = subprocess.run([*local_command(), "env"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"{SLURM_LOCAL} env failed: {exc}") from None
    env = dict(re.findall(r"^export (\w+)=(.*)$", done.stdout, re.M))
    if done.returncode != 0 or "DLC_SLURM_URL" not in env:
        raise SlurmUnavailable(f"the local Slurm is not set up ({done.stderr.strip()}): run scripts/slurm-local up")
    found = TestSlurm(env["DLC_SLURM_URL"], env["DLC_SLURM_USER"], env["DLC_SLURM_TOKEN_FILE"], "scripts/slurm-local",
                      env.get("DLC_SLURM_PREEMPT_BY", "partition"))
    try:
        _ping(found)
    except SlurmUnavailable as exc:
        if "credentials" not in str(exc):
            raise
        subprocess.run([*local_command(), "token"], capture_output=True, timeout=60, check=False)  # expired: mint
        _ping(found)
    return found


def _ping(found: TestSlurm) -> None:
    try:
        found.client().ping()
    except SlurmError as exc:
        raise SlurmUnavailable(f"Slurm ({found.source}) is not serving: {exc}") from None


def wait_for(predicate, timeout: float, what: str, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def slurm_or_skip() -> TestSlurm:
    """The test Slurm; without one the test skips with the reason (fails under CI=true: CI
    starts the local Slurm in `make test`)."""
    import pytest

    try:
        return acquire_slurm()
    except SlurmUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"CI=true and Slurm is not serving: {exc}", pytrace=False)
        pytest.skip(str(exc))
