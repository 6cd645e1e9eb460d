"""20 runs of the randomized fault soak (benchmarks/soak.py) in `make test`, in the production
shape: PostgreSQL, two schedulers and two triggerers. Task processes, a triggerer and a
scheduler SIGKILLed, PostgreSQL and the API server restarted, 10-30% of the API requests
refused or dropped, pods failing and preempted; 0 wrong final states, 0 duplicate jobs,
0 orphans, 0 lost finishes. The seed is printed (DLC_SOAK_SEED replays one)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak import soak

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(2400)]


def test_twenty_runs_under_random_faults(cluster, controllers, postgres):  # (the soak resets the database itself)
    seed = int(os.environ.get("DLC_SOAK_SEED") or time.time()) % 100000
    report = soak(20, seed, side_by_side=10, cluster=cluster, shape="production")
    summary = {k: report[k] for k in ("seed", "shape", "runs", "tasks", "wrong_final_state", "duplicate", "orphan",
                                      "lost finish", "faults", "components_exited_by_themselves")}
    problems = [p for r in report["results"] for p in r["problems"]]
    assert (report["wrong_final_state"], report["duplicate"], report["orphan"], report["lost finish"]) == \
        (0, 0, 0, 0), (summary, problems[:20])
    assert report["runs"] == 20
