"""Progress and ETA of a job from successive (time, current, total) observations (pure).

    tracker = Tracker()
    estimate = tracker.observe(time, current, total)   # Estimate: percent, eta_seconds
    if worth_saying(said, estimate): log(estimate.describe()); said = estimate

The rate is measured over the recent observations (a sliding window of WINDOW seconds), so the
ETA follows a job that speeds up or slows down. A count that goes back (a restart resumed from an
older checkpoint) or a total that changes starts the measurement again from there; a single jump
forward far above the usual rate (a resume that skipped ahead, lines read in a burst) is left out
of the rate. The job's code reports with dlc_airflow.runtime.log_progress; the wait, the report
page and the runtime's report to Kubeflow Trainer's status server all estimate here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlc_airflow.jsonvalue import JSONObject

WINDOW = 300.0  # seconds of observations the rate is measured over
JUMP = 5.0  # a segment this many times faster than the others' median is a jump, not progress
PERCENT_STEP = 5.0  # say progress again when the percentage crosses a multiple of this
ETA_CHANGE = 0.25  # ... or the ETA moved by this fraction of the last one said
ETA_MIN_CHANGE = 30.0  # ... and by at least this many seconds
DEFAULT_UNIT = "steps"


@dataclass(frozen=True)
class Estimate:
    current: float
    total: float
    eta_seconds: float | None  # None until a rate is known (or the job stopped advancing)
    unit: str = DEFAULT_UNIT

    @property
    def percent(self) -> float:
        return max(0.0, min(100.0, 100.0 * self.current / self.total))

    def to_dict(self) -> JSONObject:
        """The XCom / report shape: {"current", "total", "unit", "percent", "eta_seconds"}."""
        return {"current": _number(self.current), "total": _number(self.total), "unit": self.unit,
                "percent": round(self.percent, 1),
                "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds)}

    def describe(self) -> str:
        eta = "ETA unknown" if self.eta_seconds is None else f"ETA {human(self.eta_seconds)}"
        if self.unit == "percent":
            return f"progress {self.percent:.0f}%, {eta}"
        return f"progress {_number(self.current)}/{_number(self.total)} {self.unit} ({self.percent:.0f}%), {eta}"


@dataclass
class Tracker:
    """Successive observations of one job's count -> its Estimate."""

    window: float = WINDOW
    points: list[tuple[float, float]] = field(default_factory=list)  # (time, current), oldest first
    total: float | None = None

    def observe(self, time: float, current: float, total: float, unit: str = DEFAULT_UNIT) -> Estimate:
        check_counts(current, total)
        last = self.points[-1] if self.points else None
        if last is None or total != self.total or current < last[1] or time < last[0]:
            self.points = []  # a restart (count back), a new total, a clock gone back: measure anew
        elif time == last[0]:
            self.points.pop()  # read in one go: the newest count at that time
        self.total = total
        self.points.append((time, current))
        self.points = [p for p in self.points if p[0] >= time - self.window] or [(time, current)]
        return Estimate(current, total, _eta(self.points, current, total), unit)


def _eta(points: list[tuple[float, float]], current: float, total: float) -> float | None:
    if current >= total:
        return 0.0
    rate = rate_of(points)
    return (total - current) / rate if rate else None


def rate_of(points: list[tuple[float, float]]) -> float | None:
    """Counts per second over the points, jumps left out; None when not measurable."""
    segments = [(t1 - t0, c1 - c0) for (t0, c0), (t1, c1) in zip(points, points[1:], strict=False) if t1 > t0]
    if len(segments) >= 3:
        rates = sorted(d / dt for dt, d in segments)
        median = rates[len(rates) // 2]
        if median > 0:
            segments = [(dt, d) for dt, d in segments if d / dt <= JUMP * median]
    elapsed = sum(dt for dt, _ in segments)
    done = sum(d for _, d in segments)
    return done / elapsed if elapsed > 0 and done > 0 else None


def of_percent(percent: float, eta_seconds: float | None) -> Estimate:
    """A percentage a backend keeps for the job (Kubeflow Trainer's status), in the same shape."""
    return Estimate(percent, 100.0, eta_seconds, "percent")


def worth_saying(said: Estimate | None, new: Estimate) -> bool:
    """Whether `new` is news next to the estimate last said: the first one, a whole PERCENT_STEP
    crossed (or back), the end reached, an ETA that appeared, or one that moved meaningfully."""
    if said is None:
        return True
    if (said.total, said.unit) != (new.total, new.unit) or new.current < said.current:
        return True
    if math.floor(new.percent / PERCENT_STEP) != math.floor(said.percent / PERCENT_STEP):
        return True
    if new.eta_seconds is None or said.eta_seconds is None:
        return said.eta_seconds is None and new.eta_seconds is not None
    moved = abs(new.eta_seconds - said.eta_seconds)
    return moved >= ETA_MIN_CHANGE and moved >= ETA_CHANGE * said.eta_seconds


def check_counts(current: Any, total: Any) -> None:
    """A clear error for counts that cannot be progress."""
    for name, value in (("current", current), ("total", total)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"progress: {name} must be a finite number, not {value!r}")
    if total <= 0:
        raise ValueError(f"progress: total must be > 0, not {total!r}")
    if current < 0:
        raise ValueError(f"progress: current must be >= 0, not {current!r}")


def from_record(record: Mapping[str, Any]) -> tuple[float, float, str] | None:
    """(current, total, unit) of a metrics record with progress (`step` and `total_steps`, as
    dlc_airflow.runtime.log_progress writes them); None for any other record or bad counts."""
    current, total = record.get("step"), record.get("total_steps")
    try:
        check_counts(current, total)
    except ValueError:
        return None
    assert isinstance(current, (int, float)) and isinstance(total, (int, float))  # (checked)
    unit = record.get("progress_unit")
    return float(current), float(total), unit if isinstance(unit, str) and unit else DEFAULT_UNIT


def final(metrics: Mapping[str, Any], succeeded: bool) -> JSONObject | None:
    """The progress a finished job's last metrics say (its XCom); None when it reported none.
    The ETA of a job that succeeded is 0, of one that did not, unknown."""
    found = from_record(metrics)
    if found is None:
        return None
    current, total, unit = found
    return Estimate(current, total, 0.0 if succeeded else None, unit).to_dict()


def human(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value
