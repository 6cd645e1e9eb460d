"""The local backend's Secrets: a Secret source reads its stand-in file
<root>/volumes/secret-<name>/<key>, the folder the job's secret mounts use too."""

from __future__ import annotations

from pathlib import Path

from dlc_airflow.errors import SecretSourceError
from dlc_airflow.local.volumes import shared_folder
from dlc_airflow.secrets.resolve import Entry, hidden_values
from dlc_airflow.spec import DLCJob
from dlc_airflow.spec.envsource import SecretKeyRef


def local_secret(entry: Entry, ref: SecretKeyRef, root: Path) -> str:
    path = shared_folder(root, "secret", ref.secret) / ref.key
    try:
        return path.read_text().rstrip("\n")
    except OSError:
        raise SecretSourceError(f"{entry.field}: Secret {ref.secret!r} has no key {ref.key!r} on the local "
                                f"backend: put the value in {path}") from None


def local_values(job: DLCJob, root: Path) -> dict[str, dict[str, str]]:
    """What the local supervisor needs and spec.json must not hold: {where: {NAME: value}}
    for every Airflow source, Secret source and secret literal of the job."""
    return hidden_values(job, lambda entry, ref: local_secret(entry, ref, root))
