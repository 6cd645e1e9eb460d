"""What waiting on DLC jobs costs the DLC API: requests per waiting job-hour.

Side by side in one run, through the local STAND-IN for the DLC API
(tests/support/dlc_standin.py; the SDK's real client, the stand-in counts what it gets):

- shared: N followers (polling.PolledFollower) in one process (as N deferred tasks in one triggerer): one
  WorkspacePoller, ListJobs with JobIds for all of them each interval;
- per-job: the same N jobs polled with one GetJob each per interval (what a trigger per job
  that polls its own job costs).

Both poll every --interval seconds (1 s by default, so a short window holds many rounds);
requests per job-hour scale as 1/interval, and the table also gives them at the
connection's default interval (15 s). Run:

    .venv/bin/python benchmarks/pai_poller.py [--jobs 10 100 500] [--window 20] [--interval 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlc_airflow.pai.client import PaiClient  # noqa: E402
from dlc_airflow.pai.poller import PollerRegistry  # noqa: E402
from dlc_airflow.pai.runner import PaiRunner  # noqa: E402
from dlc_airflow.pai.settings import DEFAULT_POLL_INTERVAL, PaiSettings  # noqa: E402
from tests.support.dlc_standin import DLCStandIn  # noqa: E402

AK, SECRET, WORKSPACE = "LTAI5tBenchKey", "bench-secret", "ws-bench"


def create_jobs(client: PaiClient, count: int) -> list[str]:
    fields = {"JobType": "PyTorchJob", "UserCommand": "python t.py", "WorkspaceId": WORKSPACE, "ResourceId": "quota-1",
              "Envs": {"STANDIN_RUN_SECONDS": "36000"},
              "JobSpecs": [{"Type": "Worker", "PodCount": 1, "Image": "img",
                            "ResourceConfig": {"CPU": "1", "Memory": "1Gi"}}]}
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda i: client.create_job({**fields, "DisplayName": f"bench-{i}"}), range(count)))


def shared(runner: PaiRunner, standin: DLCStandIn, ids: list[str], window: float) -> dict:
    seen: set[str] = set()
    lock = threading.Lock()
    followers = []
    for job_id in ids:
        follower = runner.follow(runner.ref(None, f"bench-{job_id}", uid=job_id))
        follower.start(lambda st, pods, j=job_id: (lock.acquire(), seen.add(j), lock.release()))
        followers.append(follower)
    deadline = time.monotonic() + 30
    while len(seen) < len(ids) and time.monotonic() < deadline:  # every follower has its first status
        time.sleep(0.05)
    standin.reset_counts()
    time.sleep(window)
    counts = {a: standin.count(a) for a in ("ListJobs", "GetJob")}
    for follower in followers:
        follower.close()
    return {"requests": sum(counts.values()), "by_action": counts, "followers_served": len(seen)}


def per_job(client: PaiClient, standin: DLCStandIn, ids: list[str], window: float, interval: float) -> dict:
    standin.reset_counts()
    stop = time.monotonic() + window
    late = 0
    with ThreadPoolExecutor(8) as pool:
        while time.monotonic() < stop:
            round_start = time.monotonic()
            list(pool.map(client.get_job, ids))
            spent = time.monotonic() - round_start
            if spent > interval:
                late += 1  # the stand-in could not answer N GetJobs within one interval
            time.sleep(max(0.0, interval - spent))
    return {"requests": standin.count("GetJob"), "late_rounds": late}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, nargs="+", default=[10, 100, 500])
    parser.add_argument("--window", type=float, default=20.0, help="seconds measured per approach")
    parser.add_argument("--interval", type=float, default=1.0, help="poll interval of both approaches")
    args = parser.parse_args()
    rows = []
    with DLCStandIn({AK: (SECRET, None)}, {WORKSPACE}) as standin:
        settings = PaiSettings(conn_id="bench", region_id="cn-hangzhou", workspace_id=WORKSPACE,
                               endpoint=standin.url, access_key_id=AK, access_key_secret=SECRET,
                               poll_interval=args.interval)
        client = PaiClient(settings)
        for count in args.jobs:
            ids = create_jobs(client, count)
            runner = PaiRunner(replace(settings), registry=PollerRegistry())
            ours = shared(runner, standin, ids, args.window)
            theirs = per_job(client, standin, ids, args.window, args.interval)
            hours = args.window / 3600 * count  # waiting job-hours measured
            scale = args.interval / DEFAULT_POLL_INTERVAL
            row = {
                "jobs": count, "window_s": args.window, "interval_s": args.interval,
                "shared": ours, "per_job": theirs,
                "shared_per_job_hour": ours["requests"] / hours,
                "per_job_per_job_hour": theirs["requests"] / hours,
                "expected_shared_per_job_hour": math.ceil(count / settings.list_page_size) * 3600 / args.interval / count,
                "shared_per_job_hour_at_15s": ours["requests"] / hours * scale,
                "per_job_per_job_hour_at_15s": theirs["requests"] / hours * scale,
            }
            rows.append(row)
            print(f"{count:4d} jobs: shared {row['shared_per_job_hour']:8.1f} req/job-hour "
                  f"(ListJobs {ours['by_action']['ListJobs']}, GetJob {ours['by_action']['GetJob']}); "
                  f"per-job GetJob {row['per_job_per_job_hour']:8.1f} req/job-hour "
                  f"(late rounds {theirs['late_rounds']}); at 15 s: {row['shared_per_job_hour_at_15s']:.2f} vs "
                  f"{row['per_job_per_job_hour_at_15s']:.1f}", flush=True)
            for job_id in ids:  # leave the next size a clean workspace
                standin.jobs[job_id].deleted = True
    out = REPO / "benchmarks" / "results" / "pai_poller.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=1))
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
