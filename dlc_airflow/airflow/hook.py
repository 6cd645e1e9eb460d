"""DLCHook: Kubernetes access for DLC jobs as an Airflow hook, on the cncf.kubernetes connection.

It is the cncf.kubernetes KubernetesHook (same connection: in-cluster, kubeconfig path or
content, context, namespace, disable SSL / TCP keepalive; `kubernetes_default` works
unchanged) plus a namespace allow-list (connection extra `dlc_namespaces`, comma-separated,
or the `allowed_namespaces` argument) and our small client (`get_client`). The connection's
reading lives in dlc_airflow.k8s.connection.KubeConnection, which tasks and triggers use
directly; this class adds what only a hook has: the connection form, the Test button, and
the provider's own methods on the same settings.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.connection import ConfigSource, KubeConnection, NamespaceNotAllowed

__all__ = ["DLCHook", "NamespaceNotAllowed"]


class DLCHook(KubernetesHook):
    conn_name_attr = "dlc_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "dlc_kubernetes"
    hook_name = "DLC jobs on Kubernetes"

    @classmethod
    def get_connection_form_widgets(cls) -> JSONObject:
        from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
        from flask_babel import lazy_gettext
        from wtforms import StringField

        widgets = super().get_connection_form_widgets()
        widgets["dlc_namespaces"] = StringField(
            lazy_gettext("Allowed namespaces (comma-separated; empty: any)"), widget=BS3TextFieldWidget()
        )
        return widgets

    def __init__(self, conn_id: str | None = default_conn_name, *, namespace: str | None = None,
                 allowed_namespaces: list[str] | None = None, extras: JSONObject | None = None, **kwargs: Any):
        super().__init__(conn_id=conn_id, **kwargs)
        self.connection = KubeConnection(
            conn_id, namespace=namespace, allowed_namespaces=allowed_namespaces, extras=extras,
            in_cluster=self.in_cluster, cluster_context=self.cluster_context, config_file=self.config_file,
            config_dict=self.config_dict, disable_verify_ssl=self.disable_verify_ssl,
            disable_tcp_keepalive=self.disable_tcp_keepalive, client_configuration=self.client_configuration)
        self.client_configuration = self.connection.client_configuration

    # The provider's methods read extras and the client through these: ours, on one configuration.
    @property
    def conn_extras(self) -> JSONObject:
        return self.connection.conn_extras

    def get_conn(self) -> Any:
        return self.connection.api_client

    @property
    def is_in_cluster(self) -> bool:
        return self.connection.is_in_cluster

    def field(self, name: str) -> Any:
        return self.connection.field(name)

    def get_namespace(self) -> str | None:
        return self.connection.get_namespace()

    @property
    def allowed_namespaces(self) -> list[str]:
        return self.connection.allowed_namespaces

    def config_source(self) -> ConfigSource:
        return self.connection.config_source()

    def resolve_namespace(self) -> str:
        return self.connection.resolve_namespace()

    def get_client(self) -> KubeClient:
        return self.connection.get_client()

    def cluster_key(self) -> str:
        return self.connection.cluster_key()

    def test_connection(self) -> tuple[bool, str]:
        """For the UI's Test button: who the connection is, on which server."""
        from dlc_airflow.k8s.errors import KubeError

        try:
            client = self.get_client()
            user = client.whoami().get("username", "?")
        except (KubeError, NamespaceNotAllowed) as exc:
            return False, str(exc)
        return True, f"Connected to {client.server} as {user} (namespace {client.namespace})"
