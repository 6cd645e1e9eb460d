"""What a Kubernetes API call's failure is, and how it is told: typed errors (NotFound,
Conflict, Gone, Unauthorized / Forbidden naming the connection, the identity, the verb and
the resource, AdmissionDenied, KubeConfigError naming what to set), and the messages that
name an identity. Pure: no I/O (a client certificate's CN is read from its file)."""

from __future__ import annotations

import json
import re
from typing import Any


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 for connection errors)."""

    def __init__(self, call: str, status: int, reason: str, message: str = ""):
        self.call, self.status, self.reason, self.message = call, status, reason, message
        self.retry_after: float | None = None  # the server's Retry-After, when it sent one
        text = f"{call}: {status} {reason}" if status else f"{call}: {reason}"
        super().__init__(f"{text}: {message}" if message else text)


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists on create, or a conflicting update."""


class AuthError(KubeError):
    """401 or 403 that is not transient: the API server refused these credentials, or this
    identity may not do this. Retrying the task will not help: fail it.

    `status` (401/403), `verb` ("create"), `resource` ("jobs.batch", "pods/log",
    `namespaces 'x'`), `namespace`, `identity` (the user or ServiceAccount name the server
    reported, or what the credentials claim; "" if unknown), `server` (the API server URL),
    `connection` (the Airflow connection id, when the client came from one), `detail` (how
    the client told it from a transient refusal), plus KubeError's `call`, `reason`, `message`.
    """

    permanent = True  # no retry of the task helps (the operator fails it at once)

    def __init__(self, call: str, status: int, reason: str, message: str = "", *, verb: str = "",
                 resource: str = "", namespace: str = "", identity: str = "", server: str = "",
                 connection: str | None = None, detail: str = ""):
        super().__init__(call, status, reason, message)
        self.verb, self.resource, self.namespace = verb, resource, namespace
        self.identity, self.server, self.connection, self.detail = identity, server, connection, detail

    def __str__(self) -> str:
        return auth_message(self)


class Unauthorized(AuthError):
    """401: the API server does not accept the credentials (invalid or expired token or
    certificate)."""


class Forbidden(AuthError):
    """403: the identity is authenticated but not allowed this verb on this resource."""


class AdmissionDenied(KubeError):
    """403 although the authorizer allows the call (a SelfSubjectAccessReview says so): the
    API server's admission refused the object (ResourceQuota, PodSecurity, a webhook). Not an
    auth error: the object or the namespace's policy has to change."""

    def __init__(self, refused: AuthError):
        super().__init__(refused.call, refused.status, refused.reason, refused.message)
        self.verb, self.resource, self.namespace = refused.verb, refused.resource, refused.namespace
        self.identity, self.server, self.connection = refused.identity, refused.server, refused.connection

    def __str__(self) -> str:
        where = f"connection {self.connection!r}: " if self.connection else ""
        ns = f" in namespace {self.namespace!r}" if self.namespace else ""
        return (f"{where}{self.verb} {self.resource}{ns} was refused by admission on {self.server} "
                f"({self.status} {self.reason}: {self.message}); {describe_identity(self.identity)} is "
                "allowed to do it (SelfSubjectAccessReview), so the object or the namespace's policy "
                "(ResourceQuota, PodSecurity, admission webhooks) has to change")


class KubeConfigError(KubeError):
    """The connection's Kubernetes configuration cannot be loaded (no kubeconfig, not in a
    pod, unknown context, ...). `connection`, `problem` and `hint` (what to set); str() is one
    line naming all three. Permanent: fail the task."""

    permanent = True

    def __init__(self, connection: str | None, problem: str, hint: str):
        self.connection, self.problem, self.hint = connection, problem, hint
        where = f"connection {connection!r}" if connection else "Kubernetes configuration"
        super().__init__("load Kubernetes configuration", 0, "configuration error", f"{problem}: {hint}")
        self.args = (f"{where}: {problem}: {hint}",)

    def __str__(self) -> str:
        return str(self.args[0])


class Invalid(KubeError):
    """422: the API server rejected the object; `message` says which field."""


class Gone(KubeError):
    """410: the resourceVersion is too old; list again."""


_ERRORS = {401: Unauthorized, 404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid, 410: Gone}


def api_error(call: str, status: int, body: Any, reason: str = "") -> KubeError:
    message = ""
    if isinstance(body, (bytes, str)) and body:
        try:
            data = json.loads(body)
            message = data.get("message", "")
            reason = data.get("reason", reason) or reason
        except (ValueError, AttributeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    error: type[KubeError] = _ERRORS.get(status, KubeError)
    return error(call, status, str(reason or "Error"), str(message).strip())


# -- identities and messages --------------------------------------------------------------
def identity_from_message(message: str) -> str:
    """The user an RBAC refusal names: `... User "system:serviceaccount:ns:sa" cannot ...`."""
    match = re.search(r'User "([^"]+)"', message or "")
    return match.group(1) if match else ""


def describe_identity(username: str) -> str:
    """`ServiceAccount ns/name (system:serviceaccount:ns:name)`, `user 'alice'`, or
    `system:anonymous` as such (short_identity, with the full user name)."""
    if username == "system:anonymous":
        return "the anonymous user (system:anonymous: no credentials were sent or accepted)"
    short = short_identity(username)
    return f"{short} ({username})" if short.startswith("ServiceAccount") else short


def token_subject(token: str) -> str:
    """The `sub` claim of a JWT (ServiceAccount and OIDC tokens are JWTs), unverified: only to
    name the identity in an error message."""
    import base64

    parts = token.split(".")
    if len(parts) != 3:
        return ""
    try:
        payload = parts[1] + "=" * (-len(parts[1]) % 4)
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, TypeError):
        return ""
    return str(claims.get("sub") or "") if isinstance(claims, dict) else ""


