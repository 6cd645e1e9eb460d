"""The subjects of the conformance suite: one runner per backend, each with a job that ends
by itself within seconds and one that runs until it is stopped.

    fake     tests/support/fake_runner.py (in memory; what the lifecycle's unit tests use)
    local    LocalRunner in a fresh job root (real processes)
    slurm    SlurmRunner against the real local Slurm (scripts/slurm-local)
    pai      PaiRunner through the official SDK against the strict DLC stand-in
    native   KubeRunner on the local control plane (kwok pods)

A subject whose system is not there skips (or fails under CI=true), as its own tests do.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from dlc_airflow.jobref import JobRef
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.runner import EventSource, JobRunner, SecretReader, Settler, SpecKeeper
from dlc_airflow.spec import DLCJob

SUBJECTS = ["fake", "local", "slurm", "pai", "native"]


@dataclass
class Subject:
    """A runner under test, and the jobs the contract's tests submit to it."""

    name: str
    runner: JobRunner
    short: Callable[[], DLCJob]  # ends by itself, succeeded, within seconds; says HELLO in its log
    long: Callable[[], DLCJob]  # runs until stopped
    capabilities: frozenset[type]  # the optional protocols this backend implements
    timeout: float = 90.0  # how long a short job may take to end
    # where the backend routes a job itself (Slurm: the partition slurmctld chose), its ref's
    # place may differ from the runner's
    routes: bool = False
    # the backend keeps its record of an ended job after delete, until it forgets it (Slurm:
    # MinJobAge); delete removes everything else
    keeps_records: bool = False
    made: list[JobRef] = field(default_factory=list)

    def identity(self, task: str = "train") -> TaskIdentity:
        return TaskIdentity("conformance", f"{task}_{self.name}", f"run-{uuid.uuid4().hex[:8]}")


def _python(seconds: float, say: str = "HELLO") -> list[str]:
    return [sys.executable, "-c", f"import time; print({say!r}, flush=True); time.sleep({seconds})"]


def _fake(request, tmp_path) -> Subject:
    from tests.support.fake_runner import RUN_FOR, SAYS, FakeRunner

    runner = FakeRunner()

    def short() -> DLCJob:
        return DLCJob(type="batch", image="none", command=["run"], roles={"worker": 1}, annotations={RUN_FOR: "0.2", SAYS: "HELLO"})

    def long() -> DLCJob:
        return DLCJob(type="batch", image="none", command=["run"], roles={"worker": 1})

    return Subject("fake", runner, short, long, frozenset({EventSource, Settler, SpecKeeper}))


def _local(request, tmp_path) -> Subject:
    from dlc_airflow.local.runner import LocalRunner

    runner = LocalRunner(str(tmp_path / "jobs"))
    runner.folders.grace_seconds = 2.0
    return Subject("local", runner,
                   lambda: DLCJob(type="batch", image="local", command=_python(0.2), roles={"worker": 1}),
                   lambda: DLCJob(type="batch", image="local", command=_python(600), roles={"worker": 1}),
                   frozenset({SpecKeeper, SecretReader}), timeout=60)


def _slurm(request, tmp_path) -> Subject:
    from dlc_airflow.slurm.runner import SlurmRunner
    from tests.support.slurm import slurm_or_skip

    slurm = slurm_or_skip()
    runner = SlurmRunner(slurm.settings(tmp_path / "slurm-jobs"))
    return Subject("slurm", runner,
                   lambda: DLCJob(type="batch", image="none", command=_python(0.2), roles={"worker": 1}),
                   lambda: DLCJob(type="batch", image="none", command=_python(600), roles={"worker": 1}),
                   frozenset({SpecKeeper}), timeout=120, routes=True, keeps_records=True)


def _pai(request, tmp_path) -> Subject:
    pytest.importorskip("alibabacloud_pai_dlc20201203", reason="the pai extra is not installed (make install)")
    from types import SimpleNamespace

    from dlc_airflow.pai.runner import PaiRunner
    from dlc_airflow.pai.settings import settings_from
    from tests.pai.conftest import AK, REGION, SECRET, WORKSPACE
    from tests.support.dlc_standin import DLCStandIn

    server = DLCStandIn({AK: (SECRET, None)}, {WORKSPACE}, region=REGION)
    server.__enter__()
    request.addfinalizer(lambda: server.__exit__(None, None, None))
    extras = {"region_id": REGION, "workspace_id": WORKSPACE, "endpoint": server.url, "poll_interval": 0.2,
              "resource_id": "quota-standin"}
    settings = settings_from("pai_conformance", SimpleNamespace(login=AK, password=SECRET, host=None, port=None,
                                                                extra_dejson=extras))

    def job(seconds: str) -> DLCJob:
        return DLCJob(type="pytorch", image="registry.example.com/train:1", command=["python", "train.py"],
                      roles={"master": 1, "worker": 1}, resources={"cpu": "2", "memory": "8Gi"},
                      env={"STANDIN_RUN_SECONDS": seconds, "STANDIN_LOG": "HELLO"})

    return Subject("pai", PaiRunner(settings), lambda: job("1"), lambda: job("600"), frozenset({EventSource}),
                   timeout=60)


def _native(request, tmp_path) -> Subject:
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.runner import KubeRunner
    from tests.cluster.specs import COMMAND, IMAGE, RUN_FOR

    kube = request.getfixturevalue("kube")

    def job(run_for: str) -> DLCJob:
        return DLCJob(type="batch", image=IMAGE, command=list(COMMAND), roles={"worker": 1},
                      annotations={RUN_FOR: run_for})

    return Subject("native", KubeRunner(kube, get_backend("native")), lambda: job("2s"), lambda: job("600s"),
                   frozenset({EventSource, Settler, SpecKeeper, SecretReader}))


MAKERS = {"fake": _fake, "local": _local, "slurm": _slurm, "pai": _pai, "native": _native}


@pytest.fixture(params=SUBJECTS)
def subject(request, tmp_path) -> Iterator[Subject]:
    made = MAKERS[request.param](request, tmp_path)
    yield made
    for ref in made.made:  # nothing a test made keeps running
        try:
            made.runner.delete(ref)
        except Exception as exc:  # noqa: BLE001 - a failed cleanup must not hide the test's result
            print(f"could not delete {ref.name}: {json.dumps(str(exc))}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/conformance/" in str(item.fspath).replace("\\", "/") and "[native" in item.nodeid:
            item.add_marker(pytest.mark.cluster)
        if "tests/conformance/" in str(item.fspath).replace("\\", "/") and "[slurm" in item.nodeid:
            item.add_marker(pytest.mark.slurm)
