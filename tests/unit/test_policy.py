"""The admin's policy (dlc_airflow.policy, pure) and where it is read from
(dlc_airflow.airflow.policy_source: the connection's extra, the Airflow config), and the
choice of backend when a task names none (dlc_airflow.airflow.runners.choose_backend)."""

from __future__ import annotations

import json

import pytest

from dlc_airflow.policy import DEFAULT, PolicyError, enforce, parse_policy
from dlc_airflow.spec import DLCJob

SOURCE = "connection 'k8s' extra dlc_policy"


def job(**overrides) -> DLCJob:
    spec = {"type": "pytorch", "image": "registry.example.com/ml/train:1", "command": ["train"],
            "roles": {"worker": 2}}
    spec.update(overrides)
    return DLCJob.model_validate(spec)


def host(path: str, read_only: bool = True) -> dict:
    return {"type": "host_path", "path": path, "mount_path": "/host", "read_only": read_only}


ALLOWING = parse_policy({
    "host_paths": [{"prefix": "/mnt/datasets"}, {"prefix": "/scratch", "writable": True}],
    "service_accounts": ["trainer"],
    "storage_types": ["pvc", "host_path", "empty_dir"],
    "registries": ["registry.example.com/ml/"],
    "max_replicas": 8,
    "max_gpus": 16,
}, SOURCE)


# (policy, job overrides, field named, policy key named)
REFUSED = [
    (DEFAULT, {"storage": [host("/")]}, "storage[0].path", "dlc_policy.host_paths"),
    (DEFAULT, {"storage": [host("/", read_only=False)]}, "storage[0].path", "dlc_policy.host_paths"),
    (DEFAULT, {"storage": [host("/var/run/docker.sock")]}, "storage[0].path", "dlc_policy.host_paths"),
    (DEFAULT, {"storage": [host("/etc")]}, "storage[0].path", "dlc_policy.host_paths"),
    (ALLOWING, {"storage": [host("/mnt/datasets-evil")]}, "storage[0].path", "dlc_policy.host_paths"),
    (ALLOWING, {"storage": [host("/mnt")]}, "storage[0].path", "dlc_policy.host_paths"),
    (ALLOWING, {"storage": [host("/mnt/datasets2/x")]}, "storage[0].path", "host_paths"),
    (ALLOWING, {"storage": [host("//etc")]}, "storage[0].path", "host_paths"),
    (ALLOWING, {"storage": [host("/scratch2")]}, "storage[0].path", "host_paths"),
    (ALLOWING, {"storage": [host("/mnt/datasets/a", read_only=False)]}, "storage[0].read_only", "writable"),
    (ALLOWING, {"storage": [{"type": "nfs", "server": "nas", "path": "/x", "mount_path": "/d"}]},
     "storage[0]", "dlc_policy.storage_types"),
    (ALLOWING, {"storage": [{"type": "secret", "name": "s", "mount_path": "/s"}]},
     "storage[0]", "dlc_policy.storage_types"),
    (DEFAULT, {"scheduling": {"service_account": "cluster-admin"}}, "scheduling.service_account",
     "dlc_policy.service_accounts"),
    (ALLOWING, {"scheduling": {"service_account": "admin"}}, "scheduling.service_account",
     "dlc_policy.service_accounts"),
    (ALLOWING, {"image": "docker.io/library/python:3.11"}, "image", "dlc_policy.registries"),
    (ALLOWING, {"image": "registry.example.com/other/train:1"}, "image", "dlc_policy.registries"),
    (ALLOWING, {"roles": {"worker": {"replicas": 1, "image": "evil.example.com/x:1"}}},
     "roles.worker.image", "dlc_policy.registries"),
    (ALLOWING, {"code": {"repo": "https://git.example.com/a.git"}}, "code.image", "dlc_policy.registries"),
    (ALLOWING, {"roles": {"master": 1, "worker": 8}}, "roles", "dlc_policy.max_replicas"),
    (ALLOWING, {"roles": {"worker": 4}, "resources": {"gpu": 8}}, "resources.gpu", "dlc_policy.max_gpus"),
    (ALLOWING, {"roles": {"master": {"replicas": 1, "resources": {"gpu": 8}}, "worker": {"replicas": 2,
                "resources": {"gpu": 8}}}}, "resources.gpu", "dlc_policy.max_gpus"),
]


@pytest.mark.parametrize("policy,overrides,field,key", REFUSED)
def test_refused_by_the_policy(policy, overrides, field, key):
    with pytest.raises(PolicyError) as err:
        enforce(policy, job(**overrides), SOURCE)
    message = str(err.value)
    assert "\n" not in message and field in message and key in message and SOURCE in message
    assert err.value.permanent


