"""The registry: every backend by name, what the code around it asks of it, and its runner."""

from __future__ import annotations

import argparse

import pytest

from dlc_airflow.errors import BackendError
from dlc_airflow.registry import ALL_BACKENDS, ENTRIES, entry, has_connection, is_folder, pure_backend


def test_every_backend_has_a_pure_half_of_its_own_name():
    for name in ALL_BACKENDS:
        backend = pure_backend(name)
        assert backend.name == name and backend.job_types, name


def test_every_backend_has_a_runner_factory_that_builds_its_runner(tmp_path):
    from dlc_airflow.runner import Reach

    assert all(callable(e.runner) for e in ENTRIES.values())
    # the one that needs no connection builds here: a runner of its own backend and place
    runner = entry("local").runner(Reach("", local_root=str(tmp_path)))
    assert runner.backend_name == "local" and runner.place == str(tmp_path)


def test_the_default_connection_ids_agree_with_the_backends_own():
    from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
    from dlc_airflow.pai import settings as pai_settings
    from dlc_airflow.slurm import runner as slurm_runner

    assert entry("slurm").default_conn_id == slurm_runner.DEFAULT_CONN_ID
    assert entry("pai").default_conn_id == pai_settings.DEFAULT_CONN_ID
    assert {entry(n).default_conn_id for n in ALL_BACKENDS if entry(n).kubernetes} == {DEFAULT_CONN_ID}


def test_only_local_lives_in_a_folder_without_a_connection():
    assert [n for n in ALL_BACKENDS if is_folder(n)] == ["local"]
    assert [n for n in ALL_BACKENDS if not has_connection(n)] == ["local"]


@pytest.mark.parametrize("ask", [has_connection, is_folder, entry])
def test_an_unknown_backend_is_an_error_naming_the_choices(ask):
    with pytest.raises(BackendError, match=r"unknown backend 'Local' \(did you mean 'local'\?\): choose one of"):
        ask("Local")


def test_the_jobs_cli_looks_at_every_configured_backend(monkeypatch, tmp_path):
    """No --backend: the cluster's backends when one is configured, local when asked by
    --local-root, and slurm / pai when their default connection exists."""
    from dlc_airflow import jobs_cli
    from dlc_airflow.airflow import runners

    made: list[tuple[str, str]] = []
    existing = {"slurm_default"}
    monkeypatch.setattr(runners, "connection_exists", lambda conn_id: conn_id in existing)
    monkeypatch.setattr(runners, "make_runner", lambda name, conn_id, *a, **k: made.append((name, conn_id)))

    def looked_at(**given):
        made.clear()
        jobs_cli.runners(argparse.Namespace(**{"backend": None, "conn_id": None, "namespace": None,
                                              "local_root": None, **given}))
        return list(made)

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))  # a cluster is configured
    kube = [(n, "kubernetes_default") for n in ALL_BACKENDS if entry(n).kubernetes]
    assert looked_at() == [*kube, ("slurm", "slurm_default")]
    assert looked_at(local_root=str(tmp_path)) == [*kube, ("local", ""), ("slurm", "slurm_default")]
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config: no cluster at all
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    existing.add("pai_default")
    assert looked_at() == [("local", ""), ("pai", "pai_default"), ("slurm", "slurm_default")]
    assert looked_at(backend="slurm") == [("slurm", "slurm_default")]
