"""A small Kubernetes REST client: the one place dlc-airflow talks to an API server.

It works on plain dicts (the manifests the backends render) over the official client's
ApiClient, which handles kubeconfig, in-cluster config, TLS and token refresh. Every call
names the API call in its errors. Transient failures (connection errors, 429, 500, 502,
503, 504) are retried with backoff: every operation dlc-airflow makes is idempotent by
design (deterministic names, create -> 409 -> adopt; delete -> 404 is fine).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Iterator
from typing import Any

from dlc_airflow.k8s.kinds import ResourceKind, kind_of

log = logging.getLogger(__name__)

FIELD_MANAGER = "dlc-airflow"
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 for connection errors)."""

    def __init__(self, call: str, status: int, reason: str, message: str = ""):
        self.call, self.status, self.reason, self.message = call, status, reason, message
        text = f"{call}: {status} {reason}" if status else f"{call}: {reason}"
        super().__init__(f"{text}: {message}" if message else text)


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    """409: AlreadyExists on create, or a conflicting update."""


class Forbidden(KubeError):
    pass


class Invalid(KubeError):
    """422: the API server rejected the object; `message` says which field."""


class Gone(KubeError):
    """410: the resourceVersion is too old; list again."""


_ERRORS = {404: NotFound, 409: Conflict, 403: Forbidden, 422: Invalid, 410: Gone}


def _error(call: str, status: int, body: Any, reason: str = "") -> KubeError:
    message = ""
    if isinstance(body, (bytes, str)) and body:
        try:
            data = json.loads(body)
            message = data.get("message", "")
            reason = data.get("reason", reason) or reason
        except (ValueError, AttributeError):
            message = body.decode(errors="replace") if isinstance(body, bytes) else body
    return _ERRORS.get(status, KubeError)(call, status, reason or "Error", message)


class KubeClient:
    """Sync client over a kubernetes.client.ApiClient."""

    def __init__(self, api_client: Any, namespace: str = "default", *, retries: int = 5,
                 timeout: float = 30.0, backoff: float = 0.2):
        self.api = api_client
        self.namespace = namespace
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kw: Any) -> KubeClient:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=path, context=context, client_configuration=cfg,
                                persist_config=False)
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
        when stream=True)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        call = f"{method} {path}"
        headers = {"Accept": "application/json", "Content-Type": content_type}
        query_list = [(k, v) for k, v in (query or {}).items() if v is not None]
        attempt = 0
        while True:
            try:
                resp = self.api.call_api(
                    path, method, query_params=query_list, header_params=headers, body=body,
                    auth_settings=["BearerToken"], _preload_content=False,
                    _request_timeout=timeout if timeout is not None else self.timeout,
                )
                if stream:
                    return resp
                data = resp.data
                if text:
                    return data.decode(errors="replace")
                return json.loads(data) if data else {}
            except ApiException as exc:
                err = _error(call, exc.status, exc.body, exc.reason or "")
                retry_after = _retry_after(exc)
            except (HTTPError, OSError) as exc:
                err = KubeError(call, 0, f"connection failed ({type(exc).__name__}: {exc})")
                retry_after = None
            attempt += 1
            if not retry or attempt > self.retries or (err.status and err.status not in RETRY_STATUS):
                raise err
            delay = retry_after if retry_after is not None else self.backoff * 2 ** (attempt - 1)
            delay = min(delay, 10.0) * random.uniform(0.8, 1.2)
            log.debug("%s; retry %d/%d in %.1fs", err, attempt, self.retries, delay)
            time.sleep(delay)

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

    def replace_status(self, obj: dict) -> dict:
        """PUT the status subresource (what a controller does; used to test CRD backends)."""
        kind = kind_of(obj)
        meta = obj["metadata"]
        return self.request("PUT", kind.path(self._ns(meta.get("namespace"), kind), meta["name"], "status"),
                            body=obj)

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
        contexts, current = config.list_kube_config_contexts(config_file=path)
    except Exception:  # noqa: BLE001 - no namespace in an unreadable kubeconfig: use the default
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    return (chosen or {}).get("context", {}).get("namespace") or "default"
