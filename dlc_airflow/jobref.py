"""JobRef: where a submitted job lives, on any backend; enough to find it from any process.

It travels in XCom (`dlc_job`), in the trigger's kwargs and in the task state store, so it
is a plain dataclass with a JSON form and no backend code behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dlc_airflow.k8s.kinds import ResourceKind


@dataclass(frozen=True)
class JobRef:
    name: str
    namespace: str  # a Kubernetes namespace, or the local backend's job root
    backend: str
    kind: ResourceKind  # the kind waiters watch (the primary object's)
    kinds: tuple[ResourceKind, ...] = field(default=())  # every kind the job created
    attempt: int = 1
    uid: str = ""  # of the primary object, once known

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "namespace": self.namespace, "backend": self.backend,
            "attempt": self.attempt, "uid": self.uid, "kind": _kind_dict(self.kind),
            "kinds": [_kind_dict(k) for k in self.kinds],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobRef:
        return cls(name=data["name"], namespace=data["namespace"], backend=data["backend"],
                   kind=ResourceKind(**data["kind"]), kinds=tuple(ResourceKind(**k) for k in data.get("kinds", [])),
                   attempt=int(data.get("attempt", 1)), uid=data.get("uid", ""))


def _kind_dict(kind: ResourceKind) -> dict[str, Any]:
    return {"api_version": kind.api_version, "kind": kind.kind, "plural": kind.plural,
            "namespaced": kind.namespaced}
