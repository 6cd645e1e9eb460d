"""Finding and reading a kubeconfig: the files a setting (a path, or KUBECONFIG's list) refers
to, the namespace of a context, and an ApiClient from it (KubeConfigError naming what to set)."""

from __future__ import annotations

import os
from typing import Any

from dlc_airflow.k8s.errors import config_error


def load(path: str | None, context: str | None, connection: str | None) -> tuple[Any, str]:
    """(an ApiClient for the kubeconfig's context, the context's namespace)."""
    from kubernetes import client, config
    from kubernetes.config import ConfigException

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=path or default_kubeconfig(), context=context,
                                client_configuration=cfg, persist_config=False)
    except ConfigException as exc:
        raise config_error(exc, connection, source="kube_config_path" if path else "default",
                           looked_at=kubeconfig_paths(path), context=context) from None
    return client.ApiClient(cfg), kubeconfig_namespace(path, context)


def kubeconfig_namespace(path: str | None, context: str | None) -> str:
    from kubernetes import config

    try:
        contexts, current = config.list_kube_config_contexts(config_file=path or default_kubeconfig())
    except Exception:  # noqa: BLE001 - no namespace in an unreadable kubeconfig: use the default
        return "default"
    chosen = next((c for c in contexts if c["name"] == context), current) if context else current
    return (chosen or {}).get("context", {}).get("namespace") or "default"


def default_kubeconfig() -> str:
    """KUBECONFIG as it is now (kubernetes.config reads it once, at import)."""
    return os.environ.get("KUBECONFIG") or "~/.kube/config"


def kubeconfig_paths(path: str | None = None) -> tuple[str, ...]:
    """The files a kubeconfig setting (a path, or KUBECONFIG's list) refers to, expanded."""
    return tuple(os.path.expanduser(p) for p in (path or default_kubeconfig()).split(os.pathsep) if p)