ALLOWED = [
    (DEFAULT, {}),
    (DEFAULT, {"scheduling": {"service_account": "default"}}),
    (DEFAULT, {"storage": [{"type": "pvc", "claim_name": "data", "mount_path": "/data"}]}),
    (ALLOWING, {"storage": [host("/mnt/datasets")]}),
    (ALLOWING, {"storage": [host("/mnt/datasets/imagenet/train")]}),
    (ALLOWING, {"storage": [host("/scratch/me", read_only=False)]}),
    (ALLOWING, {"scheduling": {"service_account": "trainer"}}),
    (ALLOWING, {"roles": {"worker": 8}, "resources": {"gpu": 2}}),
]


@pytest.mark.parametrize("policy,overrides", ALLOWED)
def test_allowed_by_the_policy(policy, overrides):
    enforce(policy, job(**overrides), SOURCE)


@pytest.mark.parametrize("raw,named", [
    ({"host_paths": [{"prefix": "relative/path"}]}, "host_paths.0.prefix"),
    ({"host_paths": ["/mnt"]}, "host_paths.0"),
    ({"storage_types": ["tmpfs"]}, "storage_types"),
    ({"max_replicas": 0}, "max_replicas"),
    ({"max_gpus": -1}, "max_gpus"),
    ({"hostpaths": []}, "hostpaths"),
])
def test_an_invalid_policy_is_a_one_line_error_naming_the_key(raw, named):
    with pytest.raises(PolicyError) as err:
        parse_policy(raw, SOURCE)
    assert "\n" not in str(err.value) and named in str(err.value) and SOURCE in str(err.value)


def test_the_policy_comes_from_the_connection_then_the_config(monkeypatch):
    from dlc_airflow.airflow.policy_source import load_policy

    monkeypatch.setenv("AIRFLOW_CONN_POLICED", json.dumps(
        {"conn_type": "kubernetes", "extra": {"dlc_policy": {"service_accounts": ["trainer"]}}}))
    policy, source = load_policy("policed")
    assert policy.service_accounts == ["trainer"] and source == "connection 'policed' extra dlc_policy"
    # a string extra (the UI stores extras as text) is JSON too
    monkeypatch.setenv("AIRFLOW_CONN_TEXTUAL", json.dumps(
        {"conn_type": "kubernetes", "extra": {"dlc_policy": json.dumps({"max_gpus": 4})}}))
    assert load_policy("textual")[0].max_gpus == 4
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"max_replicas": 3}))
    policy, source = load_policy(None)  # the local backend: the config
    assert policy.max_replicas == 3 and "[dlc_airflow] policy" in source
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", "{not json")
    with pytest.raises(PolicyError, match=r"\[dlc_airflow\] policy: not JSON"):
        load_policy(None)
    monkeypatch.delenv("AIRFLOW__DLC_AIRFLOW__POLICY")
    policy, source = load_policy("no-such-connection")
    assert policy == DEFAULT and "default policy" in source


# -- which backend a task runs on --------------------------------------------------------


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """A host with no cluster configured at all."""
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "AIRFLOW_CONN_KUBERNETES_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config


def test_local_only_when_nothing_is_configured(no_cluster):
    from dlc_airflow.airflow.runners import choose_backend

    backend, conn, why = choose_backend(None, None)
    assert backend == "local" and "no cluster is configured" in why


def test_a_named_connection_that_does_not_exist_is_an_error(no_cluster):
    from dlc_airflow.airflow.runners import NoSuchConnection, choose_backend

    for backend in (None, "native"):
        with pytest.raises(NoSuchConnection, match="connection 'k8s-typo' does not exist"):
            choose_backend(backend, "k8s-typo")


def test_a_cluster_is_chosen_when_one_is_configured(no_cluster, monkeypatch, tmp_path):
    from dlc_airflow.airflow.runners import choose_backend

    monkeypatch.setenv("AIRFLOW_CONN_MINE", json.dumps({"conn_type": "kubernetes"}))
    assert choose_backend(None, "mine")[:2] == ("native", "mine")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "config"))
    backend, conn, why = choose_backend(None, None)
    assert (backend, conn) == ("native", "kubernetes_default") and "kubeconfig" in why
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert "in a Kubernetes pod" in choose_backend(None, None)[2]


@pytest.mark.parametrize("name", ["Local", "NATIVE", "k8s", "slurmm", ""])
def test_unknown_backends_list_every_backend(name):
    from dlc_airflow.airflow.runners import choose_backend
    from dlc_airflow.errors import BackendError

    with pytest.raises(BackendError) as err:
        choose_backend(name or " ", None)
    assert "local" in str(err.value) and "native" in str(err.value) and "\n" not in str(err.value)
