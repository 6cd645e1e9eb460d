"""The job's own Secret on Kubernetes: where the pods read the job's hidden env values.

Airflow sources and secret-looking literals are resolved when the job is submitted into a
Secret `<job>-env` (owned by the job's primary object, so it goes with the job) and each pod
references its keys (`pod_env`); a Secret source stays a `secretKeyRef` to its own Secret.
`render` shows the job's Secret with placeholders naming each source (`job_secret`); the
runner fills them in (`fill_job_secret`). No value ever sits in a Job object.
"""

from __future__ import annotations

import base64

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.k8s.api import Manifest
from dlc_airflow.naming import child_name
from dlc_airflow.secrets.resolve import entries, hidden_entries, resolve
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef, describe


def job_secret_name(name: str) -> str:
    return child_name(name, "env")


def pod_env(job: DLCJob, name: str, role: str) -> JSONObject:
    """The role's env for a pod spec: hidden values become references to the job's Secret
    (Secret sources stay references to theirs); other literals stay as they are."""
    hidden_entries(job)  # refuses two values for one key
    keys = {(e.where, e.name): e.key for e in entries(job) if e.hidden()}
    env: JSONObject = {}
    for where, values in (("env", job.env), (f"roles.{role}.env", job.roles[role].env)):
        for n, v in values.items():  # the role's own entries win, as in DLCJob.role_env
            key = keys.get((where, n))
            env[n] = SecretKeyRef(secret=job_secret_name(name), key=key) if key else v
    return env


def job_secret(job: DLCJob, name: str, labels: dict[str, str], annotations: dict[str, str]) -> Manifest | None:
    """The job's own Secret as render shows it: each value a placeholder naming its source
    (the runner resolves them at submit, `fill_job_secret`). None when nothing is hidden."""
    hidden = hidden_entries(job)
    if not hidden:
        return None
    metadata: Manifest = {"name": job_secret_name(name), "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    data = {e.key: (describe(e.value) if e.from_airflow else f"<{e.field}: literal, hidden>") for e in hidden}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque", "stringData": data}


def fill_job_secret(objects: list[Manifest], job: DLCJob, name: str) -> tuple[list[Manifest], list[str]]:
    """Rendered objects with the job's Secret holding the values (read now), and the values;
    raises SecretSourceError (naming the env var and the source) before anything is created."""
    hidden = hidden_entries(job)
    if not hidden:
        return objects, []
    data = {e.key: resolve(e) for e in hidden}
    secret_name = job_secret_name(name)
    for obj in objects:
        if obj.get("kind") == "Secret" and obj["metadata"]["name"] == secret_name:
            obj.pop("stringData", None)
            obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return objects, list(data.values())
