"""Checkpoint lineage keyed by data interval: pure functions over the manifest (a dict).

The manifest is one small JSON document per lineage, kept beside its checkpoints
(dlc_airflow.pipelines.store reads and writes it):

    {
      "version": 1,
      "lineage": "digits",
      "intervals": {
        "20260101T000000Z-20260102T000000Z": {
          "start": "2026-01-01T00:00:00+00:00", "end": "2026-01-02T00:00:00+00:00",
          "status": "succeeded",            # running | succeeded | failed
          "attempt": 1, "run_id": "...",
          "resumed_from": "<interval key>" | null,
          "resume_checkpoint": "<checkpoint URI>" | null,
          "checkpoint": "<checkpoint URI>" | null,  # what a successor resumes from
          "metrics": {...}, "error": null, "updated": "<ISO time>",
          "previous": [ {attempt, status, run_id, resumed_from, checkpoint, updated}, ... ]
        }
      },
      "promoted": {"interval": "<key>", "checkpoint": "<URI>", "metric": "accuracy",
                   "value": 0.93, "run_id": "...", "at": "<ISO time>"} | null,
      "promotions": [ <every promoted record, oldest first> ]
    }

The rule: interval k resumes from the newest *successful* interval that ended at or
before k's start. Re-running an old interval therefore resumes from that interval's own
predecessor, never from the newest checkpoint. An interval that failed (or is still
marked running) between that predecessor and k blocks k (LineageBlocked) instead of being
skipped silently; a gap (an interval that never ran) is skipped. Every function returns a
new manifest and leaves its argument alone.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dlc_airflow.jsonvalue import JSONObject

__all__ = [
    "FAILED",
    "RUNNING",
    "SUCCEEDED",
    "VERSION",
    "Gate",
    "Interval",
    "LineageBlocked",
    "LineageError",
    "begin_attempt",
    "chain",
    "check_manifest",
    "decide_promotion",
    "empty_manifest",
    "finish_attempt",
    "promote",
    "promoted_as_of",
    "resolve_predecessor",
]

VERSION = 1
RUNNING, SUCCEEDED, FAILED = "running", "succeeded", "failed"
STATUSES = (RUNNING, SUCCEEDED, FAILED)
MAX_PREVIOUS = 20  # earlier attempts kept per interval


class LineageError(ValueError):
    """A manifest or interval that cannot be used; the message says which and what to do."""


class LineageBlocked(LineageError):
    """An earlier interval did not succeed: the later one must not silently skip it."""

    def __init__(self, interval: Interval, blocker: JSONObject, blocker_key: str) -> None:
        self.interval, self.blocker, self.blocker_key = interval, blocker, blocker_key
        status = blocker.get("status")
        super().__init__(
            f"interval {interval.key} cannot resume: the earlier interval {blocker_key} is "
            f"{status} (run {blocker.get('run_id')}, attempt {blocker.get('attempt')}). "
            f"Re-run that interval first (clear its run), or let it resume from the interval "
            f"before it by passing on_unfinished='skip'"
        )


def _utc(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise LineageError(f"{value!r} is not a datetime")
    if value.tzinfo is None:
        raise LineageError(f"datetime {value.isoformat()} has no timezone; use an aware (UTC) datetime")
    return value.astimezone(UTC)


@dataclass(frozen=True, order=True)
class Interval:
    """A data interval [start, end), in UTC."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _utc(self.start))
        object.__setattr__(self, "end", _utc(self.end))
        if self.end <= self.start:
            raise LineageError(
                f"data interval [{self.start.isoformat()}, {self.end.isoformat()}) is empty: give the "
                "DAG a data-interval schedule (CronDataIntervalTimetable / DeltaDataIntervalTimetable; "
                "a bare cron string gives zero-length intervals in Airflow 3)"
            )

    @property
    def key(self) -> str:
        """The interval's name in the manifest and in storage paths."""
        return f"{_stamp(self.start)}-{_stamp(self.end)}"

    @classmethod
    def from_key(cls, key: str) -> Interval:
        try:
            start, end = key.split("-")
            return cls(_parse_stamp(start), _parse_stamp(end))
        except (ValueError, TypeError):
            raise LineageError(f"{key!r} is not an interval key (YYYYMMDDTHHMMSSZ-YYYYMMDDTHHMMSSZ)") from None


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%SZ")


def _parse_stamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)


def _now(now: datetime | None) -> str:
    return _utc(now or datetime.now(UTC)).isoformat()


