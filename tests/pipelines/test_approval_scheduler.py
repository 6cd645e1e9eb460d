"""A human promotion gate through the REAL scheduler (scheduler + dag-processor + api-server +
triggerer, LocalExecutor, SQLite) on the local backend: the approval request shows the
interval's metrics and the serving model; a person answers it through the api-server's REST
API, as the UI's Required Actions page does. Approve -> promoted, one model asset event;
reject -> promote and inference skipped, no event; no answer in time -> rejected (or approved,
with on_timeout="approve"). Nothing is mocked and nothing writes Airflow's DB but Airflow."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.pipelines import fakejobs
from tests.pipelines.test_assets_scheduler import asset_events
from tests.pipelines.test_backfill_scheduler import key
from tests.support.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

DAG_FILE = '''
from datetime import datetime, timedelta, timezone
from dlc_airflow.pipelines import Approval, Gate, retraining_dag
from tests.pipelines.fakejobs import jobs

dag = retraining_dag(
    {dag_id!r}, cadence="@daily", start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    end_date=datetime(2026, 1, {days}, tzinfo=timezone.utc), storage_root={root!r},
    **jobs({code!r}, {fail!r}, TRAIN_SECONDS="0"), gate=Gate("accuracy", {threshold}),
    approval=Approval({approval}), backend="local", local_root={local!r}, default_args={{"retries": 0}},
)
'''
DAGS = {  # dag_id: (days, Approval arguments, the gate's threshold)
    "approved_then_rejected": (2, "timeout=timedelta(hours=1), assigned_users=['alice']", 0.0),
    "unanswered": (1, "timeout=timedelta(seconds=3)", 0.0),
    "unanswered_approves": (1, "timeout=timedelta(seconds=3), on_timeout='approve'", 0.0),
    "below_the_gate": (1, "timeout=timedelta(hours=1)", 0.9),  # accuracy 0.5: nothing to approve
}
APPROVE = "retrain.approve"


@pytest.fixture
def stack(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    fail = tmp_path / "fail"
    fail.mkdir()
    root = f"file://{tmp_path / 'lineage'}"
    code = str(fakejobs.write(tmp_path / "code"))
    for dag_id, (days, approval, threshold) in DAGS.items():
        (dags / f"{dag_id}.py").write_text(DAG_FILE.format(
            dag_id=dag_id, days=days, root=root, code=code, fail=str(fail), approval=approval, threshold=threshold,
            local=str(tmp_path / "jobs")))
    repo = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    # the triggerer: Airflow 3.1 and 3.2 wait for the answer in a trigger (3.3 parks the task)
    # two signed-in users of the simple auth manager (not everyone an admin): only alice is assigned
    users = {"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
             "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "alice:admin,bob:admin"}
    with AirflowStack(tmp_path / "home", dags, env={"PYTHONPATH": path, **users},
                      components=("api-server", "scheduler", "dag-processor", "triggerer")) as s:
        s.lineage = tmp_path / "lineage"
        yield s


class Rest:
    """The api-server's public REST API as `user`, signed in with the password the simple auth
    manager generated for them (as the UI's login form does)."""

    def __init__(self, stack: AirflowStack, user: str) -> None:
        self.base = f"http://127.0.0.1:{stack.port}"
        passwords = json.loads((stack.home / "simple_auth_manager_passwords.json.generated").read_text())
        login = urllib.request.Request(f"{self.base}/auth/token", method="POST", headers={
            "Content-Type": "application/json"}, data=json.dumps({"username": user, "password": passwords[user]}).encode())
        with urllib.request.urlopen(login, timeout=30) as answer:
            self.token = json.loads(answer.read())["access_token"]

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.base}/api/v2{path}", method=method, data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        # the api-server's own worker timeout: once, beside make test's other lane, a refused
        # PATCH went unanswered for 30 s (Airflow 3.2.2 on SQLite, nothing in its log meanwhile)
        with urllib.request.urlopen(request, timeout=120) as answer:
            return json.loads(answer.read())

    def hitl(self, dag_id: str, run_id: str, method: str = "GET", body: dict | None = None) -> dict:
        run = urllib.parse.quote(run_id, safe="")
        return self.call(method, f"/dags/{dag_id}/dagRuns/{run}/taskInstances/{APPROVE}/-1/hitlDetails", body)


