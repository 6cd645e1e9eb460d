"""`dlc-airflow` command line: render, validate, schema, sanity-check, jobs.

For developers: each subcommand lives in the module that owns its logic; this file only
wires argparse. Users read DESCRIPTION and EXAMPLES below (`dlc-airflow --help`); a new
command adds its sub-parser in build_parser with a one-line `help=`, which the help lists.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _kubernetes_backend(name: str) -> Any:
    """The backend `name` as the operator spells it (every backend is listed when it is
    unknown); `render` prints Kubernetes objects, which the local backend has none of."""
    from dlc_airflow.errors import BackendError
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.registry import check_backend_name, is_kubernetes

    check_backend_name(name)
    if not is_kubernetes(name):
        raise BackendError(f"the {name} backend makes no Kubernetes objects to render: use `dlc-airflow validate "
                           f"--backend {name}` to check the spec, or render for a Kubernetes backend")
    return get_backend(name)


def _render(args: argparse.Namespace) -> int:
    import yaml

    from dlc_airflow.spec import load_job

    job = load_job(args.spec)
    backend = _kubernetes_backend(args.backend)
    name = args.name or job.name or "job"
    objects = backend.render(job, name)
    yaml.safe_dump_all(objects, sys.stdout, sort_keys=False)
    return 0


def _validate(args: argparse.Namespace) -> int:
    from dlc_airflow.registry import check, is_kubernetes
    from dlc_airflow.spec import load_job

    job = load_job(args.spec)
    rendered = ""
    if args.backend:
        check(args.backend, job)
    if args.backend and not is_kubernetes(args.backend):
        rendered = f"; the {args.backend} backend runs it"
    elif args.backend:
        backend = _kubernetes_backend(args.backend)
        objects = backend.render(job, job.name or "job")
        rendered = f"; {backend.name} backend renders {len(objects)} object{'s' if len(objects) != 1 else ''}"
    total = job.total_replicas()
    print(f"{args.spec}: valid {job.type.value} job, {total} replica{'s' if total != 1 else ''} "
          f"in roles {', '.join(f'{r}={v.replicas}' for r, v in job.roles.items())}{rendered}")
    return 0


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
Work with DLC job specs and jobs from a shell: check a spec before a DAG uses it, see the
Kubernetes objects a backend makes of it, check a job's container before training starts,
and list, inspect, stop, clone or delete the jobs your DAGs ran, on any backend.
A job spec is a YAML or JSON file (see `dlc-airflow schema`; examples in examples/specs/).
`dlc-airflow COMMAND --help` says more about each command."""

EXAMPLES = """\
examples:
  dlc-airflow validate examples/specs/pytorch.yaml                  # valid, or what is wrong
  dlc-airflow validate examples/specs/mpi.yaml --backend local      # and can this backend run it?
  dlc-airflow render examples/specs/pytorch.yaml --backend jobset   # the manifests, as YAML
  dlc-airflow schema > dlc-job.schema.json                          # for your editor
  dlc-airflow jobs list --backend local                             # the jobs your DAGs ran

exit status: 0 on success, 2 when the spec, the arguments or the backend are wrong (one line
on stderr saying what)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dlc-airflow", description=DESCRIPTION, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    p = sub.add_parser("render", help="print the Kubernetes objects of a job spec as YAML")
    p.add_argument("spec", help="job spec file (YAML or JSON)")
    p.add_argument("--backend", default="native", help="a Kubernetes backend: native, kubeflow, trainer, jobset, ray")
    p.add_argument("--name", help="job name (default: the spec's name)")
    p.set_defaults(func=_render)

    p = sub.add_parser("validate", help="check a job spec (and that a backend can render it)")
    p.add_argument("spec")
    p.add_argument("--backend", help="also check this backend accepts the job (any backend, local included)")
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

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except tuple(user_errors()) as exc:
        # one line on stderr whatever the message held
        print("error: " + " ".join(str(exc).splitlines()), file=sys.stderr)
        return 2
    except BrokenPipeError:  # `dlc-airflow render ... | head`: the reader stopped early
        sys.stdout = None
        return 0


if __name__ == "__main__":
    sys.exit(main())
