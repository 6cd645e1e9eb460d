"""How a task that sets no `deferrable` waits: in the triggerer, unless the admin sets
[dlc_airflow] default_deferrable = false; Airflow's [operators] default_deferrable is not read."""

from __future__ import annotations

import pytest
from dlc_airflow.operators import DLCJobOperator
from dlc_airflow.sensors import DLCJobSensor

from dlc_airflow.airflow.settings import SettingError, default_deferrable

OPTION = "AIRFLOW__DLC_AIRFLOW__DEFAULT_DEFERRABLE"
SPEC = {"type": "batch", "image": "registry.local/prep:1", "command": ["prep"]}


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv(OPTION, raising=False)
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)


def operator(**kwargs) -> DLCJobOperator:
    return DLCJobOperator(task_id="train", backend="native", job=SPEC, **kwargs)


def test_a_task_that_says_nothing_waits_in_the_triggerer():
    assert default_deferrable() is True
    assert operator().deferrable is True


def test_airflows_own_default_deferrable_does_not_turn_it_off(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert operator().deferrable is True


@pytest.mark.parametrize("value, expected", [("false", False), ("False", False), ("0", False), ("off", False),
                                             ("true", True), ("1", True), (" yes ", True), ("", True)])
def test_the_admin_decides_the_default(monkeypatch, value, expected):
    monkeypatch.setenv(OPTION, value)
    assert default_deferrable() is expected
    assert operator().deferrable is expected


def test_the_dag_still_decides_for_its_task(monkeypatch):
    monkeypatch.setenv(OPTION, "false")
    assert operator(deferrable=True).deferrable is True
    monkeypatch.setenv(OPTION, "true")
    assert operator(deferrable=False).deferrable is False


def test_a_setting_that_is_not_a_boolean_is_a_one_line_error_naming_it(monkeypatch):
    monkeypatch.setenv(OPTION, "sometimes")
    with pytest.raises(SettingError, match=r"^\[dlc_airflow\] default_deferrable in Airflow's config must be "
                                           r"true or false, not 'sometimes'$"):
        operator()


def test_by_default_a_plain_task_starts_in_the_triggerer_and_a_sync_one_does_not(monkeypatch):
    from dlc_airflow.airflow.compat import OFFERS

    assert operator()._would_start_in_triggerer is True
    assert operator().start_from_trigger is OFFERS.start_from_trigger
    monkeypatch.setenv(OPTION, "false")
    assert operator()._would_start_in_triggerer is False
    assert operator().start_from_trigger is False


def test_not_waiting_is_not_deferring():
    task = operator(wait_for_completion=False)
    assert task._would_start_in_triggerer is False


def test_the_sensor_defers_by_default_except_in_reschedule_mode(monkeypatch):
    assert DLCJobSensor(task_id="s", job_name="j").deferrable is True
    assert DLCJobSensor(task_id="s", job_name="j", mode="reschedule").deferrable is False
    monkeypatch.setenv(OPTION, "false")
    assert DLCJobSensor(task_id="s", job_name="j").deferrable is False
