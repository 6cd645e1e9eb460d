"""The shared poller on the real Slurm: what one poll asks for.

On v0.0.42+ (Slurm 24.11) it asks for the followed jobs' states only (GET /jobs/state/) and
reads a job's record when its state changes; it never lists every job slurmctld remembers.
Before v0.0.42 there is nothing smaller than that list (GET /jobs), so it is one list per poll.
Either way each followed job's end is delivered, with its exit code.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.slurm.support import wait_all

pytestmark = pytest.mark.slurm_shapes


def test_a_poll_asks_for_the_followed_jobs_only_where_the_version_can(slurm, job_root, monkeypatch, tmp_path):
    from dlc_airflow.slurm.runner import SlurmRunner

    # a token file of its own: a poller of its own (one per credential), made with this client
    token_file = tmp_path / "token"
    token_file.write_text(Path(slurm.token_file).read_text())
    runner = SlurmRunner(slurm.settings(job_root, token_file=str(token_file)))
    asked: list[str] = []
    read_states: list[list[str]] = []  # the job_state each record read answered
    request = runner.rest._request

    def spy(method, path, body=None, *, query=None, what):  # the real request, noted
        asked.append(what)
        answer = request(method, path, body, query=query, what=what)
        data = answer[1]  # (HTTP status, body)
        if what.startswith("get job") and isinstance(data, dict):
            state = ((data.get("jobs") or [{}])[0]).get("job_state") or []
            read_states.append([state] if isinstance(state, str) else list(state))
        return answer

    monkeypatch.setattr(runner.rest, "_request", spy)
    refs = []
    for code in (0, 3):
        identity = TaskIdentity("slurm_poller", f"exit{code}", f"run-{uuid.uuid4().hex[:6]}")
        job = DLCJob(type="custom", image="unused", roles={"main": 1}, shell=f"sleep 2; exit {code}")
        refs.append(runner.submit(job, job_name(f"exit{code}", identity, 1), identity, 1)[0])
    asked.clear()
    done = wait_all(runner, refs, timeout=90)
    assert done[refs[0].name].state is JobState.SUCCEEDED
    assert done[refs[1].name].state is JobState.FAILED and "exit code 3" in done[refs[1].name].message
    polls = [what for what in asked if what == "list jobs" or what.startswith("job states")]
    assert polls, asked
    if runner.rest.api.has_job_states:
        assert "list jobs" not in asked, asked
        # the followed jobs only: the first poll may come before the second job is followed
        assert set(polls) <= {"job states of 1 job(s)", "job states of 2 job(s)"}, polls
        assert "job states of 2 job(s)" in polls, polls
        # a record is read when a state changes (a few per job: RUNNING with CONFIGURING, RUNNING,
        # COMPLETING, the end), not one per poll; a pending job's is read at each poll until
        # slurmctld gives its reason (the slurm lane's other tests can keep these pending a while)
        reads = [what for what in asked if what.startswith("get job")]
        changed = [state for state in read_states if "PENDING" not in state]
        assert len(reads) >= 2 and len(changed) <= 10, (read_states, len(polls))
    else:
        assert set(polls) == {"list jobs"}, polls
