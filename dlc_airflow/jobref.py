"""JobRef: where a submitted job lives, on any backend; enough to find it from any process.

    backend   the backend's name (registry.py)
    place     where on that backend: a Kubernetes namespace, a Slurm partition, a DLC
              workspace, the local backend's job root
    name      the job's name (deterministic per task instance and attempt: naming.job_name)
    attempt   which attempt of the task's job it is
    uid       the backend's id of the job, once known (a primary object's uid, a Slurm job
              id, a DLC JobId, a job folder's uid)
    detail    backend-private, JSON: only the backend that made the ref reads it (the
              Kubernetes kinds the job is made of)

It travels in XCom (`dlc_job`), in the trigger's kwargs and in the task state store, so it
is a plain dataclass with a JSON form and no backend code behind it. `from_dict` also reads
the form written before the contract was neutral (`namespace`, and Kubernetes `kind` /
`kinds` for every backend): a job started before an upgrade is still found after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlc_airflow.jsonvalue import JSON, JSONDict


@dataclass(frozen=True)
class JobRef:
    backend: str
    place: str
    name: str
    attempt: int = 1
    uid: str = ""
    detail: Mapping[str, JSON] = field(default_factory=dict, hash=False)

    def to_dict(self) -> JSONDict:
        return {"backend": self.backend, "place": self.place, "name": self.name, "attempt": self.attempt,
                "uid": self.uid, "detail": dict(self.detail)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRef:
        detail = dict(data.get("detail") or {})
        if "kind" in data:  # the form before the contract was neutral: the Kubernetes kinds
            kinds = [data["kind"], *(k for k in data.get("kinds") or () if k != data["kind"])]
            detail.setdefault("kinds", kinds)
        return cls(backend=str(data["backend"]), place=str(data.get("place", data.get("namespace", ""))),
                   name=str(data["name"]), attempt=int(data.get("attempt", 1)), uid=str(data.get("uid") or ""),
                   detail=detail)
