"""The environment a real pod's program sees, resolved from the pod object the API server holds.

1. static `value`s;
2. Downward API `fieldRef`s, read from the pod's own metadata (the completion-index
   annotation the Job controller wrote on this pod, labels, name...);
3. the shell prelude: the pod's real container command is run with /bin/sh, the user's
   argv replaced by `env -0`, with 1. and 2. as its environment. Its setup steps that need
   the pod's volumes and peers (an MPI job's SSH keys, the launcher's wait for its workers:
   k8s/backends/sshkeys.py) are left out; tests/node runs them for real.

Test helper, not a test module. kwok does not run containers, so this is how the tests see
what a framework would read on a real node.
"""

from __future__ import annotations

import re
import subprocess

from dlc_airflow.k8s.backends.podspec import PRELUDE_ARGV0
from dlc_airflow.k8s.backends.sshkeys import INSTALL_KEYS

_FIELD = re.compile(r"^metadata\.(annotations|labels)\['([^']+)'\]$")
_PLAIN_FIELDS = {
    "metadata.name": lambda pod: pod["metadata"]["name"],
    "metadata.namespace": lambda pod: pod["metadata"]["namespace"],
    "metadata.uid": lambda pod: pod["metadata"]["uid"],
    "spec.nodeName": lambda pod: pod["spec"].get("nodeName", ""),
    "spec.serviceAccountName": lambda pod: pod["spec"].get("serviceAccountName", ""),
}
# Enough for `exec "$@"` to find `env`; removed from the result again.
_PATH = "/usr/local/bin:/usr/bin:/bin"
_WAIT_FOR_HOSTS = re.compile(r"for h in \$\(cut -d' ' -f1 [^)]*\); do .*?; done; done; ")


def field_value(pod: dict, path: str) -> str:
    """What the kubelet puts into an env var with this fieldRef."""
    if m := _FIELD.match(path):
        values = pod["metadata"].get(m.group(1)) or {}
        if m.group(2) not in values:
            raise AssertionError(f"pod {pod['metadata']['name']}: fieldRef {path} names a missing {m.group(1)[:-1]}")
        return values[m.group(2)]
    if path in _PLAIN_FIELDS:
        return _PLAIN_FIELDS[path](pod)
    raise AssertionError(f"pod {pod['metadata']['name']}: fieldRef {path} is not resolved by this helper")


def static_env(pod: dict, container: dict) -> dict[str, str]:
    """Values and fieldRefs (secret and configMap refs are left out: not ours to read)."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "fieldRef" in (entry.get("valueFrom") or {}):
            env[entry["name"]] = field_value(pod, entry["valueFrom"]["fieldRef"]["fieldPath"])
        elif "valueFrom" not in entry:
            env[entry["name"]] = ""
    return env


def container_env(pod: dict, container_name: str = "main") -> dict[str, str]:
    """The env the user's program sees in `container_name` of this pod."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == container_name)
    env = static_env(pod, container)
    command = container.get("command") or []
    if command[:2] == ["/bin/sh", "-c"] and len(command) > 3 and command[3] == PRELUDE_ARGV0:
        script = _WAIT_FOR_HOSTS.sub("", command[2].replace(INSTALL_KEYS + "; ", ""))
        argv = ["/bin/sh", "-c", script, PRELUDE_ARGV0, "env", "-0"]  # `env` instead of the user's program
    else:
        argv = ["env", "-0"]
    added_path = "PATH" not in env
    run_env = {**env, "PATH": _PATH} if added_path else env
    out = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise AssertionError(f"pod {pod['metadata']['name']}: {argv} failed ({out.returncode}): {out.stderr}")
    seen = dict(item.split("=", 1) for item in out.stdout.split("\0") if item)
    for key in ("PWD", "SHLVL", "_") + (("PATH",) if added_path else ()):
        if key not in env:
            seen.pop(key, None)  # the shell's own
    return seen
