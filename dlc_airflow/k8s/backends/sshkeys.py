"""The SSH keys an MPI launcher logs in to its workers with, on the backends whose pods we
write ourselves (native, jobset). Kubeflow's MPIJob uses its operator's own mechanism.

- One key pair per job, in a Secret `<name>-ssh` (type kubernetes.io/ssh-auth), second after
  the primary object that owns it, so it goes with the job. `render` shows placeholders; the
  runner makes the pair at submit (`fill_ssh_keys`). It is never logged: only the runner
  reads it, and what it records of created objects has no values.
- Every pod of the job mounts it at KEYS_PATH, and the command wrapper first copies the key,
  and the public key as authorized_keys, into $HOME/.ssh of whoever the container runs as:
  a Secret's files belong to root, and OpenSSH refuses a private key its own user can read
  with looser modes. So `mpirun` over ssh and the workers' `sshd` find them where OpenSSH
  looks by default, as root or not.
- The launcher waits (up to WAIT_SECONDS) until every host of the hostfile resolves before
  its command runs: the workers' DNS records appear as their pods get addresses.

Nothing here talks to a cluster.
"""

from __future__ import annotations

import base64

from dlc_airflow.k8s.api import Manifest
from dlc_airflow.k8s.backends.podspec import Volumes
from dlc_airflow.naming import child_name
from dlc_airflow.spec import DLCJob, hostfile_spec

KEYS_PATH = "/etc/dlc-airflow/ssh"
PLACEHOLDER = "<a key pair made when the job is submitted>"
WAIT_SECONDS = 300
_PRIVATE, _PUBLIC = "ssh-privatekey", "ssh-publickey"  # the ssh-auth Secret type's keys

INSTALL_KEYS = (
    f'mkdir -p "$HOME/.ssh" && cp {KEYS_PATH}/id_ed25519 {KEYS_PATH}/id_ed25519.pub "$HOME/.ssh/" '
    f'&& cat {KEYS_PATH}/authorized_keys >> "$HOME/.ssh/authorized_keys" && chmod 700 "$HOME/.ssh" '
    '&& chmod 600 "$HOME/.ssh/id_ed25519" "$HOME/.ssh/authorized_keys" '
    "|| { echo \"dlc-airflow: cannot put the job's SSH keys in $HOME/.ssh "
    '(the image\'s user needs a writable home)" >&2; exit 1; }'
)


def ssh_secret_name(name: str) -> str:
    return child_name(name, "ssh")


def wait_for_hosts(hostfile: str) -> str:
    """A shell line: wait until every host of the hostfile resolves, or fail saying which."""
    return (
        f"for h in $(cut -d' ' -f1 {hostfile}); do n=0; until getent hosts \"$h\" >/dev/null; do "
        f'n=$((n + 1)); [ $n -lt {WAIT_SECONDS} ] || {{ echo "dlc-airflow: worker $h did not resolve '
        f'in {WAIT_SECONDS}s" >&2; exit 1; }}; sleep 1; done; done'
    )


def ssh_keys(job: DLCJob, name: str, labels: dict[str, str],
             annotations: dict[str, str]) -> tuple[Manifest, Volumes] | None:
    """The job's SSH key Secret as render shows it, and its volume + mount; None for jobs
    without a hostfile (nothing logs in over SSH)."""
    if hostfile_spec(job) is None:
        return None
    metadata: Manifest = {"name": ssh_secret_name(name), "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    secret: Manifest = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "kubernetes.io/ssh-auth",
                        "stringData": {_PRIVATE: PLACEHOLDER, _PUBLIC: PLACEHOLDER}}
    items = [{"key": _PRIVATE, "path": "id_ed25519"}, {"key": _PUBLIC, "path": "id_ed25519.pub"},
             {"key": _PUBLIC, "path": "authorized_keys"}]
    # readable by the container's user, whoever it is: INSTALL_KEYS makes its own 0600 copy
    volume = {"name": "ssh-keys", "secret": {"secretName": ssh_secret_name(name), "items": items,
                                             "defaultMode": 0o444}}
    mount = {"name": "ssh-keys", "mountPath": KEYS_PATH, "readOnly": True}
    return secret, Volumes([volume], [mount])


def setup_lines(job: DLCJob, role: str, launcher: str) -> list[str]:
    """What the command wrapper runs first in a pod of `role` of a job with SSH keys."""
    hostfile = hostfile_spec(job)
    if hostfile is None:
        return []
    return [INSTALL_KEYS, wait_for_hosts(hostfile.path)] if role == launcher else [INSTALL_KEYS]


def fill_ssh_keys(objects: list[Manifest], name: str) -> list[Manifest]:
    """Rendered objects with a new key pair in the job's SSH Secret (if it has one)."""
    secret_name = ssh_secret_name(name)
    for obj in objects:
        if obj.get("kind") == "Secret" and obj["metadata"]["name"] == secret_name:
            private, public = new_key_pair(f"dlc-airflow/{name}")
            obj.pop("stringData", None)
            obj["data"] = {_PRIVATE: base64.b64encode(private.encode()).decode(),
                           _PUBLIC: base64.b64encode(public.encode()).decode()}
    return objects


def new_key_pair(comment: str) -> tuple[str, str]:
    """An Ed25519 key pair: the private key in OpenSSH's format, the public key line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {comment}\n"
