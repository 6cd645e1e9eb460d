"""dlc_airflow.airflow.compat: what the running Airflow offers, decided once. The suite runs on
each supported Airflow (3.3 in `make test`, 3.1.8 and 3.2.2 in `make test-compat`), so each
test here checks the version it runs on."""

from __future__ import annotations

import logging

import pytest
from airflow import __version__

from dlc_airflow.airflow import compat
from dlc_airflow.airflow.compat import DEGRADED, OFFERS, Offers, say_degraded

MINOR = compat._minor(__version__)


def test_the_minor_of_a_version_string():
    assert compat._minor("3.1.8") == (3, 1)
    assert compat._minor("3.3.0rc1") == (3, 3)
    assert compat._minor("3.2.2+astro.1") == (3, 2)
    assert compat._minor("3") == (3, 0)


def test_what_this_airflow_offers():
    assert OFFERS.version == __version__
    # start_from_trigger: disabled in the scheduler of 3.0-3.2, re-enabled in 3.3
    assert OFFERS.start_from_trigger is (MINOR >= (3, 3))
    # the task state store (durable execution) came with 3.3
    assert OFFERS.task_state_store is (MINOR >= (3, 3))
    assert OFFERS.retry_policy is (MINOR >= (3, 3))
    assert compat.detect() == OFFERS


def test_each_missing_feature_is_said_once_with_the_path_taken(caplog):
    log = logging.getLogger("test.compat")
    with caplog.at_level(logging.INFO, logger="test.compat"):
        say_degraded(log, "start_from_trigger", "task_state_store",
                     offers=Offers(version="3.1.8", start_from_trigger=False, task_state_store=False))
        say_degraded(log, "start_from_trigger", "task_state_store",
                     offers=Offers(version="3.3.2", start_from_trigger=True, task_state_store=True))
    assert caplog.messages == [f"Airflow 3.1.8: {DEGRADED['start_from_trigger']}",
                               f"Airflow 3.1.8: {DEGRADED['task_state_store']}"]
    assert "starts on a worker and then defers" in caplog.messages[0]
    assert "finds its job by its labels alone" in caplog.messages[1]


def test_the_names_that_moved_resolve_on_this_airflow():
    cron, delta = compat.data_interval_timetables()
    assert cron.__name__ == "CronDataIntervalTimetable" and delta.__name__ == "DeltaDataIntervalTimetable"
    assert compat.config().getboolean("core", "hide_sensitive_var_conn_fields", fallback=True) in (True, False)
    assert issubclass(compat.AirflowFailException, Exception)
    assert issubclass(compat.AirflowTaskTimeout, BaseException)


@pytest.mark.parametrize("deferrable", [True, False])
def test_a_plain_deferrable_task_starts_in_the_triggerer_only_where_airflow_can(deferrable):
    from dlc_airflow.operators import DLCJobOperator

    op = DLCJobOperator(task_id="t", backend="local", deferrable=deferrable,
                        job={"type": "batch", "image": "local", "command": ["true"]})
    assert op._would_start_in_triggerer is deferrable
    assert bool(op.start_from_trigger) is (deferrable and OFFERS.start_from_trigger)