def answer_after_a_refusal(rest: Rest, dag_id: str, run_id: str, body: dict) -> dict:
    """The answer that follows a refused one. Airflow before 3.3 on SQLite: after the api-server
    refused a PATCH (403), the next one's audit-log insert can wait on "database is locked" until
    its 60 s timeout, then answer 500 (seen under make test's load on 3.2.2, and a 30 s wait
    once; never on 3.3). The answer is sent once more there; on 3.3 it must go through at once."""
    from dlc_airflow.airflow.compat import OFFERS, _minor

    try:
        return rest.hitl(dag_id, run_id, "PATCH", body)
    except urllib.error.HTTPError as exc:
        if exc.code != 500 or _minor(OFFERS.version) >= (3, 3):
            raise
        return rest.hitl(dag_id, run_id, "PATCH", body)


def waiting_for_answer(stack: AirflowStack, dag_id: str, run_id: str) -> None:
    """Until the request waits for a person: the task is parked (awaiting_input on 3.3,
    deferred to the HITL trigger on 3.1 and 3.2) and the scheduler took the end of the run that
    parked it. An answer within that moment (no person is that fast) meets an Airflow 3.3.2
    race: the scheduler fails the resumed task ("finished with state success, but the task
    instance's state attribute is queued")."""
    stack.wait_for_task(dag_id, run_id, APPROVE, {"awaiting_input", "deferred"}, timeout=600)
    ended = f"TaskInstance Finished: dag_id={dag_id}, task_id={APPROVE}, run_id={run_id},"
    stack._wait(lambda: ended in stack.log("scheduler"), 120, f"the scheduler to see {APPROVE} parked")


def backfill(stack: AirflowStack, dag_id: str, days: int) -> None:
    """A backfill of `days` intervals whose runs exist. A create that met a locked SQLite file
    can leave a backfill without runs behind (Airflow 3.1, 3.2: the stack's retry of the CLI then
    meets AlreadyRunningBackfill); once the scheduler has marked that one complete, create again.
    (A bound, not a measure: under make test's two lanes a 3.2 scheduler took over 300 s.)"""
    deadline = time.monotonic() + 600
    while True:
        made = stack.airflow("backfill", "create", "--dag-id", dag_id, "--from-date", "2026-01-01",
                             "--to-date", f"2026-01-0{days}", "--reprocess-behavior", "failed", check=False)
        assert made.returncode == 0 or "AlreadyRunningBackfill" in made.stderr, made.stderr[-2000:]
        until = time.monotonic() + 30
        while time.monotonic() < until:
            if len(stack.dag_runs(dag_id)) >= days:
                return
            time.sleep(1)
        assert time.monotonic() < deadline, f"no runs of {dag_id}'s backfill in 600s"


