"""Auth and configuration errors: what the authorizer is asked, who is named, and the one-line
messages (no cluster needed: kubernetes.config really loads, and fails on, the files made here)."""

from __future__ import annotations

import base64
import json

import pytest

from dlc_airflow.k8s.errors import (
    AuthError,
    Forbidden,
    KubeConfigError,
    KubeError,
    Unauthorized,
    api_error,
    config_error,
    credential_identity,
    describe_identity,
    identity_from_message,
    token_subject,
)
from dlc_airflow.k8s.kinds import describe_resource, request_attributes
from dlc_airflow.k8s.transport import access_review

SA = "system:serviceaccount:dlc-system:dlc-airflow"
RBAC_403 = json.dumps({
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
    "message": f'secrets is forbidden: User "{SA}" cannot create resource "secrets" in API group "" '
               'in the namespace "t-1"'})


@pytest.mark.parametrize("method, path, query, expected", [
    ("POST", "/api/v1/namespaces/t-1/secrets", None,
     {"verb": "create", "group": "", "version": "v1", "resource": "secrets", "namespace": "t-1"}),
    ("GET", "/apis/batch/v1/namespaces/t-1/jobs", None,
     {"verb": "list", "group": "batch", "version": "v1", "resource": "jobs", "namespace": "t-1"}),
    ("GET", "/apis/batch/v1/namespaces/t-1/jobs", {"watch": "true"},
     {"verb": "watch", "group": "batch", "version": "v1", "resource": "jobs", "namespace": "t-1"}),
    ("GET", "/api/v1/namespaces/t-1/pods/p-0/log", {"container": "main"},
     {"verb": "get", "group": "", "version": "v1", "resource": "pods", "subresource": "log", "name": "p-0",
      "namespace": "t-1"}),
    ("DELETE", "/api/v1/namespaces/t-1", None,
     {"verb": "delete", "group": "", "version": "v1", "resource": "namespaces", "name": "t-1", "namespace": "t-1"}),
    ("PUT", "/api/v1/namespaces/t-1/finalize", None,
     {"verb": "update", "group": "", "version": "v1", "resource": "namespaces", "subresource": "finalize",
      "name": "t-1", "namespace": "t-1"}),
    ("DELETE", "/apis/kubeflow.org/v1/namespaces/t-1/pytorchjobs", None,
     {"verb": "deletecollection", "group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs",
      "namespace": "t-1"}),
    ("PATCH", "/api/v1/nodes/cpu-0", None,
     {"verb": "patch", "group": "", "version": "v1", "resource": "nodes", "name": "cpu-0"}),
    ("GET", "/readyz", None, {"verb": "get", "nonResourceURL": "/readyz"}),
])
def test_request_attributes_are_what_the_authorizer_sees(method, path, query, expected):
    assert request_attributes(method, path, query) == expected


def test_resources_are_named_as_rbac_and_kubectl_name_them():
    assert describe_resource(request_attributes("GET", "/apis/batch/v1/namespaces/n/jobs")) == "jobs.batch"
    assert describe_resource(request_attributes("GET", "/api/v1/namespaces/n/pods/p/log")) == "pods/log 'p'"
    assert describe_resource(request_attributes("DELETE", "/api/v1/namespaces/n")) == "namespaces 'n'"
    assert describe_resource(request_attributes("GET", "/version")) == "/version"


def test_access_review_asks_for_the_same_verb_resource_and_namespace():
    review = access_review(request_attributes("GET", "/api/v1/namespaces/t-1/pods/p-0/log"))
    assert review["kind"] == "SelfSubjectAccessReview"
    assert review["spec"] == {"resourceAttributes": {"namespace": "t-1", "verb": "get", "version": "v1",
                                                     "resource": "pods", "subresource": "log", "name": "p-0"}}
    assert access_review(request_attributes("GET", "/readyz"))["spec"] == {
        "nonResourceAttributes": {"path": "/readyz", "verb": "get"}}


