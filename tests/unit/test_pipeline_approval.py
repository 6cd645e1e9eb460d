"""approval= of training_pipeline / retraining_dag at DAG parse time: the tasks it adds and how
they are wired, the HITL request's settings and text, and the check that the installed
standard provider can do it. (Its behaviour under the real scheduler:
tests/pipelines/test_approval_scheduler.py; bad input: tests/unit/test_bad_input_catalogue.py.)"""

from __future__ import annotations

import types
from datetime import UTC, datetime, timedelta

import jinja2
import pytest

from dlc_airflow.pipelines import Approval, Gate

BATCH = {"type": "batch", "image": "registry.example.com/prep:1", "command": ["prep"]}


def build(tmp_path, **kwargs):
    from dlc_airflow.pipelines import retraining_dag

    jobs = {k: {**BATCH, "name": k[:4]} for k in ("preprocess", "train", "inference")}
    dag = retraining_dag("approval_shape", cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=UTC),
                         storage_root=str(tmp_path / "lineage"), backend="local", **jobs, **kwargs)
    return {task.task_id.removeprefix("retrain."): task for task in dag.tasks}


def upstream(task) -> set[str]:
    return {t.removeprefix("retrain.") for t in task.upstream_task_ids}


def test_without_an_approval_the_gate_is_as_before(tmp_path):
    tasks = build(tmp_path, gate=Gate("accuracy", 0.9))
    assert set(tasks) == {"lineage", "preprocess", "train", "commit", "promote", "inference"}
    assert tasks["promote"].trigger_rule == "all_success"
    assert upstream(tasks["promote"]) == {"commit", "lineage"} and upstream(tasks["inference"]) == {"promote"}


def test_an_approval_sits_between_the_metric_gate_and_the_promotion(tmp_path):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    approval = Approval(timeout=timedelta(hours=2), assigned_users=["alice", {"id": "7", "name": "bob"}])
    tasks = build(tmp_path, gate=Gate("loss", 0.3, "min"), approval=approval)
    assert set(tasks) == {"lineage", "preprocess", "train", "commit", "gate", "approve", "promote", "inference"}
    approve = tasks["approve"]
    assert isinstance(approve, ApprovalOperator)
    assert upstream(tasks["gate"]) == {"commit"} and upstream(approve) == {"gate"}
    assert upstream(tasks["promote"]) == {"commit", "lineage", "approve"} and upstream(tasks["inference"]) == {"promote"}
    # promote runs when approve skipped itself (nothing to approve); a rejection skips it
    assert tasks["promote"].trigger_rule == "none_failed"
    assert (tasks["gate"].metric, tasks["gate"].threshold, tasks["gate"].mode) == ("loss", 0.3, "min")
    assert not tasks["gate"].outlets  # only promote emits the model's asset event
    assert approve.defaults == ["Reject"] and approve.response_timeout == timedelta(hours=2)
    assert approve.assigned_users == [{"id": "alice", "name": "alice"}, {"id": "7", "name": "bob"}]
    assert "retrain.gate" in approve.subject and "retrain.gate" in approve.body


def test_on_timeout_approve_makes_approve_the_default(tmp_path):
    tasks = build(tmp_path, gate=Gate("accuracy", 0.9), approval=Approval(timeout=None, on_timeout="approve"))
    assert tasks["approve"].defaults == ["Approve"] and tasks["approve"].response_timeout is None
    assert "waits until someone answers" in tasks["approve"].body


class _TI:
    def __init__(self, verdict):
        self.verdict = verdict

    def xcom_pull(self, task_ids):
        assert task_ids == "retrain.gate"
        return self.verdict


VERDICT = {"lineage": "digits", "interval": "20260102T000000Z-20260103T000000Z", "checkpoint": "file:///l/ck/2",
           "job": "train-abc", "metrics": {"accuracy": 0.93, "loss": 0.2}, "metric": "accuracy", "value": 0.93,
           "reason": "accuracy=0.93 passes >= 0.9", "promotes": True,
           "serving": {"interval": "20260101T000000Z-20260102T000000Z", "checkpoint": "file:///l/ck/1",
                       "metric": "accuracy", "value": 0.91}}


def render(template: str, verdict: dict) -> str:
    return jinja2.Template(template).render(ti=_TI(verdict))


def test_the_request_shows_the_metrics_and_the_serving_model():
    from dlc_airflow.pipelines.approval import body_template, subject_template

    subject = render(subject_template("retrain.gate"), VERDICT)
    assert subject == ("Promote the digits model of 20260102T000000Z-20260103T000000Z? (accuracy=0.93, "
                       "serving: 0.91)")
    body = render(body_template("retrain.gate", Approval(timeout=timedelta(hours=24))), VERDICT)
    assert "| accuracy | 0.93 |\n| loss | 0.2 |" in body
    assert "**Metric gate:** accuracy=0.93 passes >= 0.9." in body
    assert "interval `20260101T000000Z-20260102T000000Z`, accuracy=0.91 (checkpoint `file:///l/ck/1`)" in body
    assert "checkpoint `file:///l/ck/2`" in body and "within 1 day, 0:00:00 the model is not promoted" in body

    first = render(body_template("retrain.gate", Approval()), {**VERDICT, "serving": None})
    assert "none yet" in first
    assert "serving" not in render(subject_template("retrain.gate"), {**VERDICT, "serving": None})


def test_the_installed_provider_can_approve_and_an_older_one_is_refused_at_parse_time():
    from airflow.providers.standard.operators import hitl

    from dlc_airflow.pipelines.hitl import check_support

    assert check_support() is hitl.ApprovalOperator
    with pytest.raises(ValueError, match="lacks: upgrade it"):
        check_support(types.SimpleNamespace(HITLOperator=hitl.HITLOperator))

    class OldHITL:  # the signature of an early provider: no response_timeout, assigned_users, notifiers
        def __init__(self, *, subject, options, body=None, defaults=None, multiple=False, params=None, **kwargs):
            pass

    with pytest.raises(ValueError) as err:
        check_support(types.SimpleNamespace(HITLOperator=OldHITL, ApprovalOperator=OldHITL))
    assert "\n" not in str(err.value)
    assert "HITLOperator's response_timeout, assigned_users, notifiers" in str(err.value)
    assert "pip install -U apache-airflow-providers-standard" in str(err.value)