def empty_manifest(lineage: str) -> JSONObject:
    return {"version": VERSION, "lineage": lineage, "intervals": {}, "promoted": None, "promotions": []}


def check_manifest(manifest: Any, where: str = "manifest") -> JSONObject:
    """The manifest if it is one this version understands, else LineageError."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("intervals"), dict):
        raise LineageError(f"{where} is not a lineage manifest (no 'intervals' mapping); "
                           "move it aside to start a new lineage")
    if manifest.get("version") != VERSION:
        raise LineageError(f"{where} has version {manifest.get('version')!r}; this dlc-airflow "
                           f"reads version {VERSION}: upgrade dlc-airflow")
    for key, entry in manifest["intervals"].items():
        Interval.from_key(key)
        if not isinstance(entry, dict) or entry.get("status") not in STATUSES:
            raise LineageError(f"{where}: interval {key} has no valid status (one of {', '.join(STATUSES)})")
    return manifest


def _earlier(manifest: JSONObject, interval: Interval) -> list[tuple[Interval, str, JSONObject]]:
    """Entries that ended at or before `interval` starts, newest end first."""
    found = []
    for key, entry in manifest["intervals"].items():
        other = Interval.from_key(key)
        if other.end <= interval.start:
            found.append((other, key, entry))
    return sorted(found, key=lambda item: (item[0].end, item[0].start), reverse=True)


def resolve_predecessor(manifest: JSONObject, interval: Interval, *,
                        on_unfinished: str = "block") -> tuple[str, JSONObject] | None:
    """(key, entry) of the interval `interval` resumes from, or None for a fresh start.

    The newest successful interval that ended at or before `interval.start`. With
    on_unfinished="block" (the default) a failed or running interval newer than that one
    raises LineageBlocked; with "skip" it is passed over. Intervals that overlap or follow
    `interval` never count, so a re-run of an old interval resumes from its own predecessor.
    """
    if on_unfinished not in ("block", "skip"):
        raise LineageError(f"on_unfinished must be 'block' or 'skip', not {on_unfinished!r}")
    check_manifest(manifest)
    for _other, key, entry in _earlier(manifest, interval):
        if entry["status"] == SUCCEEDED:
            if not entry.get("checkpoint"):
                raise LineageError(f"interval {key} succeeded but recorded no checkpoint; "
                                   "re-run it (its training job must save one)")
            return key, entry
        if on_unfinished == "block":
            raise LineageBlocked(interval, entry, key)
    return None


def begin_attempt(manifest: JSONObject, interval: Interval, *, run_id: str,
                  predecessor: tuple[str, JSONObject] | None, now: datetime | None = None) -> JSONObject:
    """Mark `interval` running (a new attempt), remembering what it resumes from."""
    out = copy.deepcopy(check_manifest(manifest))
    old = out["intervals"].get(interval.key)
    previous = []
    attempt = 1
    if old is not None:
        attempt = int(old.get("attempt", 0)) + 1
        summary = {k: old.get(k) for k in ("attempt", "status", "run_id", "resumed_from", "checkpoint", "updated")}
        previous = (list(old.get("previous", [])) + [summary])[-MAX_PREVIOUS:]
    out["intervals"][interval.key] = {
        "start": interval.start.isoformat(),
        "end": interval.end.isoformat(),
        "status": RUNNING,
        "attempt": attempt,
        "run_id": run_id,
        "resumed_from": predecessor[0] if predecessor else None,
        "resume_checkpoint": predecessor[1]["checkpoint"] if predecessor else None,
        "checkpoint": None,
        "metrics": {},
        "error": None,
        "updated": _now(now),
        "previous": previous,
    }
    return out


def finish_attempt(manifest: JSONObject, interval: Interval, *, status: str,
                   checkpoint: str | None = None, metrics: JSONObject | None = None,
                   error: str | None = None, now: datetime | None = None) -> JSONObject:
    """Record how the running attempt of `interval` ended."""
    if status not in (SUCCEEDED, FAILED):
        raise LineageError(f"an attempt ends {SUCCEEDED} or {FAILED}, not {status!r}")
    if status == SUCCEEDED and not checkpoint:
        raise LineageError(f"interval {interval.key} cannot succeed without a checkpoint URI: the "
                           "training job must save one (dlc_airflow.runtime.save_checkpoint reports it)")
    out = copy.deepcopy(check_manifest(manifest))
    entry = out["intervals"].get(interval.key)
    if entry is None:
        raise LineageError(f"interval {interval.key} has no attempt in the manifest; begin_attempt first")
    entry.update(status=status, checkpoint=checkpoint if status == SUCCEEDED else None,
                 metrics=dict(metrics or {}), error=error, updated=_now(now))
    return out


@dataclass(frozen=True)
class Gate:
    """Promote a model only when its reported metric passes: `metric` >= threshold ("max",
    higher is better, e.g. accuracy) or <= threshold ("min", e.g. loss)."""

    metric: str
    threshold: float
    mode: str = "max"

    def __post_init__(self) -> None:
        if self.mode not in ("max", "min"):
            raise ValueError(f"Gate.mode must be 'max' (higher is better) or 'min', not {self.mode!r}")
        if not isinstance(self.metric, str) or not self.metric:
            raise ValueError("Gate.metric must name a metric the training job reports (log_metrics)")
        # at DAG parse time: a threshold of "high" would only fail when the first model is gated
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)):
            raise ValueError(f"Gate.threshold must be a number (e.g. Gate({self.metric!r}, 0.9)), "
                             f"not {self.threshold!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"Gate.threshold must be a finite number, not {self.threshold!r}")

    def passes(self, value: float) -> bool:
        return value >= self.threshold if self.mode == "max" else value <= self.threshold


def decide_promotion(manifest: JSONObject, interval: Interval, metrics: JSONObject,
                     gate: Gate) -> tuple[bool, bool, str]:
    """(passes, move_pointer, why) for the model of `interval`, a succeeded interval.

    `passes`: the gate's metric is a finite number that passes the threshold.
    `move_pointer`: it passes and no newer interval's model is promoted already (re-running an
    old interval never rolls the promoted model back).
    """
    check_manifest(manifest)
    entry = manifest["intervals"].get(interval.key)
    if entry is None or entry["status"] != SUCCEEDED:
        return False, False, f"interval {interval.key} has not succeeded"
    value = metrics.get(gate.metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False, False, (f"the training job reported no numeric metric {gate.metric!r} "
                              f"(reported: {', '.join(sorted(metrics)) or 'none'})")
    op = ">=" if gate.mode == "max" else "<="
    if not gate.passes(value):
        return False, False, f"{gate.metric}={value:g} does not pass {op} {gate.threshold:g}"
    current = manifest.get("promoted")
    if current and Interval.from_key(current["interval"]).end > interval.end:
        return True, False, (f"{gate.metric}={value:g} passes {op} {gate.threshold:g}; the newer interval "
                             f"{current['interval']} stays promoted")
    return True, True, f"{gate.metric}={value:g} passes {op} {gate.threshold:g}"


def promote(manifest: JSONObject, interval: Interval, *, metric: str | None, value: Any,
            run_id: str, now: datetime | None = None) -> JSONObject:
    """Point `promoted` at the checkpoint of `interval` (a succeeded interval); the
    promotion is also appended to `promotions`, the pointer's history."""
    out = copy.deepcopy(check_manifest(manifest))
    entry = out["intervals"].get(interval.key)
    if entry is None or entry["status"] != SUCCEEDED:
        raise LineageError(f"interval {interval.key} has not succeeded: only a trained model is promoted")
    record = {"interval": interval.key, "checkpoint": entry["checkpoint"], "metric": metric,
              "value": value, "run_id": run_id, "at": _now(now)}
    out["promoted"] = record
    out["promotions"] = list(out.get("promotions") or []) + [record]
    return out


def promoted_as_of(manifest: JSONObject, interval: Interval) -> JSONObject | None:
    """The newest promotion of a model trained on data up to `interval`'s end, or None:
    the model a run of `interval` falls back to when its own does not pass the gate."""
    check_manifest(manifest)
    best = None
    for record in manifest.get("promotions") or []:
        end = Interval.from_key(record["interval"]).end
        if end <= interval.end and (best is None or end >= Interval.from_key(best["interval"]).end):
            best = record
    return best


def chain(manifest: JSONObject) -> list[tuple[str, str | None, str]]:
    """(interval, resumed_from, status) for every interval, oldest first: the resume chain."""
    check_manifest(manifest)
    rows = [(Interval.from_key(k), k, e.get("resumed_from"), e["status"]) for k, e in manifest["intervals"].items()]
    return [(k, r, s) for _i, k, r, s in sorted(rows)]