def test_status_codes_map_to_auth_errors():
    forbidden = api_error("POST /api/v1/namespaces/t-1/secrets", 403, RBAC_403)
    assert isinstance(forbidden, Forbidden) and isinstance(forbidden, AuthError) and isinstance(forbidden, KubeError)
    assert forbidden.status == 403 and forbidden.reason == "Forbidden"
    assert identity_from_message(forbidden.message) == SA
    unauthorized = api_error("GET /api/v1/namespaces/t-1/pods", 401, b'{"reason": "Unauthorized", "message": "Unauthorized"}')
    assert isinstance(unauthorized, Unauthorized) and unauthorized.status == 401


def test_identities_are_named_for_people():
    assert describe_identity(SA) == f"ServiceAccount dlc-system/dlc-airflow ({SA})"
    assert describe_identity("alice@example.com") == "user 'alice@example.com'"
    assert "anonymous" in describe_identity("system:anonymous")
    assert identity_from_message("forbidden: no user here") == ""


def jwt(claims: dict) -> str:
    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2ln"


def test_what_the_credentials_claim_when_the_server_will_not_say():
    from kubernetes import client

    assert token_subject(jwt({"sub": SA, "iss": "https://kubernetes.default.svc"})) == SA
    assert token_subject("not-a-jwt") == "" and token_subject("a.!!!.c") == ""
    cfg = client.Configuration()
    cfg.api_key = {"BearerToken": jwt({"sub": SA})}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    assert credential_identity(cfg) == SA
    cfg.api_key = {"authorization": "Bearer " + jwt({"sub": "oidc:alice"})}  # the pre-36 key, prefixed
    assert credential_identity(cfg) == "oidc:alice"
    assert credential_identity(client.Configuration()) == ""


