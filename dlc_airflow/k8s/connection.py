"""A cncf.kubernetes connection read into our client, without the provider's hook.

KubeConnection turns a connection (in-cluster, kubeconfig path or content, context,
namespace, disable SSL / TCP keepalive, plus our namespace allow-list `dlc_namespaces`) into
dlc_airflow.k8s.client.KubeClient. It is what a task or trigger uses to reach the cluster:
importing the provider's hook module pulls in kubernetes_asyncio and aiohttp (~0.25 CPU s of
the ~0.9 s a task spent before it deferred, uncontended), which nothing here needs.
DLCHook (hook.py) is the same connection as an Airflow hook, for the UI and DAG authors.

Configuration problems are one-line KubeConfigError naming the connection and what to set.
Fields are looked up plain or with the pre-2.3 `extra__kubernetes__` prefix, as the
provider does.
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from dlc_airflow.airflow.keys import DEFAULT_CONN_ID
from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.client import KubeClient
from dlc_airflow.k8s.errors import KubeConfigError, config_error
from dlc_airflow.k8s.kubeconfig import kubeconfig_namespace, kubeconfig_paths
from dlc_airflow.runner import Connection

#: prefixes of extras saved by Airflow < 2.3 (the provider's own, and ours by our conn type)
EXTRA_PREFIXES = ("extra__kubernetes__", "extra__dlc_kubernetes__")
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class NamespaceNotAllowed(ValueError):
    pass


@dataclass(frozen=True)
class ConfigSource:
    """Where the connection's Kubernetes configuration comes from (one of them, never two)."""

    kind: str  # "in_cluster", "kube_config_path", "kube_config", "config_dict" or "default"
    path: str | None = None
    content: Manifest | None = None
    context: str | None = None


def extra_field(extras: Manifest, name: str) -> Any:
    """A connection extra by its plain name, else its prefixed pre-2.3 name; empty -> None
    (what the provider's connection form stores for an empty field)."""
    if name in extras:
        return extras[name] if extras[name] not in ("", None) else None
    for prefix in EXTRA_PREFIXES:
        value = extras.get(prefix + name)
        if value not in ("", None):
            return value
    return None


