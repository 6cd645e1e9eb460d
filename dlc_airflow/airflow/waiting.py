"""Waiting on a job: the in-process loop (worker, sensor) and what a finished wait returns.

The trigger (trigger.py) runs the same steps asynchronously; both feed a Progress with the
follower's status updates and stream the job's pod logs and Kubernetes Events into the
task log, each line prefixed with its replica (`[worker-1] ...`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlc_airflow.jobref import JobRef
from dlc_airflow.progress import Progress, Verdict
from dlc_airflow.runner import JobRunner, Log
from dlc_airflow.status import JobStatus

LOG_EVERY = 2.0  # seconds between log fetches while a job runs (sync waits)
EVENTS_EVERY = 5.0
# While a job has no replica running, ask this often whether its pods cannot be created
# (FailedCreate: nothing else reports it; the job just stays pending).
START_CHECK_EVERY = 10.0
# Logs of at most this many replicas go to the task log (rank 0 first; failed pods always):
# 64 interleaved worker logs help nobody and cost a request each.
LOG_REPLICAS = 4


@dataclass
class LogCursor:
    """Where the task log is in the job's pod logs and Events."""

    positions: dict[str, Any] = field(default_factory=dict)
    seen_events: set[str] = field(default_factory=set)

    def emit(self, runner: JobRunner, ref: JobRef, log: Log, pods: list[dict] | None,
             events: bool = True) -> int:
        """Log new pod log lines and Events; returns how many lines were logged."""
        count = 0
        try:
            lines, self.positions = runner.logs(ref, self.positions, pods=log_pods(pods))
        except Exception as exc:  # noqa: BLE001 - logs are best effort; the wait goes on
            log.debug("could not read logs of %s: %s", ref.name, exc)
            lines = []
        for replica, line in lines:
            log.info("[%s] %s", replica, line)
            count += 1
        if events:
            try:
                new = runner.events(ref, self.seen_events)
            except Exception as exc:  # noqa: BLE001
                log.debug("could not read events of %s: %s", ref.name, exc)
                new = []
            for event in sorted(new, key=event_time):
                self.seen_events.add(event["metadata"]["uid"])
                log.log(logging.WARNING if event.get("type") == "Warning" else logging.INFO,
                        "[event] %s", describe_event(event))
                count += 1
        return count


def why_not_started(runner: JobRunner, ref: JobRef, log: Log) -> str:
    """The controller's reason the job's pods cannot be created, from its events ('' if none)."""
    from dlc_airflow.backends.base import failed_create

    try:
        return failed_create(runner.events(ref))
    except Exception as exc:  # noqa: BLE001 - the wait goes on; the timeouts still apply
        log.debug("could not read events of %s: %s", ref.name, exc)
        return ""


def log_pods(pods: list[dict] | None) -> list[dict] | None:
    """The pods whose logs are streamed: the first LOG_REPLICAS by replica, and failed ones."""
    if not pods:
        return pods
    from dlc_airflow.k8s.runner import replica_order

    ranked = sorted(pods, key=replica_order)
    failed = [p for p in ranked[LOG_REPLICAS:] if p.get("status", {}).get("phase") == "Failed"]
    return ranked[:LOG_REPLICAS] + failed


def describe_event(event: dict) -> str:
    obj = event.get("involvedObject", {})
    return f"{obj.get('kind', '?')} {obj.get('name', '?')}: {event.get('reason', '')}: {event.get('message', '').strip()}"


def event_time(event: dict) -> str:
    return event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""


OnChange = Callable[[JobStatus | None, JobStatus], None]  # (previous status, new status)


def wait_sync(runner: JobRunner, ref: JobRef, log: Log, *, queue_timeout: float | None,
              timeout: float | None, stream_logs: bool, on_change: OnChange | None = None) -> tuple[Verdict, list[dict]]:
    """Follow the job until a verdict; logs progress (and the job's logs) on the way, and tells
    `on_change` every status it sees (notifications)."""
    progress = Progress(ref.name, time.monotonic(), queue_timeout=queue_timeout, timeout=timeout)
    cursor = LogCursor()
    updates: list[tuple[JobStatus, list[dict]]] = []
    arrived = threading.Condition()

    def on_status(status: JobStatus, pods: list[dict]) -> None:
        with arrived:
            updates.append((status, pods))
            arrived.notify()

    follower = runner.follow(ref)
    follower.start(on_status)
    pods: list[dict] = []
    last_logs = last_events = last_start_check = 0.0
    try:
        while True:
            now = time.monotonic()
            with arrived:
                if not updates:
                    arrived.wait(progress.next_wakeup(now, LOG_EVERY if stream_logs else 30.0))
                batch, updates[:] = list(updates), []
            now = time.monotonic()
            changed = False
            for status, pods in batch:  # noqa: B007 - the newest pods are used below
                previous = progress.last
                for line in progress.update(status, now):
                    log.info("%s", line)
                    changed = True
                if on_change is not None:
                    on_change(previous, status)
            if not batch and (beat := progress.heartbeat(now)):
                log.info("%s", beat)
            if progress.starting(now) and now - last_start_check >= START_CHECK_EVERY:
                last_start_check = now
                for line in progress.cannot_start(why_not_started(runner, ref, log), now):
                    log.warning("%s", line)
            verdict = progress.verdict(now)
            if stream_logs and (changed or verdict or now - last_logs >= LOG_EVERY):
                with_events = changed or verdict is not None or now - last_events >= EVENTS_EVERY
                cursor.emit(runner, ref, log, pods or None, events=with_events)
                last_logs = now
                last_events = now if with_events else last_events
            if verdict:
                return verdict, pods
    finally:
        follower.close()
