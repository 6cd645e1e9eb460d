"""A small Kubernetes REST client: the one place dlc-airflow talks to an API server.

It works on plain dicts (the manifests the backends render) over the official client's
ApiClient, which handles kubeconfig, in-cluster config, TLS and token refresh. Every call
names the API call in its errors. Transient failures (connection errors, 429, 500, 502,
503, 504) are retried with backoff: every operation dlc-airflow makes is idempotent by
design (deterministic names, create -> 409 -> adopt; delete -> 404 is fine).

401 and 403 are told apart from the transient refusals of an API server that has just
restarted (see _AuthRetry) and raised as AuthError (Unauthorized / Forbidden) naming the
connection, the identity, the verb and the resource: the task fails without retries.
Configuration that cannot be loaded is a one-line KubeConfigError naming what to set.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
from collections.abc import Iterator
from typing import Any

from dlc_airflow.k8s.kinds import (
    SELF_SUBJECT_ACCESS_REVIEW,
    SELF_SUBJECT_REVIEW,
    ResourceKind,
    describe_resource,
    kind_of,
    request_attributes,
)

log = logging.getLogger(__name__)

FIELD_MANAGER = "dlc-airflow"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


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


def _error(call: str, status: int, body: Any, reason: str = "") -> KubeError:
    message = ""
    if isinstance(body, (bytes, str)) and body:
        try:
            data = json.loads(body)
            message = data.get("message", "")
            reason = data.get("reason", reason) or reason
        except (ValueError, AttributeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    return _ERRORS.get(status, KubeError)(call, status, reason or "Error", message.strip())


# -- identities and messages --------------------------------------------------------------
def identity_from_message(message: str) -> str:
    """The user an RBAC refusal names: `... User "system:serviceaccount:ns:sa" cannot ...`."""
    match = re.search(r'User "([^"]+)"', message or "")
    return match.group(1) if match else ""


def describe_identity(username: str) -> str:
    """`ServiceAccount ns/name (system:serviceaccount:ns:name)`, `user "alice"`, or
    `system:anonymous` as such."""
    if not username:
        return "this identity"
    if username.startswith("system:serviceaccount:") and username.count(":") == 3:
        _, _, ns, name = username.split(":")
        return f"ServiceAccount {ns}/{name} ({username})"
    if username == "system:anonymous":
        return "the anonymous user (system:anonymous: no credentials were sent or accepted)"
    return f"user {username!r}"


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
    """One line: which connection, who, may not do what, where, what the server said, what to do."""
    where = f"connection {err.connection!r}: " if err.connection else ""
    what = f"{err.verb} {err.resource}".strip() or err.call
    if err.namespace and not err.resource.startswith("namespaces"):
        what += f" in namespace {err.namespace!r}"
    server = f" {err.server}" if err.server else ""
    said = f"{err.status} {err.reason}" + (f": {err.message}" if err.message else "")
    detail = f"; {err.detail}" if err.detail else ""
    if err.status == 401:
        who = (f"the credentials of {describe_identity(err.identity)}" if err.identity else
               "the connection's credentials" if err.connection else "these credentials")
        return (f"{where}the API server{server} does not accept {who} for {what} ({said}){detail}. Renew the token or client certificate in the "
                "connection's kubeconfig (kube_config_path or kube_config), or check the pod's "
                "ServiceAccount token with in_cluster=true")
    who = describe_identity(err.identity)
    rbac = err.resource.split(" ", 1)[0] or "it"
    return (f"{where}{who} may not {what} on{server or ' the API server'} ({said}){detail}. "
            f"Grant {err.verb or 'the verb'} on {rbac} to that identity with a Role and RoleBinding "
            "(dlc-airflow's Role is k8s/rbac/role.yaml), or use a connection whose identity may")


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


class KubeClient:
    """Sync client over a kubernetes.client.ApiClient.

    `connection` (the Airflow connection id, if any) is named in auth errors. A 401 or 403 is
    retried for up to `auth_retry_budget` seconds when it may be transient (right after an
    API server restart its authorizer refuses everyone until its RBAC caches are warm), and
    raised as Unauthorized / Forbidden (AuthError) once confirmed: see `_AuthRetry`.
    """

    def __init__(self, api_client: Any, namespace: str = "default", *, retries: int = 5,
                 timeout: float = 30.0, backoff: float = 0.2, connection: str | None = None,
                 auth_retry_budget: float = 10.0, auth_confirm_after: float = 1.0):
        self.api = api_client
        self.namespace = namespace
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self.connection = connection
        self.auth_retry_budget = auth_retry_budget
        self.auth_confirm_after = auth_confirm_after
        self.transient_auth_failures = 0  # calls that got past transient 401/403 refusals

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kw: Any) -> KubeClient:
        from kubernetes import client, config
        from kubernetes.config import ConfigException

        cfg = client.Configuration()
        try:
            config.load_kube_config(config_file=path or _default_kubeconfig(), context=context,
                                    client_configuration=cfg, persist_config=False)
        except ConfigException as exc:
            raise config_error(exc, kw.get("connection"), source="kube_config_path" if path else "default",
                               looked_at=kubeconfig_paths(path), context=context) from None
        namespace = kw.pop("namespace", None) or kubeconfig_namespace(path, context)
        return cls(client.ApiClient(cfg), namespace=namespace, **kw)

    @property
    def server(self) -> str:
        return self.api.configuration.host

    # -- transport ---------------------------------------------------------------------
    def request(self, method: str, path: str, *, body: Any = None, query: dict | None = None,
                content_type: str = "application/json", stream: bool = False,
                timeout: float | tuple | None = None, retry: bool = True, text: bool = False) -> Any:
        """One API call; JSON in and out (text when text=True, the raw urllib3 response
        when stream=True).

        Every call goes through here: connection errors and 429/5xx are retried (unless
        retry=False), 401/403 are told apart from transient refusals (always, also for
        retry=False: a watch that is refused must say so) and raised as AuthError.
        """
        attempt = 0
        auth: _AuthRetry | None = None
        while True:
            try:
                result = self._send(method, path, body=body, query=query, content_type=content_type,
                                    stream=stream, timeout=timeout, text=text)
                if auth is not None:
                    self.transient_auth_failures += 1
                    log.info("%s %s succeeded after %d transient refusals in %.1f s (%s)", method, path,
                             auth.tries, auth.elapsed(), auth.evidence)
                return result
            except AuthError as err:
                self._annotate(err, method, path, query)
                if auth is None:
                    auth = _AuthRetry(self, method, path, query)
                delay = auth.next_delay(err)
                if delay is None:
                    raise auth.final(err) from None
                log.info("%s %s: %d %s; retrying in %.1fs (%s)", method, path, err.status, err.reason,
                         delay, auth.evidence)
                time.sleep(delay)
                continue
            except KubeError as err:
                attempt += 1
                if not retry or attempt > self.retries or (err.status and err.status not in RETRY_STATUS):
                    raise
                delay = err.retry_after if err.retry_after is not None else self.backoff * 2 ** (attempt - 1)
                delay = min(delay, 10.0) * random.uniform(0.8, 1.2)
                log.debug("%s; retry %d/%d in %.1fs", err, attempt, self.retries, delay)
                time.sleep(delay)

    def _send(self, method: str, path: str, *, body: Any = None, query: dict | None = None,
              content_type: str = "application/json", stream: bool = False,
              timeout: float | tuple | None = None, text: bool = False, credentials: bool = True) -> Any:
        """Exactly one HTTP request; failures as KubeError (401/403 without annotations)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        call = f"{method} {path}"
        headers = {"Accept": "application/json", "Content-Type": content_type}
        query_list = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            resp = self.api.call_api(
                path, method, query_params=query_list, header_params=headers, body=body,
                auth_settings=["BearerToken"] if credentials else [], _preload_content=False,
                _request_timeout=timeout if timeout is not None else self.timeout,
            )
        except ApiException as exc:
            err = _error(call, exc.status, exc.body, exc.reason or "")
            err.retry_after = _retry_after(exc)
            raise err from None
        except (HTTPError, OSError) as exc:
            raise KubeError(call, 0, f"connection failed ({type(exc).__name__}: {exc})") from None
        if stream:
            return resp
        data = resp.data
        if text:
            return data.decode(errors="replace")
        return json.loads(data) if data else {}

    def _annotate(self, err: AuthError, method: str, path: str, query: dict | None) -> None:
        attrs = request_attributes(method, path, query)
        err.verb, err.resource = attrs["verb"], describe_resource(attrs)
        err.namespace = attrs.get("namespace", "")
        err.server, err.connection = self.server, self.connection
        err.identity = err.identity or identity_from_message(err.message)

    # -- who am I, may I ---------------------------------------------------------------
    def whoami(self) -> dict:
        """The server's view of this client's identity (a SelfSubjectReview, which every
        authenticated identity may create): {"username", "uid", "groups", "extra"}."""
        review = {"apiVersion": SELF_SUBJECT_REVIEW.api_version, "kind": SELF_SUBJECT_REVIEW.kind}
        answer = self.request("POST", SELF_SUBJECT_REVIEW.path(), body=review)
        return answer.get("status", {}).get("userInfo", {})

    def may(self, verb: str, kind: ResourceKind | None = None, namespace: str | None = None, *,
            name: str = "", subresource: str = "", resource: str = "", group: str = "") -> bool:
        """Whether this identity may `verb` the kind (a SelfSubjectAccessReview)."""
        attrs = {"verb": verb, "group": kind.group if kind else group,
                 "resource": kind.plural if kind else resource, "subresource": subresource, "name": name,
                 "namespace": (namespace or self.namespace) if (kind is None or kind.namespaced) else ""}
        answer = self.request("POST", SELF_SUBJECT_ACCESS_REVIEW.path(), body=_access_review(attrs))
        return bool(answer.get("status", {}).get("allowed"))

    def _probe(self, method: str, path: str, body: Any = None, *, credentials: bool = True,
               text: bool = False) -> Any:
        """One quick request for the auth checks: never retried, never raises (None on failure)."""
        try:
            return self._send(method, path, body=body, timeout=5.0, credentials=credentials, text=text)
        except KubeError:
            return None

    # -- objects -----------------------------------------------------------------------
    def create(self, obj: dict, namespace: str | None = None, *, dry_run: bool = False) -> dict:
        kind = kind_of(obj)
        query = {"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None}
        return self.request("POST", kind.path(self._ns(namespace, kind)), body=obj, query=query)

    def get(self, kind: ResourceKind, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.request("GET", kind.path(self._ns(namespace, kind), name))
        except NotFound:
            return None

    def list(self, kind: ResourceKind, namespace: str | None = None, *,
             labels: dict[str, str] | str | None = None, fields: str | None = None,
             resource_version: str | None = None) -> tuple[list[dict], str]:
        """Items and the list's resourceVersion (to start a watch from)."""
        query = {"labelSelector": selector(labels), "fieldSelector": fields,
                 "resourceVersion": resource_version}
        data = self.request("GET", kind.path(self._ns(namespace, kind)), query=query)
        items = data.get("items", [])
        for item in items:  # list items come without apiVersion/kind
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items, data.get("metadata", {}).get("resourceVersion", "")

    def delete(self, kind: ResourceKind, name: str, namespace: str | None = None, *,
               propagation: str = "Background") -> bool:
        """Delete; False if it was already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.request("DELETE", kind.path(self._ns(namespace, kind), name), body=body)
            return True
        except NotFound:
            return False

    def patch(self, kind: ResourceKind, name: str, patch: dict, namespace: str | None = None,
              *, sub: str | None = None) -> dict:
        return self.request("PATCH", kind.path(self._ns(namespace, kind), name, sub), body=patch,
                            content_type="application/merge-patch+json",
                            query={"fieldManager": FIELD_MANAGER})

    def watch(self, kind: ResourceKind, namespace: str | None = None, *,
              resource_version: str, labels: dict[str, str] | str | None = None,
              timeout_seconds: int = 300) -> Iterator[tuple[str, dict]]:
        """Watch events (type, object) from resource_version until the server ends the watch.

        Raises Gone when the resourceVersion is too old (the caller relists), KubeError on a
        broken connection (the caller resumes from the last resourceVersion it saw).
        """
        query = {"watch": "true", "resourceVersion": resource_version,
                 "labelSelector": selector(labels), "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_seconds)}
        path = kind.path(self._ns(namespace, kind))
        call = f"WATCH {path}"
        # read timeout: a healthy watch sends a bookmark or ends within timeout_seconds
        resp = self.request("GET", path, query=query, stream=True, retry=False,
                            timeout=(10, timeout_seconds + 30))
        try:
            for line in _lines(resp, call):
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    raise _error(call, int(obj.get("code") or 500), json.dumps(obj), obj.get("reason", ""))
                yield etype, obj
        finally:
            resp.release_conn()

    # -- pods: logs --------------------------------------------------------------------
    def read_log(self, pod: str, namespace: str | None = None, *, container: str | None = None,
                 since_time: str | None = None, tail_lines: int | None = None,
                 timestamps: bool = False) -> str:
        query = {"container": container, "sinceTime": since_time,
                 "tailLines": str(tail_lines) if tail_lines else None,
                 "timestamps": "true" if timestamps else None}
        from dlc_airflow.k8s.kinds import POD

        resp = self.request("GET", POD.path(self._ns(namespace, POD), pod, "log"), query=query,
                            stream=True)
        try:
            return resp.data.decode(errors="replace")
        finally:
            resp.release_conn()

    def _ns(self, namespace: str | None, kind: ResourceKind) -> str | None:
        return (namespace or self.namespace) if kind.namespaced else None


class _AuthRetry:
    """Tells a transient 401/403 from a real one, for one call.

    Right after an API server (re)starts, its RBAC authorizer answers 403 to everyone but
    system:masters until its informer caches are synced (measured on the local control
    plane: ~2 s in which even a SelfSubjectAccessReview and /readyz get 403), and token
    authenticators may answer 401 for a moment: a task must not fail for good on that. So:

    - 403: ask a SelfSubjectAccessReview for the same verb/resource/namespace (every
      authenticated identity may).
      - Allowed: the authorizer is warm now; retry the call. If the call is refused again
        while the review keeps saying allowed and the refusal is not an RBAC one (no
        `User "..." cannot ...`), it is admission (ResourceQuota, PodSecurity, a webhook):
        AdmissionDenied, which is not an auth error.
      - Denied, and /readyz (which waits for the server's informers) says ok: a real
        denial, raised once `auth_confirm_after` seconds have passed since the first
        refusal (a RoleBinding made a moment ago gets that long to take effect).
      - The review itself refused or failed, or /readyz not ok: still warming up; retry.
    - 401: the same with an anonymous /readyz (the credentials are what is refused).
    - Either way, `auth_retry_budget` seconds after the first refusal it is raised as it is.
    """

    def __init__(self, client: KubeClient, method: str, path: str, query: dict | None):
        self.client = client
        self.attrs = request_attributes(method, path, query)
        self.started = time.monotonic()
        self.tries = 0
        self.evidence = ""
        self.confirmed = False
        self.admission = False

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def next_delay(self, err: AuthError) -> float | None:
        """Seconds to wait before retrying the call, or None: give up (raise `final(err)`)."""
        self.tries += 1
        budget, confirm_after = self.client.auth_retry_budget, self.client.auth_confirm_after
        self.confirmed = False
        if self.elapsed() >= budget:
            return None
        if err.status == 403:
            verdict = self._review()
            if verdict is True:
                if not _rbac_refusal(err.message) and self.tries >= 2 and self.elapsed() >= confirm_after:
                    self.admission = True
                    return None
                self.evidence = "a SelfSubjectAccessReview says allowed: the authorizer was warming up"
                return self._delay(budget, quick=True)
            ready = self.client._probe("GET", "/readyz", text=True) == "ok"
            if verdict is False and ready:
                self.confirmed = True
                self.evidence = "a SelfSubjectAccessReview says denied, and the API server is ready"
            else:
                self.evidence = ("the API server is not ready yet" if not ready else
                                 "the access review itself was refused (the authorizer may be warming up)")
        else:
            ready = self.client._probe("GET", "/readyz", credentials=False, text=True) == "ok"
            self.confirmed = ready
            self.evidence = ("the API server is ready and refuses the credentials" if ready else
                             "the API server's readiness is unknown (it may still be starting)")
        if self.confirmed:
            wait = confirm_after - self.elapsed()
            return None if wait <= 0 else min(wait + 0.05, budget - self.elapsed())
        return self._delay(budget)

    def _delay(self, budget: float, quick: bool = False) -> float | None:
        base = 0.1 if quick else 0.25
        delay = min(2.0, base * 2 ** min(self.tries - 1, 4)) * random.uniform(0.8, 1.2)
        left = budget - self.elapsed()
        return min(delay, left) if left > 0.05 else None

    def _review(self) -> bool | None:
        answer = self.client._probe("POST", SELF_SUBJECT_ACCESS_REVIEW.path(), body=_access_review(self.attrs))
        if not isinstance(answer, dict) or "status" not in answer:
            return None
        return bool(answer["status"].get("allowed"))

    def final(self, err: AuthError) -> KubeError:
        """What to raise for `err`: itself with who was refused and how we know, or
        AdmissionDenied when the authorizer allows the call and admission refuses it."""
        if not err.identity:
            if err.status == 403:
                review = self.client._probe("POST", SELF_SUBJECT_REVIEW.path(), body={
                    "apiVersion": SELF_SUBJECT_REVIEW.api_version, "kind": SELF_SUBJECT_REVIEW.kind})
                if isinstance(review, dict):
                    err.identity = str(review.get("status", {}).get("userInfo", {}).get("username") or "")
            if not err.identity:
                err.identity = credential_identity(self.client.api.configuration)
        if self.admission:
            return AdmissionDenied(err)
        how = "confirmed" if self.confirmed else "still refused"
        err.detail = f"{how} after {self.elapsed():.1f} s and {self.tries} tries" + (
            f": {self.evidence}" if self.evidence else "")
        return err


def _rbac_refusal(message: str) -> bool:
    """The authorizer's wording (`User "x" cannot list resource "jobs" ...`), not admission's."""
    return bool(re.search(r'User "[^"]*" cannot ', message or ""))


def _access_review(attrs: dict[str, str]) -> dict:
    if "nonResourceURL" in attrs:
        spec = {"nonResourceAttributes": {"path": attrs["nonResourceURL"], "verb": attrs["verb"]}}
    else:
        keys = ("namespace", "verb", "group", "version", "resource", "subresource", "name")
        spec = {"resourceAttributes": {k: attrs[k] for k in keys if attrs.get(k)}}
    return {"apiVersion": SELF_SUBJECT_ACCESS_REVIEW.api_version, "kind": SELF_SUBJECT_ACCESS_REVIEW.kind,
            "spec": spec}


def selector(labels: dict[str, str] | str | None) -> str | None:
    if labels is None or isinstance(labels, str):
        return labels
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None


def _retry_after(exc: Any) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value else None
    except ValueError:
        return None


def _lines(resp: Any, call: str) -> Iterator[bytes]:
    from urllib3.exceptions import HTTPError

    buf = b""
    try:
        for chunk in resp.stream(amt=None, decode_content=False):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    yield line
    except (HTTPError, OSError) as exc:
        raise KubeError(call, 0, f"watch connection broken ({type(exc).__name__})") from None
    if buf.strip():
        yield buf


def kubeconfig_namespace(path: str | None, context: str | None) -> str:
    from kubernetes import config

    try:
        contexts, current = config.list_kube_config_contexts(config_file=path or _default_kubeconfig())
    except Exception:  # noqa: BLE001 - no namespace in an unreadable kubeconfig: use the default
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    return (chosen or {}).get("context", {}).get("namespace") or "default"


def _default_kubeconfig() -> str:
    """KUBECONFIG as it is now (kubernetes.config reads it once, at import)."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def kubeconfig_paths(path: str | None = None) -> tuple[str, ...]:
    """The files a kubeconfig setting (a path, or KUBECONFIG's list) refers to, expanded."""
    return tuple(os.path.expanduser(p) for p in (path or _default_kubeconfig()).split(os.pathsep) if p)