def as_bool(value: Any) -> bool | None:
    """True/False from a bool or "true"/"false" (any case); None when it says neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


class KubeConnection:
    """One connection's settings (constructor arguments over the connection's extras) and
    the API client they make. `extras` given here (the trigger reads the connection
    asynchronously and passes them in) mean the connection is never fetched again."""

    def __init__(self, conn_id: str | None, *, namespace: str | None = None,
                 allowed_namespaces: list[str] | None = None, extras: Manifest | None = None,
                 in_cluster: bool | None = None, cluster_context: str | None = None,
                 config_file: str | None = None, config_dict: Manifest | None = None,
                 disable_verify_ssl: bool | None = None, disable_tcp_keepalive: bool | None = None,
                 client_configuration: Any | None = None):
        from kubernetes import client

        self.conn_id = conn_id
        self.in_cluster, self.cluster_context, self.config_file = in_cluster, cluster_context, config_file
        self.config_dict = config_dict
        self.disable_verify_ssl, self.disable_tcp_keepalive = disable_verify_ssl, disable_tcp_keepalive
        # A configuration of our own: never the process-global default one.
        self.client_configuration = client_configuration or client.Configuration()
        self._namespace = namespace
        self._allowed = allowed_namespaces
        self._extras = dict(extras) if extras is not None else None
        self._loaded_in_cluster: bool | None = None

    @staticmethod
    def get_connection(conn_id: str) -> Connection:
        """The connection; a missing `kubernetes_default` is an empty one (the cluster's own
        credentials then), as the provider's hook has it."""
        from airflow.sdk import Connection
        from airflow.sdk.bases.hook import BaseHook

        from dlc_airflow.airflow.compat import AirflowNotFoundException

        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            if conn_id == DEFAULT_CONN_ID:
                return Connection(conn_id=conn_id, conn_type="kubernetes")
            raise

    @cached_property
    def api_client(self) -> Any:
        return self.get_conn()

    # -- the connection's fields -------------------------------------------------------
    @property
    def conn_extras(self) -> Manifest:
        """The connection's extras: those given to the constructor, else read once."""
        if self._extras is None:
            self._extras = dict(self.get_connection(self.conn_id).extra_dejson) if self.conn_id else {}
        return self._extras

    def field(self, name: str) -> Any:
        """A connection extra (plain or `extra__kubernetes__`-prefixed); empty -> None."""
        return extra_field(self.conn_extras, name)

    def get_namespace(self) -> str | None:
        """The namespace the connection names, if any."""
        return self.field("namespace") if self.conn_id else None

    @property
    def allowed_namespaces(self) -> list[str]:
        if self._allowed is not None:
            return list(self._allowed)
        raw = self.field("dlc_namespaces") or ""
        return [ns.strip() for ns in str(raw).split(",") if ns.strip()]

    def config_source(self) -> ConfigSource:
        """Which configuration the connection selects (constructor arguments over extras)."""
        in_cluster = _first(self.in_cluster, as_bool(self.field("in_cluster")))
        context = _first(self.cluster_context, self.field("cluster_context"))
        path = _first(self.config_file, self.field("kube_config_path"))
        content = self.field("kube_config")
        chosen = [name for name, value in (("in_cluster", in_cluster), ("kube_config_path", path),
                                           ("kube_config", content), ("config_dict", self.config_dict))
                  if value]
        if len(chosen) > 1:
            raise KubeConfigError(self.conn_id, f"{' and '.join(chosen)} are all set, but they are mutually "
                                  "exclusive", "keep only one of kube_config_path, kube_config, in_cluster "
                                  "(and config_dict) in the connection")
        if in_cluster:
            return ConfigSource("in_cluster")
        if path:
            return ConfigSource("kube_config_path", path=str(path), context=context)
        if content:
            return ConfigSource("kube_config", content=self._parse_kube_config(content), context=context)
        if self.config_dict:
            return ConfigSource("config_dict", content=self.config_dict, context=context)
        return ConfigSource("default", context=context)

    def _parse_kube_config(self, content: Any) -> Manifest:
        if isinstance(content, dict):
            return content
        import yaml

        try:
            parsed = yaml.safe_load(str(content))  # JSON, as the form asks, or YAML
        except yaml.YAMLError as exc:
            raise KubeConfigError(self.conn_id, f"kube_config is not valid JSON or YAML ({exc.__class__.__name__})",
                                  "paste a whole kubeconfig into kube_config, or use kube_config_path") from None
        if not isinstance(parsed, dict):
            raise KubeConfigError(self.conn_id, "kube_config is not a kubeconfig (not a mapping)",
                                  "paste a whole kubeconfig into kube_config, or use kube_config_path")
        return parsed

    # -- clients -----------------------------------------------------------------------
    def get_conn(self) -> Any:
        """A kubernetes ApiClient on this hook's own Configuration; a KubeConfigError (one
        line: the connection and what to set) when the configuration cannot be loaded."""
        from kubernetes import client, config
        from kubernetes.config import ConfigException

        cfg = self.client_configuration
        assert cfg is not None  # set in __init__
        source = self.config_source()
        looked_at: tuple[str, ...] = ()
        try:
            if source.kind == "in_cluster":
                config.load_incluster_config(client_configuration=cfg)
                self._loaded_in_cluster = True
            elif source.kind in ("kube_config", "config_dict"):
                config.load_kube_config_from_dict(source.content, context=source.context,
                                                  client_configuration=cfg, persist_config=False)
                self._loaded_in_cluster = False
            elif source.kind == "kube_config_path":
                looked_at = kubeconfig_paths(source.path)
                config.load_kube_config(config_file=source.path, context=source.context,
                                        client_configuration=cfg, persist_config=False)
                self._loaded_in_cluster = False
            else:  # nothing configured: in-cluster when in a pod, else KUBECONFIG / ~/.kube/config
                looked_at = kubeconfig_paths()
                try:
                    config.load_incluster_config(client_configuration=cfg)
                    self._loaded_in_cluster = True
                except ConfigException:
                    config.load_kube_config(config_file=os.pathsep.join(looked_at), context=source.context,
                                            client_configuration=cfg, persist_config=False)
                    self._loaded_in_cluster = False
        except ConfigException as exc:
            raise config_error(exc, self.conn_id, source=source.kind, looked_at=looked_at,
                               context=source.context) from None
        if as_bool(_first(self.disable_verify_ssl, self.field("disable_verify_ssl"))):
            cfg.verify_ssl = False
        if as_bool(_first(self.disable_tcp_keepalive, self.field("disable_tcp_keepalive"))) is not True:
            cfg.socket_options = _keepalive_options()
        return client.ApiClient(cfg)

    @property
    def is_in_cluster(self) -> bool:
        if self._loaded_in_cluster is None:
            self.api_client  # noqa: B018 - loading the configuration tells
        return bool(self._loaded_in_cluster)

    def resolve_namespace(self) -> str:
        """The namespace jobs go to: explicit > connection > kubeconfig context > default."""
        namespace = self._namespace or self.get_namespace() or self._config_namespace()
        allowed = self.allowed_namespaces
        if allowed and namespace not in allowed:
            raise NamespaceNotAllowed(
                f"namespace {namespace!r} is not allowed by connection {self.conn_id!r} "
                f"(dlc_namespaces: {', '.join(allowed)}); set namespace= to one of them"
            )
        return namespace

    def _config_namespace(self) -> str:
        source = self.config_source()
        if source.kind == "in_cluster" or (source.kind == "default" and self.is_in_cluster):
            return _in_cluster_namespace()
        if source.content is not None:
            return _dict_namespace(source.content, source.context)
        return kubeconfig_namespace(source.path, source.context)

    def get_client(self) -> KubeClient:
        """Our client on this connection, defaulting to the resolved namespace."""
        return KubeClient(self.api_client, namespace=self.resolve_namespace(), connection=self.conn_id)

    def cluster_key(self) -> str:
        """Identifies the cluster and credentials: waits on the same key share one watch."""
        cfg = self.api_client.configuration
        token = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization", "")
        ident = f"{self.conn_id}|{cfg.host}|{cfg.cert_file}|{hashlib.sha256(str(token).encode()).hexdigest()[:8]}"
        return ident


def _keepalive_options() -> list[tuple[int, int, int]]:
    """TCP keepalive on the API connections (long watches behind load balancers), as the
    provider enables it by default, but on our configuration only."""
    from urllib3.connection import HTTPConnection

    options = list(HTTPConnection.default_socket_options) + [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (("TCP_KEEPIDLE", 120), ("TCP_KEEPINTVL", 30), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


def _dict_namespace(content: Manifest, context: str | None) -> str:
    name = context or content.get("current-context")
    for entry in content.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            return (entry.get("context") or {}).get("namespace") or "default"
    return "default"


def _in_cluster_namespace() -> str:
    try:
        with open(IN_CLUSTER_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"

