"""The prelude srun starts in every task of a slurm job: the replica's framework env from
SLURM_*, then its health check and command.

    srun --ntasks=N --ntasks-per-node=1 --distribution=block <python> -m dlc_airflow.slurm.prelude

Task SLURM_PROCID = k is replica k in rank order (the roles in jobtypes.ROLE_ORDER, each
role's replicas in index order: master-0, worker-0, worker-1...) and runs on node k of
SLURM_JOB_NODELIST. Its env is what the local backend gives the same replica (the same
functions, dlc_airflow.wiring and dlc_airflow.local.plan.inherited_env), with:
- hosts: the node of replica i of a role, by name when the name resolves (as on a cluster
  whose NodeNames are host names), else by its NodeAddr (`scontrol show node`, one call);
- the rendezvous port: the job's `port`, else 20000 + SLURM_JOB_ID % 10000 (nodes are
  shared between jobs on Slurm: a fixed default would collide);
- DLC_OUTPUT_FILE <jobdir>/outputs/<role>-<i>.json, JOB_COMPLETION_INDEX, the hostfile at
  <jobdir>/hostfile (written by every task, atomically: the same content);
- PATH with this interpreter's folder first.

The replica's output goes to <jobdir>/logs/<role>-<i>.log and its exit code to
<jobdir>/exits/<role>-<i>. Signals Slurm sends the step (scancel, the time limit) are
passed on to the command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dlc_airflow import jobfolder, wiring
from dlc_airflow.jobtypes import ordered_roles
from dlc_airflow.slurm import backend as layout
from dlc_airflow.spec import DLCJob, hostfile_spec

PORT_BASE, PORT_SPAN = 20000, 10000


@dataclass(frozen=True)
class Task:
    role: str
    index: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log: str
    exit_file: str
    health_argv: list[str] | None = None
    hostfile: str | None = None  # its text, when the job has one
    hostfile_path: str | None = None

    @property
    def key(self) -> str:
        return f"{self.role}-{self.index}"


def replicas(job: DLCJob) -> list[tuple[str, int]]:
    """(role, index) of every replica, in task order (= rank order)."""
    return [(role, i) for role in ordered_roles(job.roles) for i in range(job.roles[role].replicas)]


def rendezvous_port(job: DLCJob, job_id: int) -> int:
    return job.port or PORT_BASE + job_id % PORT_SPAN


def plan_task(job: DLCJob, name: str, procid: int, nodes: list[str], address: Callable[[str], str],
              jobdir: str, environ: Mapping[str, str], job_id: int) -> Task:
    """The replica task `procid` runs (pure: `address` maps a node name to how peers reach it)."""
    from dlc_airflow.local.plan import inherited_env

    order = replicas(job)
    if not 0 <= procid < len(order):
        raise ValueError(f"task {procid} of a job of {len(order)} replicas")
    if len(nodes) < len(order):
        raise ValueError(f"the job has {len(order)} replicas but {len(nodes)} nodes ({','.join(nodes)})")
    first: dict[str, int] = {}
    for k, (role, _) in enumerate(order):
        first.setdefault(role, k)
    port = rendezvous_port(job, job_id)
    addr = wiring.Addressing(host=lambda role, i: address(nodes[first[role] + i]), port=lambda role, i: port)
    role, index = order[procid]
    key = f"{role}-{index}"
    env = inherited_env(environ)
    env.update(wiring.replica_env(job, name, role, index, addr))
    env["JOB_COMPLETION_INDEX"] = str(index)
    env["DLC_OUTPUT_FILE"] = f"{jobdir}/{jobfolder.OUTPUTS}/{key}.json"
    spec = hostfile_spec(job)
    hostfile = hostfile_path = None
    if spec is not None:
        hostfile = wiring.hostfile(job, addr, spec.slots)
        hostfile_path = f"{jobdir}/{layout.HOSTFILE}"
        env.update({k: hostfile_path for k, v in env.items() if v == spec.path})
    return Task(role=role, index=index, argv=job.role_command(role), env=env, cwd=job.working_dir or jobdir,
                log=f"{jobdir}/{jobfolder.LOGS}/{key}.log", exit_file=f"{jobdir}/{layout.EXITS}/{key}",
                health_argv=list(job.health_check.command) if job.health_check else None,
                hostfile=hostfile, hostfile_path=hostfile_path)


_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_nodelist(text: str) -> list[str]:
    """Slurm's hostlist syntax ('dlc[1-3,5],gpu[01-02]') as node names, in order."""
    out: list[str] = []
    for part in _split_top(text.strip()):
        out.extend(_expand(part))
    return out


def _split_top(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p]


def _expand(pattern: str) -> list[str]:
    match = _BRACKET.search(pattern)
    if not match:
        return [pattern]
    head, tail = pattern[:match.start()], pattern[match.end():]
    out: list[str] = []
    for item in match.group(1).split(","):
        low, _, high = item.partition("-")
        width = len(low)
        for n in range(int(low), int(high or low) + 1):
            out.extend(head + str(n).zfill(width) + rest for rest in _expand(tail))
    return out


# -- I/O: runs in the task --------------------------------------------------------------------


