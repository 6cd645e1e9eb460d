"""`dlc-airflow` command line: render, validate, schema, sanity-check, jobs.

For developers: each subcommand lives in the module that owns its logic; this file only
wires argparse. Users read DESCRIPTION and EXAMPLES below (`dlc-airflow --help`); a new
command adds its sub-parser in build_parser with a one-line `help=`, which the help lists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def _render(args: argparse.Namespace) -> int:
    from dlc_airflow.registry import check, pure_backend
    from dlc_airflow.spec import load_job

    job = load_job(args.spec)
    check(args.backend, job)  # BackendError naming what it cannot run, and which backend can
    documents = pure_backend(args.backend).preview(job, args.name or job.name or "job")
    dump_yaml(documents, sys.stdout)
    return 0


def dump_yaml(documents: list[Any], out: Any) -> None:
    """YAML documents, multi-line strings (a batch script, a hostfile) as literal blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value and all(c == "\n" or c.isprintable() for c in value) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    yaml.dump_all(documents, out, Dumper=Dumper, sort_keys=False)


def _validate(args: argparse.Namespace) -> int:
    from dlc_airflow.policy import enforce
    from dlc_airflow.registry import check, entry, is_kubernetes, pure_backend
    from dlc_airflow.spec import load_job

    job = load_job(args.spec)
    rendered = ""
    if args.backend:
        check(args.backend, job)
    policy, source = validation_policy(args.policy, entry(args.backend).isolated if args.backend else True)
    enforce(policy, job, source)  # "refused by policy: ...", as the operator says it
    if args.backend and not is_kubernetes(args.backend):
        rendered = f"; the {args.backend} backend runs it"
    elif args.backend:
        objects = pure_backend(args.backend).preview(job, job.name or "job")
        rendered = f"; {args.backend} backend renders {len(objects)} object{'s' if len(objects) != 1 else ''}"
    total = job.total_replicas()
    print(f"{args.spec}: valid {job.type.value} job, {total} replica{'s' if total != 1 else ''} "
          f"in roles {', '.join(f'{r}={v.replicas}' for r, v in job.roles.items())}{rendered}; "
          f"allowed by {source}")
    return 0


def validation_policy(path: str | None, isolated: bool) -> tuple[Any, str]:
    """The policy `validate` applies: the file's (JSON or YAML, as the config's), else the
    Airflow config's where Airflow is installed and configured, over the backend's defaults."""
    from dlc_airflow.airflow.policy_source import floor_policy
    from dlc_airflow.policy import PolicyError

    if path is None:
        return floor_policy(isolated)
    import yaml

    where = f"policy file {path}"
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise PolicyError(f"cannot read {where}: {' '.join(str(exc).split())}") from None
    return floor_policy(isolated, raw if raw is not None else {}, where)


def _schema(args: argparse.Namespace) -> int:
    from dlc_airflow.spec import json_schema

    json.dump(json_schema(), sys.stdout, indent=2)
    print()
    return 0


def _sanity_check(args: argparse.Namespace) -> int:
    from dlc_airflow.runtime.sanity import run_checks

    return run_checks(args)


# What `dlc-airflow --help` says: written for users (the module docstring is for developers).
DESCRIPTION = """\
Work with DLC job specs and jobs from a shell: check a spec before a DAG uses it, see what
a backend would submit for it (Kubernetes objects, a Slurm batch script, a DLC request), check a job's container before training starts,
and list, inspect, stop, clone or delete the jobs your DAGs ran, on any backend.
A job spec is a YAML or JSON file (see `dlc-airflow schema`; examples in examples/specs/).
`dlc-airflow COMMAND --help` says more about each command."""

EXAMPLES = """\
examples:
  dlc-airflow validate examples/specs/pytorch.yaml                  # valid, or what is wrong
  dlc-airflow validate examples/specs/mpi.yaml --backend local      # and can this backend run it?
  dlc-airflow validate job.yaml --policy policy.json                # and does the admin's policy allow it?
  dlc-airflow render examples/specs/pytorch.yaml --backend jobset   # the manifests, as YAML
  dlc-airflow render examples/specs/pytorch.yaml --backend slurm    # the batch script and job request
  dlc-airflow schema > dlc-job.schema.json                          # for your editor
  dlc-airflow jobs list --backend local                             # the jobs your DAGs ran

exit status: 0 on success, 2 when the spec, the arguments or the backend are wrong (one line
on stderr saying what)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlc-airflow", description=DESCRIPTION, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    p = sub.add_parser("render", help="print what a backend would submit for a job spec, as YAML")
    p.add_argument("spec", help="job spec file (YAML or JSON)")
    p.add_argument("--backend", default="native",
                   help="any backend: the Kubernetes objects (native, kubeflow, trainer, jobset, ray), the "
                        "Slurm batch script and job request (slurm), the DLC CreateJob request (pai), the "
                        "local processes (local)")
    p.add_argument("--name", help="job name (default: the spec's name)")
    p.set_defaults(func=_render)

    p = sub.add_parser("validate", help="check a job spec (and that a backend can render it)")
    p.add_argument("spec")
    p.add_argument("--backend", help="also check this backend accepts the job (any backend, local included)")
    p.add_argument("--policy", metavar="FILE",
                   help="the admin's policy to apply (JSON or YAML, as [dlc_airflow] policy); default: the "
                        "Airflow config's, where Airflow is configured, else the defaults")
    p.set_defaults(func=_validate)

    p = sub.add_parser("schema", help="print the job spec's JSON Schema")
    p.set_defaults(func=_schema)

    p = sub.add_parser("sanity-check", help="preflight checks inside a job container")
    from dlc_airflow.runtime.sanity import add_arguments

    add_arguments(p)
    p.set_defaults(func=_sanity_check)

    from dlc_airflow.jobs_cli import add_parser as add_jobs

    add_jobs(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from dlc_airflow.jobs_cli import user_errors

    # Commands that read Airflow's config or connections import Airflow, whose import logs at
    # info level on some versions (3.1: alembic's plugins); this tool's output is its own lines
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except tuple(user_errors()) as exc:
        # one line on stderr whatever the message held
        print("error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dlc-airflow render ... | head`: the reader stopped early
        sys.stdout = None
        return 0


if __name__ == "__main__":
    sys.exit(main())
