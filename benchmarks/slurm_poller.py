"""What waiting on Slurm jobs costs slurmrestd, and how soon a finished job is noticed.

On the real local Slurm (scripts/slurm-local up), side by side in one run, for N waiting jobs
(held: PENDING for as long as the run lasts, so they wait without taking nodes):

- shared: N followers (polling.PolledFollower) in one process (as N deferred tasks in one triggerer) on the
  cluster's one poller: GET /jobs once per interval for all of them;
- per-job: the same N jobs polled with one GET /job/{id} each per interval (a trigger per job
  polling its own job), 8 threads.

Requests are counted by the clients over the same window. Requests per waiting job-hour =
requests in the window / (window x N) x 3600. Notice latency: K of the jobs are cancelled one
by one, at irregular moments, while the shared followers wait; latency = the follower's
terminal status minus the moment the cancel returned.

--remembered M: the cost of one poll for 10 followed jobs while slurmctld remembers M jobs (it
keeps finished ones for MinJobAge): the list of every job (GET /jobs, all a poll can ask
before v0.0.42) against the followed jobs' states (GET /jobs/state/, v0.0.42+), in bytes and
milliseconds (median of 5). Run:

    .venv/bin/python benchmarks/slurm_poller.py [--version 24.11] [--jobs 10 100 500] [--window 20] [--interval 2]
    .venv/bin/python benchmarks/slurm_poller.py --version 24.11 --remembered 1000 --jobs
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlc_airflow.naming import TaskIdentity, job_name  # noqa: E402
from dlc_airflow.slurm.backend import SlurmBackend, Target  # noqa: E402
from dlc_airflow.slurm.client import SlurmClient  # noqa: E402
from dlc_airflow.slurm.poller import poller_for  # noqa: E402
from dlc_airflow.slurm.runner import SlurmRunner  # noqa: E402
from dlc_airflow.slurm.settings import SlurmSettings  # noqa: E402
from dlc_airflow.spec import DLCJob  # noqa: E402


def local_settings(version: str | None) -> SlurmSettings:
    done = subprocess.run([str(REPO / "scripts" / "slurm-local"), *(["--version", version] if version else []), "env"],
                          capture_output=True, text=True, check=False)
    env = dict(re.findall(r"^export (\w+)=(.*)$", done.stdout, re.M))
    if "DLC_SLURM_URL" not in env:
        sys.exit(f"no local Slurm ({done.stderr.strip()}): run scripts/slurm-local up")
    return SlurmSettings(conn_id="bench", url=env["DLC_SLURM_URL"], user=env["DLC_SLURM_USER"],
                         token_file=env["DLC_SLURM_TOKEN_FILE"], job_root="/tmp/dlc-airflow-slurm-bench")


def submit_held(settings: SlurmSettings, count: int, tag: str) -> list[tuple[str, int]]:
    """count held jobs, each one of ours (its comment names a task), as (name, job id)."""
    client = SlurmClient(settings)
    backend, target = SlurmBackend(), Target.of(settings)
    job = DLCJob(type="custom", image="unused", roles={"main": 1}, shell="sleep 3600")

    def one(i: int) -> tuple[str, int]:
        identity = TaskIdentity("bench_slurm", f"wait_{i}", tag)
        name = job_name("bench", identity, 1)
        body = client.api.submit_body(backend.render(job, name, identity, 1, target))
        body["job"]["hold"] = True  # PENDING (JobHeldUser) until cancelled: waits without a node
        answer = client.call("POST", client.api.submit_path, body, fail=False)
        job_id = client.api.submitted_id(answer)
        if job_id is None:
            raise SystemExit(f"submit failed: {answer.get('errors')}")
        return name, job_id

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(count)))


def shared(settings: SlurmSettings, jobs: list[tuple[str, int]], window: float, cancel: int) -> dict:
    runner = SlurmRunner(settings)
    first: set[int] = set()
    ended: dict[int, float] = {}
    lock = threading.Lock()
    followers = []
    for name, job_id in jobs:
        follower = runner.follow(replace(runner.ref(None, name), uid=str(job_id)))

        def on_status(status, pods, job_id=job_id):
            with lock:
                first.add(job_id)
                if status.terminal and job_id not in ended:
                    ended[job_id] = time.monotonic()

        follower.start(on_status)
        followers.append(follower)
    deadline = time.monotonic() + 60
    while len(first) < len(jobs) and time.monotonic() < deadline:  # every follower has its first status
        time.sleep(0.05)
    # the process's one poller of this cluster (made with the first client that followed a job)
    polling = poller_for(runner.rest).client
    start_requests, start = polling.requests, time.monotonic()
    # cancel `cancel` jobs one by one at irregular moments inside the window (a second client:
    # its requests are not the waiting's)
    killer = SlurmClient(settings)
    cancelled: dict[int, float] = {}
    gaps = [0.37 + (i * 0.618) % 1.1 for i in range(cancel)]
    for (_, job_id), gap in zip(jobs[:cancel], gaps, strict=False):
        time.sleep(gap)
        killer.cancel(job_id)
        cancelled[job_id] = time.monotonic()
    time.sleep(max(0.0, start + window - time.monotonic()))
    requests = polling.requests - start_requests
    elapsed = time.monotonic() - start
    t0 = time.monotonic()
    runner.rest.jobs()
    list_seconds = time.monotonic() - t0
    for follower in followers:
        follower.close()
    latencies = sorted(ended[j] - t for j, t in cancelled.items() if j in ended)
    return {"requests": requests, "seconds": elapsed, "noticed": len(latencies), "cancelled": len(cancelled),
            "latency_median": statistics.median(latencies) if latencies else None,
            "latency_max": max(latencies) if latencies else None, "list_seconds": list_seconds,
            "jobs_in_list": len(runner.rest.jobs())}


def per_job(settings: SlurmSettings, jobs: list[tuple[str, int]], window: float, interval: float) -> dict:
    clients = [SlurmClient(settings) for _ in range(8)]
    for client in clients:
        client.api  # noqa: B018 - discover the version before counting
    before = sum(c.requests for c in clients)
    start, rounds, late = time.monotonic(), 0, 0
    with ThreadPoolExecutor(8) as pool:
        while time.monotonic() - start < window:
            began = time.monotonic()
            list(pool.map(lambda ij: clients[ij[0] % 8].job(ij[1][1]), enumerate(jobs)))
            rounds += 1
            spent = time.monotonic() - began
            late += spent > interval
            time.sleep(max(0.0, interval - spent))
    return {"requests": sum(c.requests for c in clients) - before, "seconds": time.monotonic() - start,
            "rounds": rounds, "late": late}


def poll_cost(settings: SlurmSettings, remembered: int, followed: int = 10, rounds: int = 5) -> dict:
    """One poll's bytes and time for `followed` jobs while slurmctld remembers `remembered`."""
    client = SlurmClient(settings)
    have = len(client.jobs())
    jobs = submit_held(settings, max(0, remembered - have), f"bench-{uuid.uuid4().hex[:6]}") if have < remembered else []
    ids = [job_id for _, job_id in jobs[:followed]] or [r.job_id for r in client.jobs()[:followed]]

    def measure(path: str, query: dict | None) -> tuple[int, float]:
        sizes, times = [], []
        for _ in range(rounds):
            began = time.monotonic()
            status, body = client._request("GET", path, query=query, what="bench")
            times.append(time.monotonic() - began)
            sizes.append(len(json.dumps(body)))
            assert status == 200, (status, str(body)[:300])
        return int(statistics.median(sizes)), statistics.median(times)

    try:
        row = {"api": client.api.version, "remembered": len(client.jobs()), "followed": len(ids)}
        row["list_bytes"], row["list_seconds"] = measure(client.api.jobs_path, None)
        if client.api.has_job_states:
            row["states_bytes"], row["states_seconds"] = measure(client.api.job_states_path,
                                                                 {"job_id": [str(i) for i in ids]})
            row["record_bytes"], row["record_seconds"] = measure(client.api.job_path(ids[0]), None)
        return row
    finally:
        for _, job_id in jobs:
            client.cancel(job_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--version", help="the local Slurm's version (scripts/slurm-local --version)")
    parser.add_argument("--remembered", type=int, help="measure one poll's cost at this many remembered jobs")
    parser.add_argument("--jobs", type=int, nargs="*", default=[10, 100, 500])
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval, s (the connection default: 2)")
    parser.add_argument("--cancel", type=int, default=10, help="jobs cancelled during the window (latency)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "slurm_poller.json"))
    args = parser.parse_args()
    settings = replace(local_settings(args.version), poll_interval=args.interval)
    Path(settings.job_root).mkdir(parents=True, exist_ok=True)
    if args.remembered:
        cost = poll_cost(settings, args.remembered)
        print(json.dumps(cost), flush=True)
        Path(args.out).with_name(f"slurm_poll_cost-{cost['api']}.json").write_text(json.dumps(cost, indent=2) + "\n")
    if not args.jobs:
        return
    print(f"Slurm at {settings.url}, OpenAPI v{SlurmClient(settings).api.version}, interval {args.interval}s, "
          f"window {args.window}s", flush=True)
    rows = []
    for count in args.jobs:
        tag = f"bench-{uuid.uuid4().hex[:6]}"
        began = time.monotonic()
        jobs = submit_held(settings, count, tag)
        print(f"{count} held jobs submitted in {time.monotonic() - began:.1f}s", flush=True)
        try:
            a = shared(settings, jobs, args.window, min(args.cancel, count))
            b = per_job(settings, jobs[args.cancel:] or jobs, args.window, args.interval)
        finally:
            killer = SlurmClient(settings)
            for _, job_id in jobs:
                killer.cancel(job_id)
        n_b = len(jobs[args.cancel:] or jobs)
        row = {
            "jobs": count, "interval": args.interval,
            "shared_requests": a["requests"], "shared_seconds": round(a["seconds"], 2),
            "shared_per_job_hour": round(a["requests"] / (a["seconds"] * count) * 3600, 2),
            "shared_per_hour": round(a["requests"] / a["seconds"] * 3600),
            "per_job_requests": b["requests"], "per_job_seconds": round(b["seconds"], 2),
            "per_job_per_job_hour": round(b["requests"] / (b["seconds"] * n_b) * 3600, 1),
            "per_job_rounds": b["rounds"], "per_job_late_rounds": b["late"],
            "notice_median": a["latency_median"], "notice_max": a["latency_max"],
            "noticed": f"{a['noticed']}/{a['cancelled']}", "list_seconds": round(a["list_seconds"], 3),
            "jobs_in_list": a["jobs_in_list"],
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "api": SlurmClient(settings).api.version,
                                          "rows": rows}, indent=2) + "\n")
    print("\n| jobs waiting | shared: requests in window | per-job: requests in window | shared req/job-hour | "
          "shared req/hour | per-job req/job-hour | notice median | notice max | one GET /jobs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['jobs']} | {r['shared_requests']} | {r['per_job_requests']} ({r['per_job_late_rounds']} of "
              f"{r['per_job_rounds']} rounds late) | {r['shared_per_job_hour']} | {r['shared_per_hour']} | "
              f"{r['per_job_per_job_hour']} | {r['notice_median']:.2f} s | {r['notice_max']:.2f} s | "
              f"{r['list_seconds'] * 1000:.0f} ms ({r['jobs_in_list']} jobs) |")


if __name__ == "__main__":
    main()