def credential_identity(configuration: Any) -> str:
    """Who the client's credentials claim to be, read locally (a refused token cannot ask the
    server): a JWT's subject, a client certificate's CN, a basic-auth user; "" if unknown."""
    api_key = getattr(configuration, "api_key", None) or {}
    token = str(api_key.get("BearerToken") or api_key.get("authorization") or "")
    token = token.removeprefix("Bearer ").strip()
    if token:
        return token_subject(token)
    cert_file = getattr(configuration, "cert_file", None)
    if cert_file:
        try:
            from cryptography import x509
            from cryptography.x509.oid import NameOID

            with open(cert_file, "rb") as f:
                cert = x509.load_pem_x509_certificate(f.read())
            names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            return str(names[0].value) if names else ""
        except (OSError, ValueError, ImportError):
            return ""
    return str(getattr(configuration, "username", "") or "")


def auth_message(err: AuthError) -> str:
    """One line of at most ~300 characters naming once: the connection, who, the verb, the
    resource, the namespace, the server's answer, and what to do. The authorizer's own text
    (`User "..." cannot list resource ...`) repeats all that and is left out."""
    where = f"connection {err.connection!r}: " if err.connection else ""
    what = f"{err.verb} {err.resource}".strip() or err.call
    if err.namespace and not err.resource.startswith("namespaces"):
        what += f" in namespace {err.namespace!r}"
    server = f" {err.server}" if err.server else ""
    said = f"{err.status} {err.reason}" + _server_words(err)
    detail = f"; {err.detail}" if err.detail else ""
    if err.status == 401:
        who = (f"the credentials of {short_identity(err.identity)}" if err.identity else
               "the connection's credentials" if err.connection else "these credentials")
        return (f"{where}the API server{server} does not accept {who} for {what} ({said}{detail}). Fix: renew "
                "them in the connection's kubeconfig (or the pod's token, in_cluster)")
    return (f"{where}{short_identity(err.identity)} may not {what} on{server or ' the API server'} "
            f"({said}{detail}). Fix: a Role and RoleBinding granting it (see k8s/rbac/role.yaml), or another "
            "connection")


def _server_words(err: AuthError) -> str:
    """The server's message, unless it only repeats what the line says already."""
    text = " ".join((err.message or "").split())
    if not text or text == err.reason or re.search(r'User "[^"]*" cannot ', text) or text == "Unauthorized":
        return ""
    return f": {text if len(text) <= 80 else text[:77] + '...'}"


def short_identity(username: str) -> str:
    """An identity named once: `ServiceAccount ns/name`, `user 'alice'`, `system:anonymous`."""
    if username.startswith("system:serviceaccount:") and username.count(":") == 3:
        _, _, ns, name = username.split(":")
        return f"ServiceAccount {ns}/{name}"
    if username == "system:anonymous":
        return "system:anonymous (no credentials accepted)"
    return f"user {username!r}" if username else "this identity"


_CONFIG_HINT = "set kube_config_path or kube_config in the connection extras, or in_cluster=true"


def config_error(exc: BaseException, connection: str | None, *, source: str,
                 looked_at: tuple[str, ...] = (), context: str | None = None) -> KubeConfigError:
    """A KubeConfigError for what kubernetes.config raised while loading `source`
    ("in_cluster", "kube_config_path", "kube_config", "config_dict" or "default"): one line
    naming the connection and what to set."""
    text = " ".join(str(exc).split())  # exec plugins' errors span lines: one line
    looked = f" (looked at {', '.join(looked_at)})" if looked_at else ""
    host_env = "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT"
    if "No configuration found" in text or "Expected config_dict to not be None" in text:
        if source == "default":
            return KubeConfigError(connection, f"no kubeconfig found{looked} and not running in a "
                                   f"Kubernetes pod ({host_env} not set)", _CONFIG_HINT)
        return KubeConfigError(connection, f"no kubeconfig found{looked}",
                               "point kube_config_path at an existing kubeconfig, or set kube_config "
                               "(its content) or in_cluster=true in the connection extras")
    if "Service host/port" in text:
        return KubeConfigError(connection, f"in_cluster=true but this process is not in a Kubernetes pod "
                               f"({host_env} {'set but empty' if 'empty' in text else 'not set'})",
                               "run the task in a pod, or set kube_config_path or kube_config in the "
                               "connection extras instead of in_cluster")
    if "Service token file" in text or "Token file exists but empty" in text or "Cert file" in text:
        return KubeConfigError(connection, f"in_cluster=true but the pod's ServiceAccount credentials "
                               f"are missing ({text})", "mount the ServiceAccount token into the pod "
                               "(automountServiceAccountToken), or set kube_config_path or kube_config")
    match = re.search(r"Expected object with name (\S+) in kube-config/contexts list", text)
    if match or (context and "contexts" in text):
        name = match.group(1) if match else context
        return KubeConfigError(connection, f"context {name!r} is not in the kubeconfig{looked}",
                               "set cluster_context in the connection extras to a context the "
                               "kubeconfig has (or leave it empty for its current-context)")
    if "Expected key current-context" in text:
        return KubeConfigError(connection, f"the kubeconfig{looked} has no current-context",
                               "set cluster_context in the connection extras")
    if "File does not exist" in text:
        return KubeConfigError(connection, f"a file the kubeconfig refers to does not exist "
                               f"({text.split(':', 1)[-1].strip()})",
                               "fix the path in the kubeconfig, or embed the data (certificate-authority-data, ...)")
    return KubeConfigError(connection, f"cannot load the Kubernetes configuration from {source}{looked}: {text}",
                           f"fix the connection's Kubernetes settings ({_CONFIG_HINT})")
