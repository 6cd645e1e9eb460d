"""DLCHook: Kubernetes access for DLC jobs, on the cncf.kubernetes connection.

It is the cncf.kubernetes KubernetesHook (same connection: in-cluster, kubeconfig path or
content, context, namespace; `kubernetes_default` works unchanged) plus:
- a namespace allow-list (connection extra `dlc_namespaces`, comma-separated, or the
  `allowed_namespaces` argument): a job may only go to those namespaces;
- our small client (dlc_airflow.k8s.client.KubeClient) over the connection's ApiClient,
  built on a configuration of its own (never the process-global default).
"""

from __future__ import annotations

import hashlib
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

from dlc_airflow.k8s.client import KubeClient, kubeconfig_namespace


class NamespaceNotAllowed(ValueError):
    pass


class DLCHook(KubernetesHook):
    conn_name_attr = "dlc_conn_id"
    default_conn_name = "kubernetes_default"
    conn_type = "dlc_kubernetes"
    hook_name = "DLC jobs on Kubernetes"

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        widgets = super().get_connection_form_widgets()
        widgets["dlc_namespaces"] = StringField(
            lazy_gettext("Allowed namespaces (comma-separated; empty: any)"), widget=BS3TextFieldWidget()
        )
        return widgets

    def __init__(self, conn_id: str | None = default_conn_name, *, namespace: str | None = None,
                 allowed_namespaces: list[str] | None = None, extras: dict | None = None, **kwargs: Any):
        from kubernetes import client

        # A configuration of our own: KubernetesHook would load into the global default one.
        kwargs.setdefault("client_configuration", client.Configuration())
        super().__init__(conn_id=conn_id, **kwargs)
        self._namespace = namespace
        self._allowed = allowed_namespaces
        if extras is not None:  # prefetched (the trigger reads the connection asynchronously)
            self.__dict__["conn_extras"] = extras

    @property
    def allowed_namespaces(self) -> list[str]:
        if self._allowed is not None:
            return list(self._allowed)
        raw = self._get_field("dlc_namespaces") or ""
        return [ns.strip() for ns in str(raw).split(",") if ns.strip()]

    def resolve_namespace(self) -> str:
        """The namespace jobs go to: explicit > connection > kubeconfig context > default."""
        namespace = self._namespace or self.get_namespace() or self._kubeconfig_namespace()
        allowed = self.allowed_namespaces
        if allowed and namespace not in allowed:
            raise NamespaceNotAllowed(
                f"namespace {namespace!r} is not allowed by connection {self.conn_id!r} "
                f"(dlc_namespaces: {', '.join(allowed)}); set namespace= to one of them"
            )
        return namespace

    def _kubeconfig_namespace(self) -> str:
        if self._coalesce_param(self.in_cluster, self._get_field("in_cluster")):
            return _in_cluster_namespace()
        path = self._coalesce_param(self.config_file, self._get_field("kube_config_path"))
        context = self._coalesce_param(self.cluster_context, self._get_field("cluster_context"))
        return kubeconfig_namespace(path, context)

    def get_client(self) -> KubeClient:
        """Our client on this connection, defaulting to the resolved namespace."""
        return KubeClient(self.get_conn(), namespace=self.resolve_namespace())

    def cluster_key(self) -> str:
        """Identifies the cluster and credentials: waits on the same key share one watch."""
        cfg = self.get_conn().configuration
        token = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization", "")
        ident = f"{self.conn_id}|{cfg.host}|{cfg.cert_file}|{hashlib.sha256(str(token).encode()).hexdigest()[:8]}"
        return ident


def _in_cluster_namespace() -> str:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"