def test_approve_promotes_reject_and_timeout_do_not(stack):
    for dag_id, (days, _, _) in DAGS.items():
        stack.wait_for_dag(dag_id)
        stack.airflow("dags", "unpause", dag_id)
        backfill(stack, dag_id, days)
    alice, bob = Rest(stack, "alice"), Rest(stack, "bob")
    rest = alice
    dag_id = "approved_then_rejected"
    first, second = key("2026-01-01"), key("2026-01-02")

    # interval 1: the request shows its metrics and that nothing serves yet; no event before the answer
    stack._wait(lambda: len(stack.dag_runs(dag_id)) == 2 or None, 300, "the backfill's runs")
    run1, run2 = (r["run_id"] for r in stack.dag_runs(dag_id))
    waiting_for_answer(stack, dag_id, run1)
    request = rest.hitl(dag_id, run1)
    assert request["options"] == ["Approve", "Reject"] and request["defaults"] == ["Reject"]
    assert first in request["subject"] and "accuracy=0.5" in request["subject"], request["subject"]
    assert "| accuracy | 0.5 |" in request["body"] and "none yet" in request["body"], request["body"]
    assert "accuracy=0.5 passes >= 0" in request["body"], request["body"]
    assert asset_events(stack, f"/{dag_id}/model") == []
    assert stack.task_states(dag_id, run1)["retrain.promote"] is None
    assert request["assigned_users"] == [{"id": "alice", "name": "alice"}]
    with pytest.raises(urllib.error.HTTPError) as refused:  # bob may not answer: not assigned
        bob.hitl(dag_id, run1, "PATCH", {"chosen_options": ["Approve"]})
    assert refused.value.code == 403
    assert stack.task_states(dag_id, run1)[APPROVE] in ("awaiting_input", "deferred")

    answered = answer_after_a_refusal(rest, dag_id, run1, {"chosen_options": ["Approve"]})
    assert answered["chosen_options"] == ["Approve"] and answered["responded_by"]["name"] == "alice"
    stack.wait_for_task(dag_id, run1, "retrain.inference", {"success"})
    assert [e["interval"] for e in asset_events(stack, f"/{dag_id}/model")] == [first]

    # interval 2: the request compares with the serving model (interval 1's); reject it
    waiting_for_answer(stack, dag_id, run2)
    request = rest.hitl(dag_id, run2)
    assert second in request["subject"] and "accuracy=0.6" in request["subject"] and "serving: 0.5" in request["subject"], request["subject"]
    assert f"interval `{first}`, accuracy=0.5" in request["body"], request["body"]
    rest.hitl(dag_id, run2, "PATCH", {"chosen_options": ["Reject"]})
    stack.wait_for_runs(dag_id, 2, states={"success"}, timeout=300)
    states = stack.task_states(dag_id, run2)
    assert (states[APPROVE], states["retrain.promote"], states["retrain.inference"]) == (
        "success", "skipped", "skipped"), states
    assert f"{second}: rejected by alice; not promoted" in stack.task_log(dag_id, run2, APPROVE)
    assert [e["interval"] for e in asset_events(stack, f"/{dag_id}/model")] == [first]
    manifest = json.loads((stack.lineage / dag_id / "lineage.json").read_text())
    assert [p["interval"] for p in manifest["promotions"]] == [first]

    # no answer in time: rejected by default, or approved where the DAG says so
    for unanswered, promoted in (("unanswered", False), ("unanswered_approves", True)):
        (run,) = stack.wait_for_runs(unanswered, 1, states={"success"}, timeout=600)
        states = stack.task_states(unanswered, run["run_id"])
        log = stack.task_log(unanswered, run["run_id"], APPROVE)
        assert "no answer within 0:00:03" in log, log
        events = asset_events(stack, f"/{unanswered}/model")
        if promoted:
            assert states["retrain.promote"] == "success" and [e["interval"] for e in events] == [first], states
        else:
            assert (states["retrain.promote"], events) == ("skipped", []), (states, events)
        assert rest.hitl(unanswered, run["run_id"])["chosen_options"] == ["Approve" if promoted else "Reject"]

    # a model the metric gate refuses is not put to a person: approve skips itself, promote runs
    # as without an approval (no earlier model to fall back to: it skips inference)
    (run,) = stack.wait_for_runs("below_the_gate", 1, states={"success"}, timeout=600)
    states = stack.task_states("below_the_gate", run["run_id"])
    assert (states[APPROVE], states["retrain.promote"], states["retrain.inference"]) == (
        "skipped", "skipped", "skipped"), states
    assert "nothing to approve (accuracy=0.5 does not pass >= 0.9)" in stack.task_log("below_the_gate", run["run_id"],
                                                                                     APPROVE)
    assert "no earlier model was promoted" in stack.task_log("below_the_gate", run["run_id"], "retrain.promote")
    assert asset_events(stack, "/below_the_gate/model") == []
