"""Waiting in cluster tests: poll until something holds, or fail saying what was last seen.

Test helper, not a test module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.status import JobState, JobStatus

T = TypeVar("T")


def wait_for(fn: Callable[[], T], timeout: float = 60.0, interval: float = 0.25, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def wait_all_terminal(runner: KubeRunner, refs: dict[str, JobRef], timeout: float = 120.0) -> dict[str, JobStatus]:
    """Poll every job's KubeRunner.status until each is terminal (they run concurrently)."""
    done: dict[str, JobStatus] = {}
    last: dict[str, JobStatus] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(refs) and time.monotonic() < deadline:
        for key, ref in refs.items():
            if key not in done:
                last[key] = runner.status(ref)
                if last[key].terminal:
                    done[key] = last[key]
        if len(done) < len(refs):
            time.sleep(0.5)
    missing = {k: last[k].summary() for k in refs if k not in done}
    assert not missing, f"not terminal after {timeout:.0f}s: {missing}"
    return done


def wait_state(runner: KubeRunner, ref: JobRef, states: set[JobState], timeout: float = 60.0) -> JobStatus:
    """Poll KubeRunner.status until the job is in one of `states`."""
    seen: list[JobStatus] = []

    def reached() -> JobStatus | None:
        seen.append(runner.status(ref))
        return seen[-1] if seen[-1].state in states else None

    wanted = "/".join(sorted(s.value for s in states))
    try:
        return wait_for(reached, timeout=timeout, what=f"job {ref.name} {wanted}")
    except AssertionError:
        raise AssertionError(f"job {ref.name} not {wanted} after {timeout:.0f}s: {seen[-1].summary()}") from None
