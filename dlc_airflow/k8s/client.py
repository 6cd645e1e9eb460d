"""A small Kubernetes REST client: the one place dlc-airflow talks to an API server.

It works on plain dicts (the manifests the backends render): create, get, list, patch,
delete, watch, pod logs, and the identity's own reviews (who am I, may I). The calls go
through the transport (transport.py: retries, auth errors that name the identity); errors
are errors.py's; a client from a kubeconfig is kubeconfig.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from dlc_airflow.k8s import kubeconfig
from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.errors import NotFound, api_error
from dlc_airflow.k8s.kinds import POD, SELF_SUBJECT_ACCESS_REVIEW, SELF_SUBJECT_REVIEW, ResourceKind, kind_of
from dlc_airflow.k8s.transport import Transport, access_review, lines

FIELD_MANAGER = "dlc-airflow"


class KubeClient(Transport):
    """The API calls dlc-airflow makes, over Transport.request."""

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kw: Any) -> KubeClient:
        api, namespace = kubeconfig.load(path, context, kw.get("connection"))
        return cls(api, namespace=kw.pop("namespace", None) or namespace, **kw)

    # -- who am I, may I ---------------------------------------------------------------
    def whoami(self) -> Manifest:
        """The server's view of this client's identity (a SelfSubjectReview, which every
        authenticated identity may create): {"username", "uid", "groups", "extra"}."""
        review = {"apiVersion": SELF_SUBJECT_REVIEW.api_version, "kind": SELF_SUBJECT_REVIEW.kind}
        answer = self.call("POST", SELF_SUBJECT_REVIEW.path(), body=review)
        found: Manifest = answer.get("status", {}).get("userInfo", {})
        return found

    def may(self, verb: str, kind: ResourceKind | None = None, namespace: str | None = None, *,
            name: str = "", subresource: str = "", resource: str = "", group: str = "") -> bool:
        """Whether this identity may `verb` the kind (a SelfSubjectAccessReview)."""
        attrs = {"verb": verb, "group": kind.group if kind else group,
                 "resource": kind.plural if kind else resource, "subresource": subresource, "name": name,
                 "namespace": (namespace or self.namespace) if (kind is None or kind.namespaced) else ""}
        answer = self.call("POST", SELF_SUBJECT_ACCESS_REVIEW.path(), body=access_review(attrs))
        return bool(answer.get("status", {}).get("allowed"))

    # -- objects -----------------------------------------------------------------------
    def create(self, obj: Manifest, namespace: str | None = None, *, dry_run: bool = False) -> Manifest:
        kind = kind_of(obj)
        query = {"fieldManager": FIELD_MANAGER, "dryRun": "All" if dry_run else None}
        return self.call("POST", kind.path(self._ns(namespace, kind)), body=obj, query=query)

    def get(self, kind: ResourceKind, name: str, namespace: str | None = None) -> Manifest | None:
        try:
            return self.call("GET", kind.path(self._ns(namespace, kind), name))
        except NotFound:
            return None

    def list(self, kind: ResourceKind, namespace: str | None = None, *,
             labels: dict[str, str] | str | None = None, fields: str | None = None,
             resource_version: str | None = None) -> tuple[list[Manifest], str]:
        """Items and the list's resourceVersion (to start a watch from)."""
        query = {"labelSelector": selector(labels), "fieldSelector": fields,
                 "resourceVersion": resource_version}
        data = self.call("GET", kind.path(self._ns(namespace, kind)), query=query)
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

    def patch(self, kind: ResourceKind, name: str, patch: Manifest, namespace: str | None = None,
              *, sub: str | None = None) -> Manifest:
        return self.call("PATCH", kind.path(self._ns(namespace, kind), name, sub), body=patch,
                            content_type="application/merge-patch+json",
                            query={"fieldManager": FIELD_MANAGER})

    def watch(self, kind: ResourceKind, namespace: str | None = None, *,
              resource_version: str, labels: dict[str, str] | str | None = None,
              timeout_seconds: int = 300) -> Iterator[tuple[str, Manifest]]:
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
            for line in lines(resp, call):
                event = json.loads(line)
                etype, obj = event.get("type"), event.get("object") or {}
                if etype == "ERROR":
                    raise api_error(call, int(obj.get("code") or 500), json.dumps(obj), obj.get("reason", ""))
                yield etype, obj
        finally:
            resp.release_conn()

    # -- pods: logs --------------------------------------------------------------------
    def read_log(self, pod: str, namespace: str | None = None, *, container: str | None = None,
                 since_time: str | None = None, tail_lines: int | None = None,
                 timestamps: bool = False, previous: bool = False) -> str:
        """The container's log (`previous`: of its last run before a restart)."""
        query = {"container": container, "sinceTime": since_time,
                 "tailLines": str(tail_lines) if tail_lines else None,
                 "timestamps": "true" if timestamps else None, "previous": "true" if previous else None}
        resp = self.request("GET", POD.path(self._ns(namespace, POD), pod, "log"), query=query,
                            stream=True)
        try:
            return str(resp.data.decode(errors="replace"))
        finally:
            resp.release_conn()

    def _ns(self, namespace: str | None, kind: ResourceKind) -> str | None:
        return (namespace or self.namespace) if kind.namespaced else None


def selector(labels: dict[str, str] | str | None) -> str | None:
    if labels is None or isinstance(labels, str):
        return labels
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or None
