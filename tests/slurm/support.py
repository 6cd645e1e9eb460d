"""Helpers of the slurm tests: wait on jobs through the runner's follower (the shared poller)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from dlc_airflow.jobref import JobRef
from dlc_airflow.status import JobStatus

# each replica writes its environment into env-<role>-<index>.json in its working directory
ENV_DUMP = ("import json, os; json.dump(dict(os.environ), open('env-%s-%s.json' % "
            "(os.environ['DLC_ROLE'], os.environ['DLC_ROLE_INDEX']), 'w'))")


def wait_all(runner, refs: list[JobRef], timeout: float) -> dict[str, JobStatus]:
    """Follow every job (one poller for all of them) until each is terminal."""
    done: dict[str, JobStatus] = {}
    arrived = threading.Condition()
    followers = []
    for ref in refs:
        follower = runner.follow(ref)

        def on_status(status, pods, name=ref.name):
            with arrived:
                if status.terminal:
                    done[name] = status
                arrived.notify_all()

        follower.start(on_status)
        followers.append(follower)
    deadline = time.monotonic() + timeout
    try:
        with arrived:
            while len(done) < len(refs):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted({r.name for r in refs} - set(done))
                    raise AssertionError(f"jobs not finished after {timeout}s: {missing}: "
                                         f"{[runner.status(r).summary() for r in refs if r.name in missing]}")
                arrived.wait(left)
    finally:
        for follower in followers:
            follower.close()
    return done


def envs(jobdir: Path) -> dict[str, dict[str, str]]:
    """{replica key: env} the replicas of a job dumped (ENV_DUMP)."""
    return {p.stem.removeprefix("env-"): json.loads(p.read_text()) for p in sorted(jobdir.glob("env-*.json"))}
