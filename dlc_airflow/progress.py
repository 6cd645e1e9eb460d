"""What a wait on a job says and decides, whoever waits (worker, triggerer, sensor).

Pure bookkeeping fed with status updates and the clock. One `Progress.step` per turn of a
wait returns a `Step`: the lines worth logging (state changes, restarts, scheduling problems,
a heartbeat on long waits), the changes to tell the notifiers, whether to read the job's
logs and Events now, and the verdict: finished, queued too long, or out of time.
`Progress.wakeup` says when the next turn is due without news. The waiting loops
(dlc_airflow.airflow.waiting) only do the I/O a Step asks for. `Progress.observe` reads the
progress the job reported (dlc_airflow.runtime.log_progress lines in the logs the wait copied)
and returns a line only when progress or ETA changed (dlc_airflow.eta.worth_saying); a backend
that keeps progress itself (Kubeflow Trainer's status) reports it through JobStatus.progress.
`replica_health` says when a running replica becomes unwell (its node stopped reporting) or
no longer is, which the job's own state may not show for minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from dlc_airflow import eta, reasons
from dlc_airflow.runner import LogLine, Replica, log_replica_order
from dlc_airflow.runtime.metrics import parse_metric_line
from dlc_airflow.status import JobState, JobStatus

QUEUED_STATES = frozenset({JobState.PENDING, JobState.QUEUED})
# A job whose pods cannot be created or cannot start their containers (FailedCreate, image
# pull errors, config errors) fails after queue_timeout, or after this long when none is set:
# long enough for a registry hiccup or a Secret being created, short of a task hanging.
CANNOT_START_TIMEOUT = 300.0
# While a job has no replica running, ask this often whether its pods cannot be created
# (FailedCreate: nothing else reports it; the job just stays pending).
START_CHECK_EVERY = 10.0
EVENTS_EVERY = 5.0  # seconds between Event reads while logs are streamed on a clock
QUIET_WAKEUP = 60.0  # a turn at least this often without news (heartbeat, timeouts)


class VerdictKind(str, Enum):
    FINISHED = "finished"  # the job reached a terminal state
    QUEUE_TIMEOUT = "queue_timeout"  # not running within queue_timeout
    TIMEOUT = "timeout"  # not finished within timeout


@dataclass(frozen=True)
class Verdict:
    kind: VerdictKind
    status: JobStatus
    message: str


@dataclass(frozen=True)
class Change:
    """A status seen, with the one before it (None for the first): what notifiers are told."""

    previous: JobStatus | None
    status: JobStatus


@dataclass(frozen=True)
class Step:
    """What one turn of a wait decided; the waiting loop does the I/O it names."""

    info: list[str] = field(default_factory=list)  # lines for the task log
    warnings: list[str] = field(default_factory=list)  # lines for the task log, as warnings
    changes: list[Change] = field(default_factory=list)
    read_logs: bool = False  # copy the job's new log lines into the task log now
    read_events: bool = False  # and its new Events
    verdict: Verdict | None = None  # the wait is over


class Progress:
    """Tracks one wait. Times are time.monotonic() seconds."""

    def __init__(self, job: str, now: float, *, queue_timeout: float | None = None,
                 timeout: float | None = None, heartbeat: float = 60.0, queued_already: float = 0.0,
                 stream_logs: bool = False, log_every: float | None = None):
        self.job = job
        # Logs (and Events) are read at every change and at the end when streamed; with
        # log_every also on that clock (a worker's wait), else never in between (the
        # triggerer: a quiet job's logs would cost a request per job per heartbeat).
        self.stream_logs = stream_logs
        self.log_every = log_every
        self.last_logs = self.last_events = self.last_why = float("-inf")
        self.started = now
        self.queue_timeout = queue_timeout
        self.deadline = now + timeout if timeout else None
        self.heartbeat_every = heartbeat
        self.last: JobStatus | None = None
        # a wait resumed elsewhere (another triggerer) keeps the time already spent queued
        self.queued_since: float | None = now - queued_already
        self.last_said = now
        self.blocked = ""  # why the job cannot start (FailedCreate...), from its events
        self.position = ""  # where it stands in its queue, as last said
        self.tracker = eta.Tracker()
        self.estimate: eta.Estimate | None = None  # the newest, from the logs (else the backend's)
        self.said: eta.Estimate | None = None  # the last one logged
        self.counting: str | None = None  # the replica whose progress lines count (coordinator first)

    def step(self, batch: list[JobStatus], now: float, why: str | None = None,
             position: str | None = None) -> Step:
        """One turn: the statuses that arrived since the last (oldest first), and, when they were
        asked for (`time_to_ask_why`), the reason the job cannot start and where it stands in
        its queue."""
        info: list[str] = []
        changes: list[Change] = []
        for status in batch:
            changes.append(Change(self.last, status))
            info += self.update(status, now)
        changed = bool(info)
        if position and position != self.position and self.last is not None and self.last.state in QUEUED_STATES:
            self.position = position  # said on change only (not news about the job: no log read)
            self.last_said = now
            info.append(f"job {self.job}: {position}")
        if not batch and (beat := self.heartbeat(now)):
            info.append(beat)  # a line, no logs: see log_every
        warnings = self.cannot_start(why, now) if why is not None else []
        verdict = self.verdict(now)
        news = changed or verdict is not None
        read_logs = self.stream_logs and (
            news or (self.log_every is not None and now - self.last_logs >= self.log_every))
        read_events = read_logs and (news or self.log_every is None or now - self.last_events >= EVENTS_EVERY)
        if read_logs:
            self.last_logs = now
        if read_events:
            self.last_events = now
        return Step(info, warnings, changes, read_logs, read_events, verdict)

    def time_to_ask_why(self, now: float) -> bool:
        """Whether to ask now why a queued job has no replica running (at most every
        START_CHECK_EVERY); the answer goes to the next `step`."""
        if not self.starting(now) or now - self.last_why < START_CHECK_EVERY:
            return False
        self.last_why = now
        return True

    def wakeup(self, now: float) -> float:
        """Seconds until the next turn is due without news."""
        quiet = self.log_every if self.stream_logs and self.log_every else QUIET_WAKEUP
        if self.starting(now, after=0.0):
            quiet = min(quiet, START_CHECK_EVERY)
        return self.next_wakeup(now, quiet)

    def cannot_start(self, why: str, now: float) -> list[str]:
        """Record that the job's pods cannot be created (the controller's event says why)."""
        if not why or why == self.blocked or self.last is None or self.last.state not in QUEUED_STATES:
            return []
        self.blocked = why
        self.last_said = now
        return [f"job {self.job}: cannot start: {why}"]

    def starting(self, now: float, after: float = 5.0) -> bool:
        """Queued with no replica running for `after` seconds: worth asking why."""
        status = self.last
        return (status is not None and status.state in QUEUED_STATES and self.queued_since is not None
                and now - self.queued_since >= after and not any(c.active for c in status.roles.values()))

    def update(self, status: JobStatus, now: float) -> list[str]:
        """Record a status; return the lines worth logging about the change."""
        lines: list[str] = []
        prev = self.last
        if prev is None or (status.state, status.reason, status.message) != (prev.state, prev.reason, prev.message):
            lines.append(f"job {self.job}: {status.summary()}")
        if prev is not None and status.restarts > prev.restarts:
            what = ("was preempted and requeued" if status.reason == reasons.PREEMPTED
                    else "a replica failed and was restarted")
            lines.append(f"job {self.job}: {what} "
                         f"({status.restarts} restart{'s' if status.restarts != 1 else ''} so far)")
        if status.state in QUEUED_STATES:
            if self.queued_since is None:
                self.queued_since = now
        else:
            self.queued_since = None
            self.blocked = ""
        self.last = status
        if status.progress is not None and self.counting is None:  # the job's own lines win
            self.estimate = eta.of_percent(status.progress.percent, status.progress.eta_seconds)
            lines += self.progress_news()
        if lines:
            self.last_said = now
        return lines

    def observe(self, lines: list[LogLine], now: float) -> list[str]:
        """The progress lines among the job's log lines just read (`now` stands for the job's clock
        where a line has none); returns the line worth logging, if progress or ETA changed."""
        for replica, line in lines:
            record = parse_metric_line(line, with_time=True)
            found = eta.from_record(record) if record is not None else None
            if record is None or found is None:
                continue
            if self.counting is None or log_replica_order(replica) < log_replica_order(self.counting):
                if self.counting is not None:
                    self.tracker = eta.Tracker()  # the coordinator's count replaces another's
                self.counting = replica
            if replica != self.counting:
                continue
            at = record.get("time")
            when = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else now
            self.estimate = self.tracker.observe(when, *found)
        news = self.progress_news()
        if news:
            self.last_said = now
        return news

    def progress_news(self) -> list[str]:
        if self.estimate is None or not eta.worth_saying(self.said, self.estimate):
            return []
        self.said = self.estimate
        return [f"job {self.job}: {self.estimate.describe()}"]

    def heartbeat(self, now: float) -> str | None:
        """A line on long waits, so a quiet job does not look like a hung task."""
        if self.last is None or now - self.last_said < self.heartbeat_every:
            return None
        self.last_said = now
        return f"job {self.job}: still {self.last.summary()} after {_human(now - self.started)}"

    def verdict(self, now: float) -> Verdict | None:
        status = self.last
        if status is None:
            return None
        if status.terminal:
            return Verdict(VerdictKind.FINISHED, status, f"job {self.job} {status.state.value.lower()}"
                           + (f": {status.reason}" if status.reason else "")
                           + (f" - {status.message}" if status.message else ""))
        limit = self.queue_limit()
        if limit is not None and self.queued_since is not None and now - self.queued_since >= limit:
            blocked = self.blocked or (status.message if status.reason == reasons.CANNOT_START else "")
            if blocked:
                what = "queue_timeout" if self.queue_timeout is not None else "the default for jobs that cannot start"
                return Verdict(VerdictKind.QUEUE_TIMEOUT, status,
                               f"job {self.job} could not start within {what} ({_human(limit)}): {blocked}")
            why = status.message or f"no replica started ({status.state.value})"
            return Verdict(VerdictKind.QUEUE_TIMEOUT, status,
                           f"job {self.job} was not scheduled within queue_timeout "
                           f"({_human(limit)}): {why}")
        if self.deadline is not None and now >= self.deadline:
            return Verdict(VerdictKind.TIMEOUT, status, f"job {self.job} did not finish within timeout "
                           f"({_human(self.deadline - self.started)}); last state {status.summary()}")
        return None

    def queue_limit(self) -> float | None:
        """How long the job may stay queued: queue_timeout, else the default for a job that
        cannot start, else no limit."""
        if self.queue_timeout is not None:
            return self.queue_timeout
        status = self.last
        if self.blocked or (status is not None and status.reason == reasons.CANNOT_START):
            return CANNOT_START_TIMEOUT
        return None

    def next_wakeup(self, now: float, default: float) -> float:
        """Seconds until something is due even without news (a timeout, a heartbeat)."""
        due = [default, self.heartbeat_every - (now - self.last_said)]
        if self.deadline is not None:
            due.append(self.deadline - now)
        limit = self.queue_limit()
        if limit is not None and self.queued_since is not None:
            due.append(self.queued_since + limit - now)
        return max(0.05, min(due))


def _human(seconds: float) -> str:
    return eta.human(int(seconds))


def terminal_verdict(job: str, status: JobStatus) -> Verdict:
    """The verdict on a job found already finished (adopted, or done before the wait)."""
    progress = Progress(job, 0.0)
    progress.update(status, 0.0)
    verdict = progress.verdict(0.0)
    if verdict is None or verdict.kind is not VerdictKind.FINISHED:
        raise ValueError(f"job {job} is not finished: {status.summary()}")
    return verdict


def replica_health(job: str, before: Sequence[Replica], after: Sequence[Replica]) -> tuple[list[str], list[str]]:
    """(became_unwell, recovered): lines for the replicas that became unwell, or are no longer,
    between two looks at the job's replicas. A replica is known by its uid (a replacement has
    its own, and may share its predecessor's name while that one is still going away)."""
    def key(r: Replica) -> str:
        return r.uid or r.name
    was = {key(r): r for r in before}
    became_unwell, recovered = [], []
    for replica in after:
        old = was.get(key(replica))
        old_unwell = old.unwell if old is not None else ""
        where = f" on node {replica.node}" if replica.node else ""
        if replica.unwell and replica.unwell != old_unwell:
            became_unwell.append(f"job {job}: replica {replica.name}{where}: {replica.unwell}; its containers may "
                                 "still run, and the wait goes on until the job itself ends")
        elif old_unwell and not replica.unwell and replica.state == "Running":
            recovered.append(f"job {job}: replica {replica.name}{where} is no longer reported unwell")
    return became_unwell, recovered
