"""HA at 100 deferred tasks: tests/airflow/test_ha.py (PostgreSQL, two schedulers, two
triggerers, one triggerer SIGKILLed while every task waits, then one scheduler) with
DLC_HA_TASKS=100. It fails
on any duplicate Job, lost finish or task that did not end once; the report keeps how long
the waits took to move and the tasks to end after their jobs were released.

    scripts/postgres-local up && .venv/bin/python benchmarks/airflow_ha.py [--tasks 100]

Results: benchmarks/results/airflow_ha.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "airflow_ha.json"))
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DLC_HA_TASKS": str(args.tasks), "DLC_HA_REPORT": str(out)}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "tests/airflow/test_ha.py",
                           "-p", "no:cacheprovider"], cwd=REPO, env=env)
    if done.returncode != 0:
        sys.exit(f"the HA run failed (pytest exit {done.returncode}); see its output above")
    report = json.loads(out.read_text())
    report["wall_s"] = round(time.monotonic() - began, 1)
    report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    out.write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
