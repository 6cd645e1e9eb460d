"""Lineage resolution: pure functions over the manifest (no Airflow, no storage)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from dlc_airflow.pipelines import lineage as lin
from dlc_airflow.pipelines.lineage import Gate, Interval

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def day(k: int) -> Interval:
    return Interval(T0 + k * DAY, T0 + (k + 1) * DAY)


def run(manifest: dict, k: int, status: str = lin.SUCCEEDED, on_unfinished: str = "block",
        metrics: dict | None = None) -> dict:
    """One run of interval k as the pipeline does it: resolve, begin, finish."""
    interval = day(k)
    predecessor = lin.resolve_predecessor(manifest, interval, on_unfinished=on_unfinished)
    manifest = lin.begin_attempt(manifest, interval, run_id=f"run-{k}", predecessor=predecessor)
    if status == lin.RUNNING:
        return manifest
    return lin.finish_attempt(manifest, interval, status=status,
                              checkpoint=f"file:///ckpt/{interval.key}/step-1" if status == lin.SUCCEEDED else None,
                              metrics=metrics or {})


def resumed_from(manifest: dict, k: int) -> str | None:
    found = lin.resolve_predecessor(manifest, day(k))
    return found[0] if found else None


def test_interval_key_round_trips_and_is_utc():
    plus2 = timezone(timedelta(hours=2))
    interval = Interval(datetime(2026, 1, 1, 2, tzinfo=plus2), datetime(2026, 1, 2, 2, tzinfo=plus2))
    assert interval.key == "20260101T000000Z-20260102T000000Z"
    assert Interval.from_key(interval.key) == interval


def test_empty_and_naive_intervals_are_refused_with_what_to_do():
    with pytest.raises(lin.LineageError, match="CronDataIntervalTimetable"):
        Interval(T0, T0)  # what a bare cron schedule gives in Airflow 3
    with pytest.raises(lin.LineageError, match="no timezone"):
        Interval(datetime(2026, 1, 1), datetime(2026, 1, 2))


def test_first_interval_starts_from_scratch_and_each_next_resumes_from_its_predecessor():
    manifest = lin.empty_manifest("digits")
    assert lin.resolve_predecessor(manifest, day(0)) is None
    for k in range(4):
        manifest = run(manifest, k)
    assert lin.chain(manifest) == [
        (day(0).key, None, "succeeded"), (day(1).key, day(0).key, "succeeded"),
        (day(2).key, day(1).key, "succeeded"), (day(3).key, day(2).key, "succeeded")]
    key, entry = lin.resolve_predecessor(manifest, day(4))
    assert key == day(3).key and entry["checkpoint"] == f"file:///ckpt/{day(3).key}/step-1"


def test_rerun_of_an_old_interval_resumes_from_its_own_predecessor_not_the_newest():
    manifest = lin.empty_manifest("digits")
    for k in range(4):
        manifest = run(manifest, k)
    assert resumed_from(manifest, 1) == day(0).key
    manifest = run(manifest, 1)  # re-run (cleared) interval 1
    entry = manifest["intervals"][day(1).key]
    assert entry["attempt"] == 2 and entry["resumed_from"] == day(0).key
    assert entry["previous"][0]["attempt"] == 1 and entry["previous"][0]["status"] == "succeeded"
    # the later intervals are untouched and still resume as before
    assert resumed_from(manifest, 4) == day(3).key
    assert resumed_from(manifest, 0) is None  # the very first interval, re-run: from scratch


def test_a_failed_interval_blocks_later_ones():
    manifest = lin.empty_manifest("digits")
    manifest = run(manifest, 0)
    manifest = run(manifest, 1, status=lin.FAILED)
    with pytest.raises(lin.LineageBlocked) as blocked:
        lin.resolve_predecessor(manifest, day(2))
    assert blocked.value.blocker_key == day(1).key
    assert day(1).key in str(blocked.value) and "clear its run" in str(blocked.value)
    # further intervals are blocked by the same one
    with pytest.raises(lin.LineageBlocked, match=day(1).key):
        lin.resolve_predecessor(manifest, day(5))
    # skip: explicitly resume past it
    key, _ = lin.resolve_predecessor(manifest, day(2), on_unfinished="skip")
    assert key == day(0).key
    # re-running the failed interval successfully unblocks the chain through it
    manifest = run(manifest, 1)
    assert manifest["intervals"][day(1).key]["attempt"] == 2
    assert resumed_from(manifest, 2) == day(1).key


def test_an_interval_left_running_blocks_too():
    manifest = run(run(lin.empty_manifest("d"), 0), 1, status=lin.RUNNING)
    with pytest.raises(lin.LineageBlocked, match="running"):
        lin.resolve_predecessor(manifest, day(2))


def test_a_failed_attempt_does_not_hide_an_interval_that_failed_then_succeeded():
    manifest = run(lin.empty_manifest("d"), 0, status=lin.FAILED)
    manifest = run(manifest, 0)
    assert manifest["intervals"][day(0).key]["status"] == "succeeded"
    assert resumed_from(manifest, 1) == day(0).key


def test_gaps_are_skipped():
    manifest = lin.empty_manifest("d")
    manifest = run(manifest, 0)
    manifest = run(manifest, 3)  # intervals 1 and 2 never ran (e.g. the DAG was paused)
    assert manifest["intervals"][day(3).key]["resumed_from"] == day(0).key
    assert resumed_from(manifest, 2) == day(0).key  # a later backfill of the gap
    assert resumed_from(manifest, 4) == day(3).key


def test_failed_and_later_intervals_do_not_count_for_an_earlier_one():
    manifest = lin.empty_manifest("d")
    for k in range(3):
        manifest = run(manifest, k)
    manifest = run(manifest, 3, status=lin.FAILED)
    assert resumed_from(manifest, 2) == day(1).key  # interval 3's failure is after 2
    assert resumed_from(manifest, 3) == day(2).key  # re-run of the failed one itself


def test_overlapping_intervals_after_a_cadence_change_are_not_predecessors():
    manifest = lin.empty_manifest("d")
    manifest = run(manifest, 0)
    half = Interval(T0 + DAY + DAY / 2, T0 + 2 * DAY + DAY / 2)
    manifest = lin.begin_attempt(manifest, half, run_id="r", predecessor=lin.resolve_predecessor(manifest, half))
    manifest = lin.finish_attempt(manifest, half, status=lin.SUCCEEDED, checkpoint="file:///c/half")
    assert manifest["intervals"][half.key]["resumed_from"] == day(0).key
    assert resumed_from(manifest, 2) == day(0).key  # `half` ends after day 2 starts
    assert resumed_from(manifest, 3) == half.key


def test_success_needs_a_checkpoint_and_finish_needs_a_begun_attempt():
    manifest = lin.begin_attempt(lin.empty_manifest("d"), day(0), run_id="r", predecessor=None)
    with pytest.raises(lin.LineageError, match="save_checkpoint"):
        lin.finish_attempt(manifest, day(0), status=lin.SUCCEEDED, checkpoint=None)
    with pytest.raises(lin.LineageError, match="begin_attempt"):
        lin.finish_attempt(manifest, day(1), status=lin.FAILED)


def test_functions_do_not_change_their_argument():
    manifest = run(lin.empty_manifest("d"), 0)
    before = repr(manifest)
    lin.begin_attempt(manifest, day(1), run_id="r", predecessor=lin.resolve_predecessor(manifest, day(1)))
    lin.promote(manifest, day(0), metric="accuracy", value=0.9, run_id="r")
    assert repr(manifest) == before


def test_manifest_checks_name_the_problem():
    with pytest.raises(lin.LineageError, match="not a lineage manifest"):
        lin.check_manifest({"foo": 1})
    with pytest.raises(lin.LineageError, match="version 7"):
        lin.check_manifest({"version": 7, "intervals": {}})
    with pytest.raises(lin.LineageError, match="not an interval key"):
        lin.check_manifest({"version": 1, "intervals": {"yesterday": {"status": "succeeded"}}})
    broken = run(lin.empty_manifest("d"), 0)
    broken["intervals"][day(0).key]["checkpoint"] = None
    with pytest.raises(lin.LineageError, match="recorded no checkpoint"):
        lin.resolve_predecessor(broken, day(1))


# -- the evaluation gate ------------------------------------------------------------------


def test_gate_promotes_only_when_the_metric_passes():
    gate = Gate("accuracy", 0.9)
    manifest = run(lin.empty_manifest("d"), 0)
    assert lin.decide_promotion(manifest, day(0), {"accuracy": 0.95}, gate)[:2] == (True, True)
    passes, move, why = lin.decide_promotion(manifest, day(0), {"accuracy": 0.5}, gate)
    assert (passes, move) == (False, False) and "does not pass >= 0.9" in why
    passes, _, why = lin.decide_promotion(manifest, day(0), {"loss": 0.1}, gate)
    assert not passes and "no numeric metric 'accuracy'" in why and "loss" in why
    assert not lin.decide_promotion(manifest, day(0), {"accuracy": float("nan")}, gate)[0]
    assert lin.decide_promotion(manifest, day(0), {"loss": 0.1}, Gate("loss", 0.2, "min"))[0]
    with pytest.raises(ValueError, match="'max'"):
        Gate("accuracy", 0.9, "best")


def test_rerunning_an_old_interval_never_rolls_the_promoted_model_back():
    gate = Gate("accuracy", 0.9)
    manifest = lin.empty_manifest("d")
    for k in range(3):
        manifest = run(manifest, k)
        manifest = lin.promote(manifest, day(k), metric="accuracy", value=0.95, run_id=f"run-{k}")
    manifest = run(manifest, 1)  # re-run interval 1: its model passes but 2's is newer
    passes, move, why = lin.decide_promotion(manifest, day(1), {"accuracy": 0.99}, gate)
    assert passes and not move and day(2).key in why
    assert manifest["promoted"]["interval"] == day(2).key


def test_fallback_model_is_the_newest_promoted_from_data_up_to_the_interval():
    manifest = lin.empty_manifest("d")
    assert lin.promoted_as_of(manifest, day(0)) is None
    for k in range(4):
        manifest = run(manifest, k)
    manifest = lin.promote(manifest, day(0), metric="accuracy", value=0.91, run_id="r0")
    manifest = lin.promote(manifest, day(2), metric="accuracy", value=0.93, run_id="r2")
    assert lin.promoted_as_of(manifest, day(1))["interval"] == day(0).key
    assert lin.promoted_as_of(manifest, day(3))["interval"] == day(2).key
    assert lin.promoted_as_of(manifest, day(3))["checkpoint"] == f"file:///ckpt/{day(2).key}/step-1"
    with pytest.raises(lin.LineageError, match="only a trained model"):
        lin.promote(run(manifest, 5, status=lin.FAILED), day(5), metric="a", value=1, run_id="r")