def test_client_certificate_common_name_is_the_identity(tmp_path):
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    from kubernetes import client

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ops-bot"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ml-team")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    (tmp_path / "client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    cfg = client.Configuration()
    cfg.cert_file = str(tmp_path / "client.crt")
    assert credential_identity(cfg) == "ops-bot"


def forbidden(**overrides) -> Forbidden:
    err = api_error("POST /api/v1/namespaces/t-1/secrets", 403, RBAC_403)
    assert isinstance(err, Forbidden)
    err.verb, err.resource, err.namespace = "create", "secrets", "t-1"
    err.identity, err.server, err.connection = SA, "https://127.0.0.1:6443", "kubernetes_default"
    err.detail = "an access review agrees, 1.1 s"
    for key, value in overrides.items():
        setattr(err, key, value)
    return err


def once(text: str, *parts: str, limit: int = 300) -> None:
    """Each part is in the one-line message exactly once, and the message is short."""
    assert "\n" not in text and len(text) <= limit, (len(text), text)
    for part in parts:
        assert text.count(part) == 1, (part, text)


def test_forbidden_message_names_connection_identity_verb_resource_and_what_to_do():
    text = str(forbidden())
    assert text == ("connection 'kubernetes_default': ServiceAccount dlc-system/dlc-airflow may not create secrets "
                    "in namespace 't-1' on https://127.0.0.1:6443 (403 Forbidden; an access review agrees, 1.1 s). "
                    "Fix: a Role and RoleBinding granting it (see k8s/rbac/role.yaml), or another connection")
    once(text, "dlc-system/dlc-airflow", "create", "secrets", "'t-1'", "kubernetes_default", "Fix: ")
    # a cluster-scoped refusal names no namespace twice, and no connection when there is none
    text = str(forbidden(verb="delete", resource="namespaces 't-1'", namespace="t-1", connection=None))
    assert text.startswith("ServiceAccount dlc-system/dlc-airflow may not delete namespaces 't-1' on ")
    assert "in namespace" not in text
    # a long server URL, user name and a reason of the server's own (a webhook authorizer's) stay bounded
    text = str(forbidden(identity="oidc:" + "alice.example@" * 4 + "corp.example.com",
                         message="denied by the company's access webhook: " + "policy " * 40))
    assert "denied by the company's access webhook: policy policy" in text and text.count("alice.example@") == 4
    once(text, "create", "'t-1'", "Fix: ", limit=300 + 56 + 80)  # its identity's 56 characters, 80 of the server's


def test_unauthorized_message_names_the_credentials_and_how_to_renew_them():
    err = api_error("GET /apis/batch/v1/namespaces/t-1/jobs", 401, b'{"reason": "Unauthorized", "message": "Unauthorized"}')
    assert isinstance(err, Unauthorized)
    err.verb, err.resource, err.namespace = "list", "jobs.batch", "t-1"
    err.server, err.connection, err.identity = "https://10.0.0.1:443", "prod_k8s", SA
    err.detail = "the server is ready, 1.2 s"
    text = str(err)
    assert text == ("connection 'prod_k8s': the API server https://10.0.0.1:443 does not accept the credentials of "
                    "ServiceAccount dlc-system/dlc-airflow for list jobs.batch in namespace 't-1' (401 Unauthorized; "
                    "the server is ready, 1.2 s). Fix: renew them in the connection's kubeconfig (or the pod's "
                    "token, in_cluster)")
    once(text, "dlc-system/dlc-airflow", "list", "jobs.batch", "'t-1'", "prod_k8s", "Fix: ")
    err.identity = ""
    assert "the connection's credentials" in str(err)


@pytest.mark.parametrize("raised, source, expected", [
    ("Invalid kube-config file. No configuration found.", "default",
     ("connection 'kubernetes_default': no kubeconfig found (looked at /home/u/.kube/config) and not running in "
     "a Kubernetes pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set): set kube_config_path or "
     "kube_config in the connection extras, or in_cluster=true")),
    ("Invalid kube-config file. No configuration found.", "kube_config_path",
     ("connection 'kubernetes_default': no kubeconfig found (looked at /home/u/.kube/config): point "
     "kube_config_path at an existing kubeconfig")),
    ("Service host/port is not set.", "in_cluster",
     ("connection 'kubernetes_default': in_cluster=true but this process is not in a Kubernetes pod "
     "(KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set): run the task in a pod, or set "
     "kube_config_path or kube_config")),
    ("Service token file does not exist.", "in_cluster", "ServiceAccount credentials are missing"),
    ("Invalid kube-config file. Expected object with name prod in kube-config/contexts list", "kube_config_path",
     "context 'prod' is not in the kubeconfig (looked at /home/u/.kube/config): set cluster_context"),
    ("Invalid kube-config file. Expected key current-context in kube-config", "kube_config_path",
     "has no current-context: set cluster_context"),
    ("cmd-path: process returned 1\nCmd: aws eks get-token\nStderr: expired", "kube_config_path",
     ("cannot load the Kubernetes configuration from kube_config_path (looked at /home/u/.kube/config): "
     "cmd-path: process returned 1 Cmd: aws eks get-token Stderr: expired")),
])
def test_configuration_errors_are_one_line_naming_the_connection_and_what_to_set(raised, source, expected):
    from kubernetes.config import ConfigException

    err = config_error(ConfigException(raised), "kubernetes_default", source=source,
                       looked_at=("/home/u/.kube/config",))
    assert isinstance(err, KubeConfigError) and isinstance(err, KubeError)
    assert expected in str(err) and "\n" not in str(err)
    assert err.connection == "kubernetes_default" and err.problem and err.hint


# -- the hook: real kubernetes.config loading on files made here (Airflow imported, no DB) --
def hook(extras: dict, conn_id: str = "not_in_any_backend", **kwargs):
    from dlc_airflow.airflow.hook import DLCHook

    return DLCHook(conn_id, extras=extras, **kwargs)


def kubeconfig(path, namespace="ns-a", context="a"):
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t0k3n"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u", "namespace": namespace}},
                     {"name": "b", "context": {"cluster": "c", "user": "u", "namespace": "ns-b"}}]}))
    return path


def test_hook_reads_given_extras_plain_or_prefixed_without_fetching_the_connection(tmp_path):
    path = kubeconfig(tmp_path / "kc.json")
    h = hook({"extra__kubernetes__kube_config_path": str(path), "extra__kubernetes__cluster_context": "b",
              "dlc_namespaces": "ns-b, other", "namespace": ""})
    assert h.field("kube_config_path") == str(path) and h.field("namespace") is None
    assert h.allowed_namespaces == ["ns-b", "other"]
    client = h.get_client()  # the connection id exists nowhere: the extras given are used
    assert client.namespace == "ns-b" and client.server == "https://127.0.0.1:1"
    assert client.connection == "not_in_any_backend" and h.is_in_cluster is False
    assert client.api.configuration.socket_options  # TCP keepalive, on our configuration only
    from kubernetes import client as k8s

    assert k8s.Configuration.get_default_copy().host != "https://127.0.0.1:1"
    # the plain key wins over the prefixed one, as in the provider
    assert hook({"namespace": "x", "extra__kubernetes__namespace": "y"}).get_namespace() == "x"


