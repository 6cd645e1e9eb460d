"""dlc_airflow.eta: progress and ETA from (time, current, total) observations (pure)."""

from __future__ import annotations

import pytest

from dlc_airflow import eta
from dlc_airflow.eta import Estimate, Tracker, worth_saying


def test_steady_rate_gives_percent_and_eta():
    t = Tracker()
    assert t.observe(0.0, 0, 1000).eta_seconds is None  # one point: no rate yet
    e = t.observe(10.0, 100, 1000)
    assert e.percent == 10.0 and e.eta_seconds == pytest.approx(90.0)
    e = t.observe(20.0, 200, 1000)
    assert e.to_dict() == {"current": 200, "total": 1000, "unit": "steps", "percent": 20.0, "eta_seconds": 80}
    assert e.describe() == "progress 200/1000 steps (20%), ETA 80s"


def test_rate_follows_the_recent_window():
    t = Tracker(window=30.0)
    for i in range(10):  # 10/s for 90 s
        t.observe(i * 10.0, i * 100, 10_000)
    for i in range(1, 5):  # then 1/s
        e = t.observe(90.0 + i * 10.0, 900 + i * 10, 10_000)
    assert e.eta_seconds == pytest.approx((10_000 - 940) / 1.0)


def test_a_count_that_goes_back_measures_again_from_the_resume():
    t = Tracker()
    t.observe(0.0, 0, 1000)
    t.observe(10.0, 500, 1000)  # 50/s
    e = t.observe(20.0, 300, 1000)  # restarted from an older checkpoint
    assert e.current == 300 and e.eta_seconds is None
    e = t.observe(30.0, 400, 1000)  # 10/s since the resume
    assert e.eta_seconds == pytest.approx(60.0)


def test_a_jump_forward_is_not_taken_for_speed():
    t = Tracker()
    for i in range(5):
        t.observe(i * 10.0, i * 10, 10_000)  # 1/s
    t.observe(50.0, 5_000, 10_000)  # resumed far ahead
    for i in range(1, 4):
        e = t.observe(50.0 + i * 10, 5_000 + i * 10, 10_000)
    assert e.eta_seconds == pytest.approx(10_000 - 5_030, rel=0.01)


def test_a_new_total_or_lines_read_at_once():
    t = Tracker()
    t.observe(0.0, 0, 100)
    t.observe(10.0, 50, 100)
    e = t.observe(10.0, 60, 200)  # a new total: measured anew
    assert e.total == 200 and e.eta_seconds is None
    e = t.observe(20.0, 70, 200)
    e = t.observe(20.0, 80, 200)  # same time: the newest count counts
    assert e.eta_seconds == pytest.approx(120 / 2.0)


def test_done_and_stalled():
    t = Tracker()
    t.observe(0.0, 10, 100)
    assert t.observe(5.0, 10, 100).eta_seconds is None  # no progress: no rate
    assert t.observe(9.0, 100, 100).eta_seconds == 0.0
    assert Estimate(150, 100, 0.0).percent == 100.0


def test_worth_saying_only_on_change():
    first = Estimate(10, 1000, None)
    assert worth_saying(None, first)
    assert not worth_saying(first, Estimate(20, 1000, None))  # 1% -> 2%: same 5% step, no ETA yet
    assert worth_saying(first, Estimate(20, 1000, 500.0))  # an ETA appears
    said = Estimate(20, 1000, 500.0)
    assert not worth_saying(said, Estimate(30, 1000, 480.0))  # ETA moved a little
    assert worth_saying(said, Estimate(30, 1000, 300.0))  # ETA moved a lot
    assert worth_saying(said, Estimate(50, 1000, 480.0))  # crossed 5%
    assert worth_saying(said, Estimate(10, 1000, 480.0))  # went back
    assert worth_saying(Estimate(995, 1000, 5.0), Estimate(1000, 1000, 0.0))  # the end


def test_records_and_final_progress():
    assert eta.from_record({"step": 3, "total_steps": 10}) == (3.0, 10.0, "steps")
    assert eta.from_record({"step": 3, "total_steps": 10, "progress_unit": "samples"})[2] == "samples"
    assert eta.from_record({"step": 3, "loss": 0.1}) is None
    assert eta.from_record({"step": 3, "total_steps": 0}) is None
    assert eta.final({"step": 10, "total_steps": 10}, succeeded=True)["eta_seconds"] == 0
    assert eta.final({"step": 4, "total_steps": 10}, succeeded=False) == {
        "current": 4, "total": 10, "unit": "steps", "percent": 40.0, "eta_seconds": None}
    assert eta.final({"loss": 1.0}, succeeded=True) is None
    assert eta.of_percent(42, 100.0).to_dict()["unit"] == "percent"


@pytest.mark.parametrize(("current", "total", "message"), [
    (1, 0, "progress: total must be > 0, not 0"),
    (-1, 10, "progress: current must be >= 0, not -1"),
    ("3", 10, "progress: current must be a finite number, not '3'"),
    (1, float("inf"), "progress: total must be a finite number, not inf"),
])
def test_bad_counts_are_named(current, total, message):
    with pytest.raises(ValueError, match=f"^{message}$".replace("(", r"\(").replace(")", r"\)")):
        Tracker().observe(0.0, current, total)
