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


def conn(monkeypatch, conn_id: str, policy) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "kubernetes", "extra": {} if policy is None else {"dlc_policy": policy}}))
    return conn_id


@pytest.fixture
def no_config(monkeypatch):
    monkeypatch.delenv("AIRFLOW__DLC_AIRFLOW__POLICY", raising=False)
    return monkeypatch


STRICT = {"host_paths": [{"prefix": "/mnt/datasets"}], "registries": ["registry.example.com/"], "max_replicas": 8,
          "storage_types": ["pvc", "host_path"]}


def test_a_connection_without_dlc_policy_under_a_strict_config_is_still_strict(no_config):
    from dlc_airflow.airflow.policy_source import load_policy

    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps(STRICT))
    for conn_id in (conn(no_config, "plain", None), "no-such-connection"):
        policy, source = load_policy(conn_id)
        assert policy.max_replicas == 8 and policy.registries == ["registry.example.com/"], source
        assert source == "the Airflow config [dlc_airflow] policy"
        with pytest.raises(PolicyError) as err:
            enforce(policy, job(storage=[host("/etc")]), source)
        assert str(err.value).startswith("refused by policy: storage[0].path") and source in str(err.value)


@pytest.mark.parametrize("widening,named", [
    ({"host_paths": [{"prefix": "/"}]}, "host_paths: host path prefix '/'"),
    ({"host_paths": [{"prefix": "/mnt/datasets/a", "writable": True}]}, "writable host path prefix"),
    ({"registries": ["docker.io/"]}, "registries: docker.io/"),
    ({"registries": None}, "registries: any"),
    ({"storage_types": ["nfs"]}, "storage_types: nfs"),
    ({"storage_types": None}, "storage_types: config_map"),
    ({"max_replicas": 100}, "max_replicas: 100 (the floor allows at most 8)"),
    ({"max_replicas": None}, "max_replicas: no limit"),
    ({"service_accounts": ["cluster-admin"]}, "service_accounts: cluster-admin"),
])
def test_a_connection_that_tries_to_widen_is_refused(no_config, widening, named):
    from dlc_airflow.airflow.policy_source import load_policy

    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps(STRICT))
    with pytest.raises(PolicyError) as err:
        load_policy(conn(no_config, "lax", widening))
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    assert message.startswith("refused by policy: connection 'lax' extra dlc_policy widens the Airflow config")
    assert named in message and "allow_connection_override" in message
    assert err.value.permanent


def test_a_connection_may_narrow_and_the_sources_say_both(no_config):
    from dlc_airflow.airflow.policy_source import load_policy

    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps(STRICT))
    policy, source = load_policy(conn(no_config, "narrow", {"max_replicas": 2, "registries": [
        "registry.example.com/ml/"], "host_paths": [{"prefix": "/mnt/datasets/imagenet"}]}))
    assert source == "the Airflow config [dlc_airflow] policy, narrowed by connection 'narrow' extra dlc_policy"
    assert policy.max_replicas == 2 and policy.storage_types == ["pvc", "host_path"]  # the rest: the config's
    with pytest.raises(PolicyError) as err:
        enforce(policy, job(roles={"worker": 3}), source)
    assert "dlc_policy.max_replicas" in str(err.value) and source in str(err.value)
    enforce(policy, job(storage=[host("/mnt/datasets/imagenet/train")]), source)
    # a string extra (the UI stores extras as text) is JSON too
    assert load_policy(conn(no_config, "textual", json.dumps({"max_gpus": 4})))[0].max_gpus == 4


def test_without_a_config_the_defaults_are_the_floor(no_config):
    from dlc_airflow.airflow.policy_source import load_policy

    policy, source = load_policy(None)
    assert policy == DEFAULT and "default policy" in source
    with pytest.raises(PolicyError, match="widens the default policy"):
        load_policy(conn(no_config, "lax", {"host_paths": [{"prefix": "/mnt"}]}))
    policy, source = load_policy(conn(no_config, "narrow", {"registries": ["registry.example.com/"]}))
    assert policy.registries == ["registry.example.com/"] and "narrowed by connection 'narrow'" in source


def test_the_config_may_delegate_to_connections(no_config):
    from dlc_airflow.airflow.policy_source import load_policy

    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({**STRICT, "allow_connection_override": True}))
    policy, source = load_policy(conn(no_config, "trusted", {"host_paths": [{"prefix": "/scratch", "writable": True}],
                                                             "max_replicas": 64}))
    assert policy.max_replicas == 64 and policy.host_paths[0].prefix == "/scratch"
    assert source == "connection 'trusted' extra dlc_policy (delegated by the Airflow config [dlc_airflow] policy)"
    # a connection cannot delegate to itself
    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps(STRICT))
    with pytest.raises(PolicyError, match="allow_connection_override: only the Airflow config"):
        load_policy(conn(no_config, "self", {"allow_connection_override": True}))


def test_invalid_policies_are_one_line_errors_naming_where(no_config):
    from dlc_airflow.airflow.policy_source import load_policy

    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", "{not json")
    with pytest.raises(PolicyError, match=r"\[dlc_airflow\] policy: not JSON"):
        load_policy(None)
    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", "{}")
    with pytest.raises(PolicyError, match=r"connection 'bad' extra dlc_policy: max_gpus"):
        load_policy(conn(no_config, "bad", {"max_gpus": "many"}))


def test_the_local_backend_allows_host_paths_by_default_but_the_admin_decides(no_config):
    from dlc_airflow.airflow.policy_source import policy_for
    from dlc_airflow.policy import local_replica_cap

    policy, source = policy_for("local", None)
    assert "local backend's default policy" in source
    enforce(policy, job(storage=[host("/tmp/out", read_only=False)]), source)  # a new user's first DAG
    enforce(policy, job(roles={"worker": local_replica_cap()}), source)
    with pytest.raises(PolicyError) as err:  # 100,000 processes on this host
        enforce(policy, job(roles={"worker": 100_000}), source)
    assert "100000 replicas (at most" in str(err.value) and "dlc_policy.max_replicas" in str(err.value)
    # the admin's explicit policy still applies, key by key
    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"host_paths": [{"prefix": "/data"}]}))
    policy, source = policy_for("local", None)
    assert policy.max_replicas == local_replica_cap()  # a key the admin did not set: the local default
    with pytest.raises(PolicyError, match="host path '/tmp/out'"):
        enforce(policy, job(storage=[host("/tmp/out")]), source)
    no_config.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", json.dumps({"max_replicas": 100_000}))  # raised by policy
    policy, source = policy_for("local", None)
    enforce(policy, job(roles={"worker": 100_000}), source)
    # a cluster backend keeps the safe defaults
    no_config.delenv("AIRFLOW__DLC_AIRFLOW__POLICY")
    policy, source = policy_for("native", conn(no_config, "k8s", None))
    with pytest.raises(PolicyError, match="host path '/tmp/out'"):
        enforce(policy, job(storage=[host("/tmp/out")]), source)


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
