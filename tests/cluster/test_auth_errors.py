"""401 and 403 against the real API server: a real denial fails fast-ish as AuthError naming
the identity, verb and resource; a bad token is a 401 AuthError; and the refusals of an API
server that has just restarted (its RBAC caches cold) are retried, not failed for good. The
fault proxy makes the transient cases deterministic (it refuses the first N requests)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid

import pytest

from dlc_airflow.k8s.errors import AdmissionDenied, AuthError, Forbidden, KubeError, Unauthorized
from dlc_airflow.k8s.kinds import CONFIG_MAP, JOB, NAMESPACE, SECRET
from tests.support.cluster import K8S_LOCAL, SA_NAME, SA_NAMESPACE

SA = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"


def config_map(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def refused(call) -> tuple[KubeError, float]:
    start = time.monotonic()
    with pytest.raises(KubeError) as exc:
        call()
    return exc.value, time.monotonic() - start


def test_a_verb_the_role_does_not_grant_fails_fast_naming_identity_verb_and_resource(cluster, namespace):
    kube = cluster.restricted(namespace, connection="dlc_test_conn")
    # the Role may create and delete Secrets (a job's env from Airflow sources), never read them
    err, took = refused(lambda: kube.list(SECRET))
    assert isinstance(err, Forbidden) and isinstance(err, AuthError)
    assert (err.status, err.verb, err.resource, err.namespace) == (403, "list", "secrets", namespace)
    assert err.identity == SA and err.server == kube.server and err.connection == "dlc_test_conn"
    assert took < 5, f"a confirmed denial took {took:.1f} s"
    text = str(err)
    assert text.startswith(f"connection 'dlc_test_conn': ServiceAccount {SA_NAMESPACE}/{SA_NAME} may not "
                           f"list secrets in namespace '{namespace}' on {kube.server} (403 Forbidden; "
                           "an access review agrees, ")
    assert len(text) <= 300 and text.count(SA_NAME) == 1, text

    # a cluster-scoped verb, and a verb the Role lacks on a resource it grants others on
    err, took = refused(lambda: kube.delete(NAMESPACE, namespace))
    assert isinstance(err, Forbidden) and (err.verb, err.resource) == ("delete", f"namespaces '{namespace}'")
    assert took < 5
    kube.create(config_map("cm"))
    err, _ = refused(lambda: kube.patch(CONFIG_MAP, "cm", {"data": {"k": "w"}}))
    assert isinstance(err, Forbidden) and (err.verb, err.resource) == ("patch", "configmaps 'cm'")
    # a watch (a stream, never retried for 5xx) is told apart all the same
    err, _ = refused(lambda: next(kube.watch(SECRET, resource_version="0", timeout_seconds=5)))
    assert isinstance(err, Forbidden) and err.verb == "watch" and err.identity == SA
    # and the client says what it may do
    assert kube.may("create", JOB) and not kube.may("get", SECRET)
    assert kube.whoami()["username"] == SA


def test_a_bad_token_is_a_401_auth_error_naming_what_the_token_claims(cluster, namespace):
    kube = cluster.restricted(namespace)
    token = cluster.token()
    forged = token[:-6] + ("AAAAAA" if not token.endswith("AAAAAA") else "BBBBBB")  # same claims, bad signature
    kube.api.configuration.api_key = {"BearerToken": forged, "authorization": forged}
    err, took = refused(lambda: kube.list(JOB))
    assert isinstance(err, Unauthorized) and isinstance(err, AuthError)
    assert (err.status, err.verb, err.resource, err.namespace) == (401, "list", "jobs.batch", namespace)
    assert err.identity == SA  # the token's own subject: the server will not say who a bad token is
    assert took < 5, f"a confirmed 401 took {took:.1f} s"
    assert f"does not accept the credentials of ServiceAccount {SA_NAMESPACE}/{SA_NAME}" in str(err)
    assert "Fix: renew them in the connection's kubeconfig" in str(err) and len(str(err)) <= 300
    kube.api.configuration.api_key = {"BearerToken": "not-a-jwt", "authorization": "not-a-jwt"}
    err, _ = refused(lambda: kube.get(JOB, "x"))
    assert isinstance(err, Unauthorized) and err.identity == "" and "these credentials" in str(err)


def test_the_hook_names_its_connection(cluster, namespace, tmp_path):
    from dlc_airflow.airflow.hook import DLCHook
    from tests.airflow.conftest import restricted_kubeconfig

    kubeconfig = restricted_kubeconfig(cluster, namespace, tmp_path / "kc.json")
    client = DLCHook("dlc_auth", extras={"kube_config_path": str(kubeconfig)}).get_client()
    err, _ = refused(lambda: client.list(SECRET))
    assert isinstance(err, Forbidden) and str(err).startswith(f"connection 'dlc_auth': ServiceAccount {SA_NAMESPACE}")
    ok, message = DLCHook("dlc_auth", extras={"kube_config_path": str(kubeconfig)}).test_connection()
    assert ok and SA in message


# -- transient refusals: deterministic, through the fault proxy ----------------------------
RBAC_MESSAGE = (f'configmaps is forbidden: User "{SA}" cannot create resource "configmaps" in API group "" '
                'in the namespace "{ns}"')


def test_transient_403s_are_retried_once_the_access_review_says_allowed(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file)
        proxy.set(error_status=403, error_count=3, path_contains="/configmaps",
                  error_message=RBAC_MESSAGE.format(ns=namespace))
        kube.create(config_map("after-403"))
        assert proxy.injected == 3 and kube.transient_auth_failures == 1
        assert all("/configmaps" in line for line in proxy.refused)


def test_403s_while_the_authorizer_refuses_even_the_review_are_retried(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file)
        # what a restarted API server does for ~2 s: everything 403, the review and /readyz too
        proxy.set(error_status=403, error_count=9)
        kube.create(config_map("after-cold-rbac"))
        assert proxy.injected == 9 and kube.transient_auth_failures == 1
        assert any("selfsubjectaccessreviews" in line for line in proxy.refused)
        assert any("/readyz" in line for line in proxy.refused)


def test_transient_401s_are_retried(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file)
        proxy.set(error_status=401, error_count=4)
        assert kube.list(JOB)[0] == []
        assert proxy.injected == 4 and kube.transient_auth_failures == 1


def test_a_403_that_outlasts_the_budget_is_raised(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file, auth_retry_budget=2.0)
        proxy.set(error_status=403, error_count=1000, path_contains="/configmaps",
                  error_message=RBAC_MESSAGE.format(ns=namespace))
        err, took = refused(lambda: kube.create(config_map("never")))
        assert isinstance(err, Forbidden) and err.identity == SA and err.verb == "create"
        assert 2.0 <= took < 4.0 and "still refused after" in str(err)


def test_admission_refusals_are_not_auth_errors(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file)
        proxy.set(error_status=403, error_count=1000, path_contains="/configmaps", error_message=(
            'configmaps "quota" is forbidden: exceeded quota: cms, requested: count/configmaps=1, used: '
            "count/configmaps=5, limited: count/configmaps=5"))
        err, took = refused(lambda: kube.create(config_map("quota")))
        assert isinstance(err, AdmissionDenied) and not isinstance(err, AuthError)
        assert err.identity == SA and took < 5
        assert "was refused by admission" in str(err) and "exceeded quota" in str(err)


# -- the real thing: an API server restart ------------------------------------------------
def test_allowed_calls_survive_the_refusals_of_a_restarting_api_server(cluster, namespace):
    if not cluster.local_workdir:
        pytest.skip("restarting kube-apiserver needs the local control plane")
    # While it is down, calls fail to connect (status 0) or get 5xx: the ordinary retries,
    # which here the loop does itself, quickly, so that calls are in flight in the ~2 s after
    # it listens again, when its RBAC caches are cold and everything but system:masters gets
    # 403 (its /readyz too). Those must be retried by the client, never raised.
    kube = cluster.restricted(namespace, retries=0)
    failures: list[BaseException] = []
    calls = {"ok": 0, "down": 0}
    stop = threading.Event()

    def hammer(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                if n % 3 == 0:
                    kube.create(config_map(f"cm-{i}-{n}-{uuid.uuid4().hex[:6]}"))
                else:
                    kube.list(JOB)
                calls["ok"] += 1
            except AuthError as exc:
                failures.append(exc)
                return
            except KubeError as exc:
                if exc.status not in (0, 500, 502, 503, 504):
                    failures.append(exc)
                    return
                calls["down"] += 1
            time.sleep(0.02)

    # Whether a call lands in the cold-cache window depends on the server's timing, so up
    # to three restarts are tried; the retry logic itself is pinned deterministically by the
    # fault-proxy tests above. What must hold every time: no allowed call fails.
    for _round in range(3):
        stop.clear()
        threads = [threading.Thread(target=hammer, args=(i,), daemon=True) for i in range(6)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        subprocess.run([str(K8S_LOCAL), "restart-apiserver"], check=True, timeout=180)
        # right after the restart: allowed calls as the restricted identity, at once
        after = cluster.restricted(namespace)
        after.create(config_map(f"right-after-{uuid.uuid4().hex[:6]}"))
        assert after.list(CONFIG_MAP)[0]
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(60)
        assert not failures, f"calls failed across the restart: {failures[0]}"
        if kube.transient_auth_failures:
            break
    assert calls["ok"] > 0 and calls["down"] > 0
    print(json.dumps({**calls, "transient_auth_failures": kube.transient_auth_failures}))
