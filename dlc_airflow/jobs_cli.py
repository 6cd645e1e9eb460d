"""`dlc-airflow jobs`: the jobs of every backend from a shell (DLC's list, stop, clone, share,
script and delete), through the same runners the operator uses.

    dlc-airflow jobs list [--dag D] [--task T] [--run R] [--state S]
    dlc-airflow jobs describe NAME          roles, replicas, restarts, events, timeline
    dlc-airflow jobs logs NAME [--role R] [--replica I] [--follow]
    dlc-airflow jobs stop NAME | delete NAME
    dlc-airflow jobs clone NAME [--set field=value ...] [--name NEW]
    dlc-airflow jobs script NAME [--as yaml|dag]

Where: --backend (default: every backend configured here: the Kubernetes ones when a cluster
is, local when no cluster is or --local-root is given, slurm and pai when their default
connection exists), --conn-id (an Airflow connection, as the operator's; default
kubernetes_default when it exists, else the kubeconfig), --namespace, --local-root. Output: a
table, or -o json|yaml.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeAlias

from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.registry import entry, is_folder
from dlc_airflow.runner import EventSource, JobRunner, SpecKeeper

# What a command prints: a row list (a table), a document, or nothing (it said what it did).
Result: TypeAlias = "JSONObject | list[JSONObject] | None"


class CliError(Exception):
    """A user error: printed as one line, exit code 2."""


# -- where the jobs are ---------------------------------------------------------------------
def runners(args: argparse.Namespace) -> list[JobRunner]:
    """One runner per backend the command looks at: the one --backend names, else every
    backend configured here (see the module's docstring)."""
    from dlc_airflow.airflow.runners import choose_backend, connection_exists, make_runner
    from dlc_airflow.registry import ENTRIES

    if args.backend:
        choose_backend(args.backend, args.conn_id)  # checks the name, and that a named connection exists
        conn_id = args.conn_id or entry(args.backend).default_conn_id
        return [make_runner(args.backend, conn_id, args.namespace, local_root=args.local_root)]
    chosen, conn_id, _why = choose_backend(None, args.conn_id)
    where: list[tuple[str, str]] = []  # (backend, connection id)
    for name, known in ENTRIES.items():
        if known.kubernetes and ENTRIES[chosen].kubernetes:
            where.append((name, conn_id))
        elif known.folder and (name == chosen or args.local_root):
            where.append((name, ""))
        elif not known.kubernetes and known.connection and connection_exists(known.default_conn_id):
            where.append((name, known.default_conn_id))
    return [make_runner(name, conn, args.namespace, local_root=args.local_root) for name, conn in where]


def find(args: argparse.Namespace, name: str) -> tuple[JobRunner, JobRef]:
    for runner in runners(args):
        ref = runner.lookup(name)
        if ref is not None:
            return runner, ref
    where = args.backend or "any backend"
    raise CliError(f"no job {name!r} on {where} in {args.namespace or 'the default namespace'}: "
                   "see `dlc-airflow jobs list` (and --backend / --namespace / --local-root)")


# -- commands ---------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> Result:
    rows = []
    for runner in runners(args):
        try:
            found = runner.jobs(dag_id=args.dag, task_id=args.task, run_id=args.run)
        except Exception as exc:
            if args.backend:
                raise
            # one unreachable backend among several: list the others, say which was left out
            print(f"{runner.backend_name}: jobs not listed: {exc}", file=sys.stderr)
            continue
        for info in found:
            status = runner.status(info.ref)
            if args.state and status.state.value != args.state.upper():
                continue
            rows.append({**_info_row(info), "state": status.state.value, "reason": status.reason,
                         "restarts": status.restarts})
    return rows


def _info_row(info: JobInfo) -> JSONObject:
    return {"name": info.ref.name, "backend": info.ref.backend, "namespace": info.ref.place,
            "dag": info.dag_id, "task": info.task_id, "run": info.run_id, "try": info.try_number,
            "attempt": info.ref.attempt, "created": _time(info.created)}


def cmd_describe(args: argparse.Namespace) -> Result:
    from dlc_airflow.airflow.waiting import describe_event

    runner, ref = find(args, args.name)
    status = runner.status(ref)
    info = next((i for i in runner.jobs() if i.ref.name == ref.name), JobInfo(ref))
    return {
        **_info_row(info), "uid": ref.uid, "state": status.state.value, "reason": status.reason,
        "message": status.message, "restarts": status.restarts,
        "roles": {role: counts.model_dump() for role, counts in status.roles.items()},
        "timeline": {"created": _time(status.created), "started": _time(status.started),
                     "finished": _time(status.finished), **status.durations()},
        "replicas": [{"replica": r.name, "state": r.state, "node": r.node, "started": _time(r.started),
                      "finished": _time(r.finished), "exit_code": r.exit_code, "reason": r.reason,
                      "restarts": r.restarts} for r in runner.replicas(ref)],
        "events": [describe_event(e) for e in runner.events(ref)] if isinstance(runner, EventSource) else [],
    }


def cmd_logs(args: argparse.Namespace) -> Result:
    runner, ref = find(args, args.name)
    wanted = args.role + (f"-{args.replica}" if args.replica is not None else "") if args.role else None
    positions: JSONObject = {}
    while True:
        lines, positions = runner.logs(ref, positions)
        for replica, line in lines:
            if wanted is None or replica == wanted or (args.replica is None and replica.rpartition("-")[0] == wanted):
                print(f"[{replica}] {line}")
        if not args.follow or runner.status(ref).terminal:
            return None
        sys.stdout.flush()
        time.sleep(2)


def cmd_stop(args: argparse.Namespace) -> Result:
    runner, ref = find(args, args.name)
    if runner.status(ref).terminal:
        print(f"job {ref.name} has already ended: nothing to stop", file=sys.stderr)
        return None
    runner.stop(ref)
    print(f"stopped job {ref.name} ({ref.backend}, {ref.place})", file=sys.stderr)
    return None


def cmd_delete(args: argparse.Namespace) -> Result:
    runner, ref = find(args, args.name)
    runner.delete(ref)
    print(f"deleted job {ref.name} ({ref.backend}, {ref.place}) and what it made", file=sys.stderr)
    return None


def stored_job(runner: JobRunner, ref: JobRef) -> JSONObject:
    spec = runner.spec(ref) if isinstance(runner, SpecKeeper) else None
    if spec is None:
        raise CliError(f"job {ref.name} kept no spec ({ref.backend} backend, or a job submitted before specs "
                       "travelled with jobs): clone it from its DAG instead")
    return spec


def cmd_clone(args: argparse.Namespace) -> Result:
    """Submit a job's spec again, as a new job outside Airflow (the admin's policy applies)."""
    from dlc_airflow.airflow.policy_source import policy_for
    from dlc_airflow.naming import MAX_BASE_NAME, slug
    from dlc_airflow.policy import enforce
    from dlc_airflow.secrets.resolve import HIDDEN
    from dlc_airflow.spec import parse_job

    runner, ref = find(args, args.name)
    data = stored_job(runner, ref)
    for assignment in args.set or []:
        apply_setting(data, assignment)
    hidden = [f"env.{k}" for k, v in (data.get("env") or {}).items() if v == HIDDEN]
    hidden += [f"roles.{r}.env.{k}" for r, spec in (data.get("roles") or {}).items() if isinstance(spec, dict)
               for k, v in (spec.get("env") or {}).items() if v == HIDDEN]
    if hidden:
        raise CliError(f"{', '.join(hidden)}: a secret value was not kept with the job: give it again with "
                       f"--set {hidden[0]}=...")
    job = parse_job(data, source=f"clone of {ref.name}")
    name = args.name_new or f"{slug(ref.name.rsplit('-', 2)[0], MAX_BASE_NAME - 7)}-{random.getrandbits(24):06x}"
    policy, source = policy_for(ref.backend, args.conn_id or entry(ref.backend).default_conn_id)
    enforce(policy, job, source)
    new, _ = runner.submit(job, name, None, 1)
    print(f"submitted job {new.name} ({new.backend}, {new.place}), a clone of {ref.name}", file=sys.stderr)
    return {"name": new.name, "backend": new.backend, "namespace": new.place, "uid": new.uid,
            "cloned_from": ref.name}


# Maps of strings whose keys may hold dots (annotations.example.com/ticket=ML-1): the rest of
# the path after them is one key, and the value stays the string written.
STRING_MAPS = ("env", "labels", "annotations", "node_selector")


def apply_setting(data: JSONObject, assignment: str) -> None:
    """`field.path=value` into the spec dict; the value is YAML (4, 0.1, [a, b], {k: v}),
    except in env, labels, annotations and node_selector, where it stays the string written."""
    import yaml

    path, sep, raw = assignment.partition("=")
    keys = [k for k in path.strip().split(".") if k]
    if not sep or not keys:
        raise CliError(f"--set {assignment!r}: write field=value, e.g. --set resources.gpu=2 or --set roles.worker=4")
    cut = next((i for i, k in enumerate(keys[:-1]) if k in STRING_MAPS), None)
    if cut is not None:
        keys = [*keys[:cut + 1], ".".join(keys[cut + 1:])]
    target = data
    for key in keys[:-1]:
        child = target.get(key)
        if child is None:
            child = target[key] = {}
        if not isinstance(child, dict):
            raise CliError(f"--set {path}: {key} is {child!r}, not a section with fields")
        target = child
    if cut is not None:
        target[keys[-1]] = raw
        return
    try:
        target[keys[-1]] = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError as exc:
        raise CliError(f"--set {path}: {raw!r} is not a value ({' '.join(str(exc).split())})") from None


def cmd_script(args: argparse.Namespace) -> Result:
    import yaml

    runner, ref = find(args, args.name)
    data = stored_job(runner, ref)
    if args.as_ == "yaml":
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
        return None
    info = next((i for i in runner.jobs() if i.ref.name == ref.name), JobInfo(ref))
    sys.stdout.write(dag_snippet(data, info))
    return None


def dag_snippet(data: JSONObject, info: JobInfo) -> str:
    """A DAG file that runs the same job (the spec as submitted: templates already rendered)."""
    import pprint

    ref = info.ref
    dag_id = info.dag_id or f"{ref.name.replace('-', '_')}_dag"
    task_id = info.task_id.rsplit(".", 1)[-1] if info.task_id else "job"
    place = "local_root" if is_folder(ref.backend) else "namespace"
    where = f'backend="{ref.backend}", {place}="{ref.place}"'
    job = pprint.pformat(data, width=100, sort_dicts=False)
    return (
        f'"""Reproduces dlc-airflow job {ref.name} ({ref.backend}, {ref.place})."""\n\n'
        "from datetime import datetime, timezone\n\n"
        "from airflow.sdk import DAG\n\n"
        "from dlc_airflow.operators import DLCJobOperator\n\n"
        f"JOB = {job}\n\n"
        f'with DAG("{dag_id}", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):\n'
        f'    DLCJobOperator(task_id="{task_id}", job=JOB, {where})\n'
    )


# -- output -----------------------------------------------------------------------------------
def _time(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""


def emit(result: Result, output: str) -> None:
    if result is None:
        return
    if output == "json":
        json.dump(result, sys.stdout, indent=2, default=str)
        print()
    elif output == "yaml":
        import yaml

        yaml.safe_dump(result, sys.stdout, sort_keys=False)
    elif isinstance(result, list):
        print(table(result, ["name", "backend", "namespace", "state", "restarts", "dag", "task", "run", "created"]))
    else:
        print(describe_text(result))


def table(rows: list[JSONObject], columns: list[str]) -> str:
    if not rows:
        return "no jobs"
    cells = [[str(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def describe_text(data: JSONObject) -> str:
    lines = [f"{k}: {v}" for k, v in data.items() if not isinstance(v, (dict, list))]
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {v}" for k, v in value.items()]
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{key}:")
            lines += ["  " + line for line in table(value, list(value[0])).splitlines()]
        elif isinstance(value, list):
            lines.append(f"{key}:" + ("" if value else " none"))
            lines += [f"  {v}" for v in value]
    return "\n".join(lines)


# -- argparse ---------------------------------------------------------------------------------
COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], Result], str]] = {
    "list": (cmd_list, "the jobs, with their state (filter by DAG, task, run, state)"),
    "describe": (cmd_describe, "one job: roles, replicas, restarts, events and timeline"),
    "logs": (cmd_logs, "a job's logs, every replica's lines prefixed [role-index]"),
    "stop": (cmd_stop, "stop a job (its objects stay)"),
    "delete": (cmd_delete, "stop a job and remove everything it made"),
    "clone": (cmd_clone, "submit a job's spec again as a new job, outside Airflow"),
    "script": (cmd_script, "print a job's spec as YAML, or a DAG that runs it"),
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    jobs = sub.add_parser("jobs", help="list, inspect, stop, clone and delete jobs on any backend",
                          description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)
    for name, (func, help_text) in COMMANDS.items():
        p = jobs_sub.add_parser(name, help=help_text, description=help_text)
        _common(p)
        if name == "list":
            p.add_argument("--dag", help="only jobs of this DAG id")
            p.add_argument("--task", help="only jobs of this task id")
            p.add_argument("--run", help="only jobs of this run id")
            p.add_argument("--state", help="only jobs in this state (RUNNING, SUCCEEDED, FAILED...)")
        else:
            p.add_argument("name", help="the job's name (see `dlc-airflow jobs list`)")
        if name == "logs":
            p.add_argument("--role", help="only this role's replicas (e.g. worker)")
            p.add_argument("--replica", type=int, help="only this replica of --role (its index)")
            p.add_argument("--follow", "-f", action="store_true", help="keep printing until the job ends")
        if name == "clone":
            p.add_argument("--set", action="append", metavar="FIELD=VALUE",
                           help="change a field of the spec, e.g. --set resources.gpu=2 (repeatable)")
            p.add_argument("--name", dest="name_new", help="the new job's name (default: a fresh one)")
        if name == "script":
            p.add_argument("--as", dest="as_", choices=["yaml", "dag"], default="yaml",
                           help="the spec as YAML (default), or a DAG file that runs it")
        p.set_defaults(func=run(func))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", help="one backend (native, jobset, kubeflow, trainer, ray, local, slurm, pai); "
                   "default: every Kubernetes backend when a cluster is configured, else local")
    p.add_argument("--conn-id", help="the Airflow connection (default: kubernetes_default if it exists, "
                   "else your kubeconfig)")
    p.add_argument("--namespace", "-n", help="Kubernetes namespace (default: the connection's or kubeconfig's)")
    p.add_argument("--local-root", help="the local backend's job root")
    p.add_argument("--output", "-o", choices=["table", "json", "yaml"], default="table")


def run(func: Callable[[argparse.Namespace], Result]) -> Callable[[argparse.Namespace], int]:
    def command(args: argparse.Namespace) -> int:
        try:
            emit(func(args), args.output)
        except CliError as exc:
            raise UserError(str(exc)) from None
        return 0
    return command


class UserError(ValueError):
    """Raised to cli.main, which prints it as one line (exit code 2)."""


def user_errors() -> Iterable[type[BaseException]]:
    """The exceptions of the libraries underneath that are the user's to fix: one line each."""
    from dlc_airflow.airflow.runners import NoSuchConnection
    from dlc_airflow.errors import BackendError, SubmitError
    from dlc_airflow.k8s.errors import KubeError
    from dlc_airflow.policy import PolicyError
    from dlc_airflow.spec import SpecError

    # KubeError covers AuthError and KubeConfigError: their messages name the connection and what to do
    return (UserError, NoSuchConnection, BackendError, PolicyError, SubmitError, SpecError, KubeError)