def test_hook_kube_config_content_and_explicit_arguments(tmp_path):
    content = json.loads(kubeconfig(tmp_path / "kc.json").read_text())
    h = hook({"kube_config": json.dumps(content), "disable_verify_ssl": "true", "disable_tcp_keepalive": True})
    client = h.get_client()
    assert client.namespace == "ns-a" and client.api.configuration.verify_ssl is False
    assert not client.api.configuration.socket_options
    # constructor arguments win over extras
    assert hook({"kube_config_path": str(tmp_path / "kc.json")}, cluster_context="b").get_client().namespace == "ns-b"


def test_hook_config_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    missing = tmp_path / "missing.kubeconfig"
    monkeypatch.setenv("KUBECONFIG", str(missing))
    with pytest.raises(KubeConfigError) as exc:
        hook({}, conn_id="kubernetes_default").get_client()
    assert str(exc.value) == (
        f"connection 'kubernetes_default': no kubeconfig found (looked at {missing}) and not running in a "
        "Kubernetes pod (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set): set kube_config_path or "
        "kube_config in the connection extras, or in_cluster=true")
    with pytest.raises(KubeConfigError, match=r"^connection 'c1': in_cluster=true but this process is not in a "
                                              r"Kubernetes pod .*: run the task in a pod"):
        hook({"in_cluster": "true"}, conn_id="c1").get_conn()
    with pytest.raises(KubeConfigError, match=rf"no kubeconfig found \(looked at {missing}\): point kube_config_path"):
        hook({"kube_config_path": str(missing)}).get_conn()
    with pytest.raises(KubeConfigError, match="context 'nope' is not in the kubeconfig"):
        hook({"kube_config_path": str(kubeconfig(tmp_path / "kc.json")), "cluster_context": "nope"}).get_conn()
    with pytest.raises(KubeConfigError, match="in_cluster and kube_config_path are all set, but they are mutually "
                                              "exclusive: keep only one"):
        hook({"in_cluster": True, "kube_config_path": "/x"}).get_conn()
    with pytest.raises(KubeConfigError, match="kube_config is not a kubeconfig"):
        hook({"kube_config": "just words"}).get_conn()


def test_a_task_reaches_the_cluster_without_the_providers_hook_module(tmp_path):
    """The cncf hook module pulls in kubernetes_asyncio and aiohttp (~0.25 CPU s of a task's
    ~0.9 s before it deferred): building the runner a task uses must not import it."""
    import subprocess
    import sys

    path = kubeconfig(tmp_path / "kc.json")
    code = ("import sys; from dlc_airflow.airflow.runners import make_runner\n"
            f"r = make_runner('native', 'not_in_any_backend', None, extras={{'kube_config_path': {str(path)!r}}})\n"
            "print(r.namespace, sorted(m for m in sys.modules if m.startswith(('kubernetes_asyncio', 'aiohttp',"
            " 'airflow.providers.cncf'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "ns-a" and out.strip().endswith("[]"), out


def test_a_missing_default_connection_is_an_empty_one_as_in_the_provider(monkeypatch):
    """kubernetes_default not defined: the cluster's own credentials (in-cluster or the
    kubeconfig) apply, as with the provider's hook; any other missing id is an error."""
    from dlc_airflow.airflow.compat import AirflowNotFoundException
    from dlc_airflow.k8s.connection import KubeConnection

    monkeypatch.delenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", raising=False)
    assert KubeConnection("kubernetes_default").conn_extras == {}
    with pytest.raises(AirflowNotFoundException):
        KubeConnection("not_in_any_backend").conn_extras  # noqa: B018
    # a hook and the connection under it agree, and share one client configuration
    h = hook({"namespace": "x"})
    assert h.conn_extras == h.connection.conn_extras == {"namespace": "x"}
    assert h.client_configuration is h.connection.client_configuration
