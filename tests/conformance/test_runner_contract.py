"""The runner contract (dlc_airflow.runner), checked the same way on every backend's runner and
on the in-memory FakeRunner the lifecycle's unit tests use: what the code above the runners
(submit-or-adopt, the waits, finish, the jobs CLI) relies on, asked of each of them.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from dlc_airflow.errors import OwnershipError
from dlc_airflow.jobref import JobRef
from dlc_airflow.runner import EventSource, LogLine, Replica, SecretReader, Settler, SpecKeeper
from dlc_airflow.status import JobState, JobStatus
from tests.conformance.conftest import Subject


def submit(subject: Subject, job, name_prefix: str = "c"):
    identity = subject.identity()
    name = f"{name_prefix}-{subject.name[:4]}-{identity.run_id[-6:]}-1"
    ref, created = subject.runner.submit(job, name, identity, 1)
    subject.made.append(ref)
    return ref, created, identity, name


def wait_until(subject: Subject, ref: JobRef, done, what: str, timeout: float | None = None) -> JobStatus:
    deadline = time.monotonic() + (timeout or subject.timeout)
    status = subject.runner.status(ref)
    while not done(status):
        if time.monotonic() > deadline:
            raise AssertionError(f"{subject.name}: {what} not seen within {timeout or subject.timeout}s; "
                                 f"last {status.summary()}")
        time.sleep(0.2)
        status = subject.runner.status(ref)
    return status


def test_a_submitted_job_is_where_its_ref_says_and_a_second_submit_adopts_it(subject):
    runner = subject.runner
    ref, created, identity, name = submit(subject, subject.long())
    assert created
    assert (ref.backend, ref.name, ref.attempt) == (runner.backend_name, name, 1)
    assert ref.place == runner.place or (subject.routes and ref.place)
    json.dumps(ref.to_dict())  # it travels as JSON (XCom, trigger kwargs)
    again, created_again = runner.submit(subject.long(), name, identity, 1)
    assert not created_again and again.name == name and (again.uid == ref.uid or not ref.uid)
    with pytest.raises(OwnershipError):  # another task instance's job of that name is refused
        runner.submit(subject.long(), name, replace(identity, task_id="someone_else"), 1)


def test_find_lookup_and_the_jobs_list_name_it(subject):
    runner = subject.runner
    ref, _, identity, name = submit(subject, subject.long())
    assert [r.name for r in runner.find(identity, subject.long())] == [name]
    found = runner.lookup(name)
    assert found is not None and found.name == name and found.backend == runner.backend_name
    assert runner.lookup(f"no-such-{name}") is None
    listed = [i for i in runner.jobs(dag_id="conformance") if i.ref.name == name]
    assert len(listed) == 1 and (listed[0].task_id, listed[0].run_id) == (identity.task_id, identity.run_id)


def test_a_short_job_succeeds_and_its_follower_reports_the_end(subject):
    runner = subject.runner
    ref, _, _, _ = submit(subject, subject.short())
    seen: list[JobStatus] = []
    replicas_seen: list[list[Replica]] = []
    ended = threading.Event()

    def on_status(status, replicas):
        seen.append(status)
        replicas_seen.append(list(replicas))
        if status.terminal:
            ended.set()

    follower = runner.follow(ref)
    follower.start(on_status)
    try:
        assert ended.wait(subject.timeout), f"{subject.name}: the follower saw {[s.summary() for s in seen]}"
    finally:
        follower.close()
    assert seen[-1].state is JobState.SUCCEEDED, seen[-1].summary()
    assert all(isinstance(r, Replica) for batch in replicas_seen for r in batch)
    assert runner.status(ref).state is JobState.SUCCEEDED


def test_logs_and_outputs_are_the_contracts_types(subject):
    runner = subject.runner
    ref, _, _, _ = submit(subject, subject.short())
    wait_until(subject, ref, lambda s: s.terminal, "the end")
    lines, positions = [], {}
    deadline = time.monotonic() + 30
    while not any("HELLO" in line.text for line in lines) and time.monotonic() < deadline:
        new, positions = runner.logs(ref, positions)
        lines.extend(new)
        time.sleep(0.2)
    if subject.name == "native":  # kwok pods print nothing unless a test gives them a log file
        assert all(isinstance(line, LogLine) for line in lines)
    else:
        assert any("HELLO" in line.text for line in lines), lines
        assert all(isinstance(line, LogLine) and line.replica for line in lines)
    json.dumps(positions)  # positions travel as JSON
    again, _ = runner.logs(ref, positions)
    assert not any("HELLO" in line.text for line in again)  # nothing twice
    outputs = runner.outputs(ref)
    assert set(outputs) == {"metrics", "outputs"}
    json.dumps(outputs)


def test_claim_says_which_try_owns_the_job(subject):
    runner = subject.runner
    ref, _, _, _ = submit(subject, subject.long())
    assert runner.owner_try(ref) in (None, 1)  # the try that made it, where the backend says
    runner.claim(ref, 3)
    assert runner.owner_try(ref) == 3


def test_stop_ends_the_job_and_keeps_it_and_delete_removes_it(subject):
    runner = subject.runner
    ref, _, _, name = submit(subject, subject.long())
    wait_until(subject, ref, lambda s: s.state is JobState.RUNNING, "RUNNING")
    assert runner.stop(ref) >= 1
    stopped = wait_until(subject, ref, lambda s: s.terminal, "the stop")
    assert stopped.state is JobState.STOPPED, stopped.summary()
    kept = runner.lookup(name)
    assert kept is not None and kept.name == name, "a stopped job is kept, on every backend"
    assert runner.status(ref).reason != "NotFound"
    assert runner.stop(ref) == 0  # it has ended: nothing to stop
    runner.delete(ref)
    if subject.keeps_records:
        assert runner.status(ref).terminal
    else:
        wait_until(subject, ref, lambda s: s.reason == "NotFound", "the delete")
        assert runner.lookup(name) is None
    runner.delete(ref)  # idempotent


def test_optional_capabilities_are_protocols_the_runner_implements_or_not(subject):
    implemented = {p for p in (EventSource, Settler, SpecKeeper, SecretReader) if isinstance(subject.runner, p)}
    assert implemented == set(subject.capabilities)
    for missing in {EventSource, Settler, SpecKeeper, SecretReader} - implemented:
        # no no-op stand-ins: a capability a backend lacks is no method at all
        method = {EventSource: "events", Settler: "settle", SpecKeeper: "spec", SecretReader: "secret_values"}[missing]
        assert not hasattr(subject.runner, method), (subject.name, method)


def test_the_stored_spec_is_the_submitted_one_without_secret_values(subject):
    if SpecKeeper not in subject.capabilities:
        pytest.skip(f"the {subject.name} backend keeps no spec")
    job = subject.long().model_copy(update={"env": {"API_TOKEN": "s3cr3t-value", "LR": "0.1"}})
    ref, _, _, _ = submit(subject, job)
    spec = subject.runner.spec(ref)  # type: ignore[attr-defined]
    assert spec is not None and spec["env"]["LR"] == "0.1"
    assert "s3cr3t-value" not in json.dumps(spec)
