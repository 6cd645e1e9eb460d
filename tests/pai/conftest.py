"""The pai backend's tests run the SDK's real client against a local STAND-IN for the DLC
API (tests/support/dlc_standin.py): the managed service cannot be reached from here."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.airflow.conftest import airflow_db, dag_files  # noqa: F401 - fixtures for the dag.test runs

pytest.importorskip("alibabacloud_pai_dlc20201203", reason="the pai extra is not installed (make install)")

AK, SECRET = "LTAI5tStandInKey01", "standin-secret-never-logged-4f9a"
STS_AK, STS_SECRET, STS_TOKEN = "STS.StandInTemp02", "sts-secret-never-logged-91c2", "sts-token-never-logged-77e1"
SECRETS = (SECRET, STS_SECRET, STS_TOKEN)
WORKSPACE = "ws-standin"
REGION = "cn-hangzhou"


@pytest.fixture(scope="session")
def standin():
    from tests.support.dlc_standin import DLCStandIn

    with DLCStandIn({AK: (SECRET, None), STS_AK: (STS_SECRET, STS_TOKEN)}, {WORKSPACE, "ws-other"},
                    region=REGION) as server:
        yield server
    assert not server.errors, f"the stand-in produced undocumented answers: {server.errors}"


def connection(standin, *, sts: bool = False, **extra) -> dict:
    login, password = (STS_AK, STS_SECRET) if sts else (AK, SECRET)
    extras = {"region_id": REGION, "workspace_id": WORKSPACE, "endpoint": standin.url, "poll_interval": 0.2,
              "resource_id": "quota-standin", **extra}
    if sts:
        extras["security_token"] = STS_TOKEN
    return {"conn_type": "dlc_pai", "login": login, "password": password, "extra": extras}


@pytest.fixture
def pai_conn(standin, monkeypatch):
    """An Airflow connection (from the environment) to the stand-in's workspace."""
    conn_id = f"pai_{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection(standin)))
    return conn_id


@pytest.fixture
def settings(standin):
    from types import SimpleNamespace

    from dlc_airflow.pai.settings import settings_from

    conn = connection(standin)
    return settings_from("pai_test", SimpleNamespace(login=conn["login"], password=conn["password"], host=None,
                                                     port=None, extra_dejson=conn["extra"]))


@pytest.fixture
def runner(settings):
    from dlc_airflow.pai.runner import PaiRunner

    return PaiRunner(settings)