class Resolver:
    """Node name -> address its peers dial: the name if it resolves, else its NodeAddr."""

    def __init__(self, nodelist: str):
        self.nodelist = nodelist
        self._addrs: dict[str, str] | None = None

    def __call__(self, node: str) -> str:
        try:
            socket.getaddrinfo(node, None)
            return node
        except OSError:
            pass
        if self._addrs is None:
            self._addrs = node_addresses(self.nodelist)
        return self._addrs.get(node, node)


def node_addresses(nodelist: str) -> dict[str, str]:
    """NodeName -> NodeAddr of the job's nodes, from one `scontrol show node -o` call."""
    try:
        done = subprocess.run(["scontrol", "show", "node", "-o", nodelist], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in done.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S+)", line))
        if "NodeName" in fields and "NodeAddr" in fields:
            out[fields["NodeName"]] = fields["NodeAddr"]
    return out


def load_job(environ: Mapping[str, str]) -> DLCJob:
    from dlc_airflow.secrets.resolve import with_values

    job = DLCJob.model_validate(json.loads(environ[layout.ENV_SPEC]))
    values = secret_values(environ)
    return with_values(job, values) if values else job


def secret_values(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The job's secret values, from its secrets file (DLC_SLURM_SECRETS names it); {} without one."""
    path = environ.get(layout.ENV_SECRETS)
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            found: dict[str, dict[str, str]] = json.load(handle)
    except OSError as exc:
        raise SystemExit(f"[dlc-airflow] cannot read the job's secrets file {path}: {exc.strerror} (the job "
                         "must run as the user of the Airflow worker that wrote it, 0600)") from None
    return found


def _write(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    Path(tmp).write_text(text)
    os.replace(tmp, path)


def _run(argv: list[str], task: Task, log: int, redact: Callable[[bytes], bytes] | None = None) -> int:
    """Run argv with its output in the log (through `redact` when the job has secret values:
    they never reach the job folder), passing on the signals Slurm sends the step."""
    try:
        child = subprocess.Popen(argv, env=task.env, cwd=task.cwd, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE if redact else log, stderr=subprocess.STDOUT)
    except OSError as exc:
        os.write(log, f"[dlc-airflow] cannot run {argv[0]!r}: {exc.strerror}\n".encode())
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        signal.signal(sig, forward)
    if redact is not None and child.stdout is not None:
        copy(child.stdout, log, redact)
    code = child.wait()
    return 128 - code if code < 0 else code


def copy(source: Any, log: int, redact: Callable[[bytes], bytes]) -> None:
    """Line by line (a value is masked whole), each line redacted, into the log."""
    for line in iter(lambda: source.readline(1 << 16), b""):
        os.write(log, redact(line))


def redactor_of(environ: Mapping[str, str]) -> Callable[[bytes], bytes] | None:
    """bytes -> bytes masking the job's secret values (its secrets file); None without any."""
    from dlc_airflow.secrets.mask import redactor

    values = secret_values(environ)
    found = redactor(v for group in values.values() for v in group.values())
    return found if found else None


def main(environ: Mapping[str, str] | None = None) -> int:
    environ = dict(os.environ if environ is None else environ)
    job = load_job(environ)
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ["SLURM_JOB_NODELIST"]
    task = plan_task(job, environ[layout.ENV_NAME], int(environ["SLURM_PROCID"]), expand_nodelist(nodelist),
                     Resolver(nodelist), environ[layout.ENV_JOBDIR], environ, int(environ.get("SLURM_JOB_ID", "0")))
    for folder in (jobfolder.LOGS, jobfolder.OUTPUTS, layout.EXITS):
        os.makedirs(f"{environ[layout.ENV_JOBDIR]}/{folder}", exist_ok=True)
    if task.hostfile is not None and task.hostfile_path is not None:
        _write(task.hostfile_path, task.hostfile)
    Path(task.exit_file).unlink(missing_ok=True)  # a restarted step's replica starts afresh
    redact = redactor_of(environ)
    log = os.open(task.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.makedirs(task.cwd, exist_ok=True)
    except OSError as exc:  # working_dir is a path of an image, not of the nodes
        os.write(log, f"[dlc-airflow] working_dir {task.cwd}: {exc.strerror}; running in the job folder\n".encode())
        task = replace(task, cwd=environ[layout.ENV_JOBDIR])
    try:
        code = _run(task.health_argv, task, log, redact) if task.health_argv else 0
        if code != 0:
            os.write(log, f"[dlc-airflow] health check failed with exit code {code}\n".encode())
        else:
            code = _run(task.argv, task, log, redact)
    finally:
        os.close(log)
    _write(task.exit_file, f"{code}\n")
    return code


def redact_main(environ: Mapping[str, str]) -> int:
    """`prelude redact`: stdin to stdout with the job's secret values masked (a slurm job's
    script output goes through it on its way to the job folder)."""
    redact = redactor_of(environ) or (lambda data: data)
    copy(sys.stdin.buffer, sys.stdout.fileno(), redact)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["redact"]:
        sys.exit(redact_main(os.environ))
    if sys.argv[1:] == ["export"]:  # a slurm job's script: its env's secret values, for eval
        sys.stdout.write(layout.script_exports(secret_values(os.environ)))
        sys.exit(0)
    sys.exit(main())
