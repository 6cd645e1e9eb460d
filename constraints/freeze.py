"""Write the constraints file of the tested set: what `pip install -e ".[EXTRAS]"` brings.

    .venv/bin/python constraints/freeze.py > constraints/constraints-py3.11.txt

and, in a venv of an older Airflow that `make test-compat` passed in (scripts/test-compat;
the extras it installs, without the demo's; the file is named by that Airflow):

    VENV/bin/python constraints/freeze.py --airflow > constraints/constraints-3.1.8-py3.11.txt

It walks the installed distributions' requirements from dlc-airflow with the extras the
Makefile installs (markers evaluated for this interpreter) and prints the pinned versions of
exactly those, as `pip freeze --all --exclude-editable` spells them: packages installed by hand for other
work stay out. Run it in the venv `make install-demo` made and the tests passed in.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import metadata

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

EXTRAS = ("airflow", "test", "pai", "demo")
COMPAT_EXTRAS = ("airflow", "test", "pai")  # make test-compat's venvs: no PyTorch
ROOT = "dlc-airflow"


def _applies(req: Requirement, extra: str) -> bool:
    if req.marker is None:
        return True
    env = {key: str(value) for key, value in default_environment().items()}
    env["extra"] = extra
    return req.marker.evaluate(env)


def closure(root: str, extras: tuple[str, ...]) -> dict[str, str]:
    """{canonical name: version} of every installed distribution `root[extras]` needs."""
    seen: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in done:
            continue
        done.add((name, wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement whose marker excludes it was not installed: not ours to pin
        seen[canonicalize_name(dist.metadata["Name"])] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if any(_applies(req, extra) for extra in ("", *wanted)):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    seen.pop(canonicalize_name(root), None)
    return seen


def frozen() -> list[str]:
    """`pip freeze --all --exclude-editable` of this interpreter, as pip spells it (--all: torch needs setuptools)."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"], check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and not line.startswith("#")]


def main() -> int:
    compat = "--airflow" in sys.argv[1:]
    extras = COMPAT_EXTRAS if compat else EXTRAS
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    name = f"constraints-{metadata.version('apache-airflow')}-{python}.txt" if compat else f"constraints-{python}.txt"
    pins = closure(ROOT, extras)
    lines = [line for line in frozen() if canonicalize_name(re.split(r"[=@ ]", line, maxsplit=1)[0]) in pins]
    missing = set(pins) - {canonicalize_name(re.split(r"[=@ ]", line, maxsplit=1)[0]) for line in lines}
    if missing:
        print(f"not in pip freeze: {sorted(missing)}", file=sys.stderr)
        return 1
    print(f"# The tested set: what `pip install -e \".[{','.join(extras)}]\"` installed on Python "
          f"{sys.version_info.major}.{sys.version_info.minor}, and the tests passed with.")
    if compat:
        print("# scripts/test-compat (make test-compat) installs with `-c` this file. Regenerate in its venv: "
              f"VENV/bin/python constraints/freeze.py --airflow > constraints/{name}")
    else:
        print(f"# The Makefile installs with `-c` this file. Regenerate: .venv/bin/python constraints/freeze.py > "
              f"constraints/{name}")
    for line in sorted(lines, key=str.lower):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
