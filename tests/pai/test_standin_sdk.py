"""The pai runner and client through the SDK's real client, against the local STAND-IN for
the DLC API (tests/support/dlc_standin.py): signing, ROA paths and serialization are the
SDK's own; the stand-in checks them and walks jobs through DLC's documented states."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from dlc_airflow import naming
from dlc_airflow.errors import OwnershipError, SubmitError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.pai.client import PaiClient, PaiError
from dlc_airflow.pai.poller import PollerRegistry
from dlc_airflow.pai.runner import PaiRunner
from dlc_airflow.pai.settings import PaiConfigError, settings_from
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState
from tests.pai.conftest import AK, REGION, SECRETS, STS_AK, STS_SECRET, STS_TOKEN, WORKSPACE


def training(**env) -> DLCJob:
    return DLCJob(type="pytorch", image="registry/train:1", command=["python", "train.py"],
                  roles={"master": 1, "worker": 2}, resources={"cpu": "4", "memory": "16Gi"},
                  env={"STANDIN_RUN_SECONDS": "0.6", **env})


def identity(task: str = "train") -> naming.TaskIdentity:
    import uuid

    return naming.TaskIdentity("dag", task, f"run-{uuid.uuid4().hex[:8]}")


def wait_for(runner: PaiRunner, ref, states, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        st = runner.status(ref)
        if st.state in states:
            return st
        assert time.monotonic() < deadline, f"job {ref.name} is still {st.summary()}"
        time.sleep(0.1)


def create_fields(**override) -> dict:
    base = {"DisplayName": "probe", "JobType": "PyTorchJob", "UserCommand": "python t.py", "WorkspaceId": WORKSPACE,
            "ResourceId": "quota-1",
            "JobSpecs": [{"Type": "Worker", "PodCount": 1, "Image": "img", "ResourceConfig": {"CPU": "1", "Memory": "1Gi"}}]}
    base.update(override)
    return {k: v for k, v in base.items() if v is not None}


# -- the stand-in is strict ---------------------------------------------------------------------
INVALID = [
    ("MissingParameter", "DisplayName", {"DisplayName": None}),
    ("MissingParameter", "JobType", {"JobType": None}),
    ("MissingParameter", "JobSpecs", {"JobSpecs": None}),
    ("MissingParameter", "UserCommand", {"UserCommand": None}),
    ("InvalidParameter", "JobType", {"JobType": "SparkJob"}),
    ("InvalidParameter", "PodCount", {"JobSpecs": [{"Type": "Worker", "PodCount": 0, "Image": "img",
                                                    "ResourceConfig": {"CPU": "1", "Memory": "1Gi"}}]}),
    ("InvalidParameter", "Type", {"JobSpecs": [{"Type": "Chief", "PodCount": 1, "Image": "img",
                                                "ResourceConfig": {"CPU": "1", "Memory": "1Gi"}}]}),
    ("InvalidParameter", "RestartPolicy", {"JobSpecs": [{"Type": "Worker", "PodCount": 1, "Image": "img",
                                                         "RestartPolicy": "Sometimes",
                                                         "ResourceConfig": {"CPU": "1", "Memory": "1Gi"}}]}),
    ("InvalidParameter", "Priority", {"Priority": 10}),
    ("InvalidParameter", "Priority", {"Priority": 0}),
    ("InvalidParameter", "EcsSpec", {"ResourceId": None}),
    ("InvalidParameter", "DisplayName", {"DisplayName": "has spaces"}),
    ("InvalidParameter", "MountAccess", {"DataSources": [{"Uri": "oss://b/x", "MountPath": "/d", "MountAccess": "RX"}]}),
]


@pytest.mark.parametrize(("code", "field", "override"), INVALID, ids=[f"{c}-{f}-{i}" for i, (c, f, _) in enumerate(INVALID)])
def test_standin_refuses_what_the_api_documents_as_invalid(standin, settings, code, field, override):
    before = len(standin.jobs)
    with pytest.raises(PaiError) as err:
        PaiClient(settings).create_job(create_fields(**override))
    assert err.value.code == code and field in str(err.value) and err.value.status == 400
    assert err.value.permanent and err.value.request_id
    assert len(standin.jobs) == before  # nothing made


def test_standin_checks_the_signature_and_credentials(standin, settings):
    from dataclasses import replace

    with pytest.raises(PaiError) as err:
        PaiClient(replace(settings, access_key_secret="not-the-secret")).list_jobs(WorkspaceId=WORKSPACE)
    assert err.value.code == "SignatureDoesNotMatch" and err.value.permanent
    with pytest.raises(PaiError) as err:
        PaiClient(replace(settings, access_key_id="LTAI-nobody")).list_jobs(WorkspaceId=WORKSPACE)
    assert err.value.code == "InvalidAccessKeyId.NotFound"
    with pytest.raises(PaiError) as err:  # an STS key pair without (or with a wrong) token
        PaiClient(replace(settings, access_key_id=STS_AK, access_key_secret=STS_SECRET,
                          security_token="stale")).list_jobs(WorkspaceId=WORKSPACE)
    assert err.value.code.startswith("InvalidSecurityToken")
    sts = PaiClient(replace(settings, access_key_id=STS_AK, access_key_secret=STS_SECRET, security_token=STS_TOKEN))
    assert sts.list_jobs(WorkspaceId=WORKSPACE, PageSize=1)[1] >= 0
    # a request without any signature (not the SDK): refused with the API's error body
    request = urllib.request.Request(f"{standin.url}/api/v1/jobs?WorkspaceId={WORKSPACE}")
    with pytest.raises(urllib.error.HTTPError) as http:
        urllib.request.urlopen(request, timeout=10)
    body = json.loads(http.value.read())
    assert http.value.code == 400 and body["Code"] == "IncompleteSignature"
    assert set(body) == {"RequestId", "HostId", "Code", "Message", "Recommend"}
    for secret in SECRETS:
        assert secret not in str(err.value) and secret not in repr(settings)


def test_standin_refuses_unknown_list_values(settings):
    client = PaiClient(settings)
    for query, field in (({"Status": "Sleeping"}, "Status"), ({"PageSize": 1000}, "PageSize"),
                         ({"SortBy": "Colour"}, "SortBy"), ({"StartTime": "yesterday"}, "StartTime")):
        with pytest.raises(PaiError, match=field):
            client.list_jobs(WorkspaceId=WORKSPACE, **query)


# -- the runner ------------------------------------------------------------------------------------
def test_submit_find_adopt_claim_and_stop(standin, runner):
    who = identity()
    job = training(STANDIN_RUN_SECONDS="30")
    name = naming.job_name("train", who, 1)
    ref, created = runner.submit(job, name, who, 1)
    assert created and ref.uid.startswith("dlc") and ref.place == WORKSPACE
    found = runner.find(who, job)
    assert [r.uid for r in found] == [ref.uid]
    again, created_again = runner.submit(job, name, who, 1)  # a retried task: adopts, creates nothing
    assert not created_again and again.uid == ref.uid and len(standin.jobs_named(name)) == 1
    assert runner.lookup(name).uid == ref.uid
    runner.claim(ref, 4)
    assert runner.owner_try(ref) == 4
    assert wait_for(runner, ref, {JobState.RUNNING}).roles["worker"].active == 2
    assert runner.stop(ref) == 1
    stopping = runner.status(ref)
    assert stopping.state is JobState.RUNNING and stopping.reason == "Stopping"
    final = wait_for(runner, ref, {JobState.STOPPED})
    assert final.reason == "Stopped" and final.finished is not None
    assert runner.stop(ref) == 0  # already stopped: nothing to do, no error
    runner.delete(ref)
    assert runner.status(ref).reason == "NotFound" and runner.find(who, job) == []


def test_another_tasks_job_of_that_name_is_not_adopted(runner):
    mine, theirs = identity("a"), identity("b")
    name = naming.job_name("train", mine, 1)
    runner.submit(training(), name, mine, 1)
    with pytest.raises(OwnershipError, match="belongs to another task"):
        runner.submit(training(), name, theirs, 1)


def test_a_refused_create_is_permanent_and_leaves_nothing(standin, settings):
    from dataclasses import replace

    runner = PaiRunner(replace(settings, resource_id=None))  # public resources, but no instance type
    who = identity()
    before = len(standin.jobs)
    with pytest.raises(SubmitError) as err:
        runner.submit(training(), naming.job_name("train", who, 1), who, 1)
    assert err.value.permanent and "EcsSpec" in str(err.value) and "\n" not in str(err.value)
    assert len(standin.jobs) == before


@pytest.mark.parametrize(("outcome", "end"), [("restart-fail", JobState.FAILED), ("restart", JobState.SUCCEEDED)])
def test_states_through_a_restart(runner, outcome, end):
    who = identity()
    ref, _ = runner.submit(training(STANDIN_OUTCOME=outcome, STANDIN_RUN_SECONDS="0.4"),
                           naming.job_name("train", who, 1), who, 1)
    seen: list = []
    follower = runner.follow(ref)
    follower.start(lambda st, pods: seen.append(st))
    try:
        wait_for(runner, ref, {end})
        time.sleep(0.5)
    finally:
        follower.close()
    states = [s.state for s in seen]
    for state in (JobState.QUEUED, JobState.RUNNING, JobState.RESTARTING, end):
        assert state in states, states
    assert states.index(JobState.QUEUED) < states.index(JobState.RUNNING) < states.index(JobState.RESTARTING)
    assert states[-1] is end and seen[-1].restarts == 1
    if end is JobState.FAILED:
        assert "exited with code 3" in seen[-1].message
    events = runner.events(ref)
    assert any("Restarting" in e.message and e.warning for e in events)


def test_logs_stream_without_repeats_and_metrics_come_back(runner):
    who = identity()
    lines = "\n".join(f"step {i}" for i in range(6)) + '\nDLC_METRICS {"loss": 0.25, "step": 6}'
    ref, _ = runner.submit(training(STANDIN_LOG=lines, STANDIN_RUN_SECONDS="1.5"), naming.job_name("t", who, 1), who, 1)
    got: list = []
    positions: dict = {}
    deadline = time.monotonic() + 20
    while runner.status(ref).state is not JobState.SUCCEEDED:
        new, positions = runner.logs(ref, positions)
        got += new
        assert time.monotonic() < deadline
        time.sleep(0.2)
    new, positions = runner.logs(ref, positions)
    got += new
    master = [line for replica, line in got if replica == "master-0"]
    assert master[1:] == [f"step {i}" for i in range(6)] + ['DLC_METRICS {"loss": 0.25, "step": 6}'], master
    assert {replica for replica, _ in got} == {"master-0", "worker-0", "worker-1"}
    assert runner.outputs(ref) == {"metrics": {"loss": 0.25, "step": 6}, "outputs": {}}


# -- the shared poller ------------------------------------------------------------------------------
def test_one_list_per_interval_for_every_follower(standin, settings):
    registry = PollerRegistry()
    runner = PaiRunner(settings, registry=registry)
    refs = []
    for _ in range(12):
        who = identity()
        refs.append(runner.submit(training(STANDIN_RUN_SECONDS="30"), naming.job_name("t", who, 1), who, 1)[0])
    updates: dict[str, int] = {}
    lock = threading.Lock()
    followers = []
    for ref in refs:
        follower = runner.follow(ref)
        follower.start(lambda st, pods, uid=ref.uid: (lock.acquire(), updates.__setitem__(uid, updates.get(uid, 0) + 1),
                                                      lock.release()))
        followers.append(follower)
    time.sleep(0.5)
    [poller] = registry.pollers()
    start_lists, start_gets, start_polls = standin.count("ListJobs"), standin.count("GetJob"), poller.polls
    time.sleep(2.0)
    lists, gets, polls = (standin.count("ListJobs") - start_lists, standin.count("GetJob") - start_gets,
                          poller.polls - start_polls)
    for follower in followers:
        follower.close()
    assert set(updates) == {r.uid for r in refs}  # every follower heard of its job
    assert gets == 0  # no GetJob per job while waiting
    assert polls >= 5 and lists == polls  # one ListJobs per round for all 12 jobs
    for ref in refs:
        runner.stop(ref)


def test_throttling_backs_off_and_recovers(standin, settings):
    from dataclasses import replace

    registry = PollerRegistry()
    runner = PaiRunner(replace(settings, poll_interval=0.1, poll_max_interval=2.0), registry=registry)
    who = identity()
    ref, _ = runner.submit(training(STANDIN_RUN_SECONDS="30"), naming.job_name("t", who, 1), who, 1)
    follower = runner.follow(ref)
    follower.start(lambda st, pods: None)
    try:
        time.sleep(0.3)
        [poller] = registry.pollers()
        standin.throttle(4, action="ListJobs")
        deadline = time.monotonic() + 5
        while poller.throttled < 4:
            assert time.monotonic() < deadline, "the poller did not meet the throttling"
            time.sleep(0.05)
        assert poller.interval >= 0.8  # 0.1 doubled four times
        deadline = time.monotonic() + 10
        while poller.interval > 0.1:
            assert time.monotonic() < deadline, f"still polling every {poller.interval}s"
            time.sleep(0.1)
    finally:
        follower.close()
        runner.stop(ref)


def test_a_deleted_job_is_reported_gone(standin, settings):
    registry = PollerRegistry()
    runner = PaiRunner(settings, registry=registry)
    who = identity()
    ref, _ = runner.submit(training(STANDIN_RUN_SECONDS="30"), naming.job_name("t", who, 1), who, 1)
    seen: list = []
    follower = runner.follow(ref)
    follower.start(lambda st, pods: seen.append(st))
    try:
        time.sleep(0.4)
        standin.jobs[ref.uid].deleted = True  # deleted behind our back (the console)
        deadline = time.monotonic() + 10
        while not seen or seen[-1].reason != "NotFound":
            assert time.monotonic() < deadline, seen[-1:]
            time.sleep(0.1)
        assert seen[-1].state is JobState.STOPPED
    finally:
        follower.close()


# -- the connection ------------------------------------------------------------------------------------
def conn(**kw):
    base = {"login": AK, "password": "x" * 10, "host": None, "port": None,
            "extra_dejson": {"region_id": REGION, "workspace_id": WORKSPACE}}
    base.update(kw)
    return SimpleNamespace(**base)


@pytest.mark.parametrize(("kw", "field"), [
    ({"extra_dejson": {"workspace_id": WORKSPACE}}, "region_id"),
    ({"extra_dejson": {"region_id": REGION}}, "workspace_id"),
    ({"password": None}, "password"),
    ({"login": None}, "login"),
    ({"login": None, "password": None, "extra_dejson": {"region_id": REGION, "workspace_id": "w",
                                                        "security_token": "t" * 8}}, "security_token"),
    ({"extra_dejson": {"region_id": REGION, "workspace_id": "w", "poll_interval": "soon"}}, "poll_interval"),
])
def test_connection_errors_name_the_field(kw, field):
    with pytest.raises(PaiConfigError, match=field) as err:
        settings_from("pai_x", conn(**kw))
    assert "'pai_x'" in str(err.value) and "x" * 10 not in str(err.value)


def test_connection_auth_modes_and_overrides():
    plain = settings_from("c", conn())
    assert plain.auth == "AccessKey" and "xxxxxxxxxx" not in repr(plain)
    sts = settings_from("c", conn(extra_dejson={"region_id": REGION, "workspace_id": "w", "security_token": STS_TOKEN}))
    assert sts.auth == "STS token" and STS_TOKEN not in repr(sts)
    chain = settings_from("c", conn(login=None, password=None))
    assert chain.auth == "default credentials chain"
    assert settings_from("c", conn(), namespace="ws-2").workspace_id == "ws-2"
    assert settings_from("c", conn(host="pai-dlc-vpc.cn-hangzhou.aliyuncs.com")).endpoint.startswith("pai-dlc-vpc")


def test_hook_test_button(pai_conn, standin, monkeypatch):
    from dlc_airflow.pai.hook import PaiHook

    ok, message = PaiHook(pai_conn).test_connection()
    assert ok and WORKSPACE in message and "AccessKey" in message
    monkeypatch.setenv(f"AIRFLOW_CONN_{pai_conn.upper()}", json.dumps(
        {"conn_type": "dlc_pai", "login": AK, "password": "wrong-secret",
         "extra": {"region_id": REGION, "workspace_id": WORKSPACE, "endpoint": standin.url}}))
    ok, message = PaiHook(pai_conn).test_connection()
    assert not ok and "SignatureDoesNotMatch" in message and "wrong-secret" not in message


ROLES = {"pytorch": {"master": 1, "worker": 2}, "deepspeed": {"worker": 2}, "megatron": {"worker": 2},
         "tensorflow": {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1}, "mpi": {"launcher": 1, "worker": 2},
         "xgboost": {"master": 1, "worker": 2}, "ray": {"head": 1, "worker": 2}, "batch": {"worker": 3},
         "custom": {"main": 2}, "slurm": {"worker": 2}}


@pytest.mark.parametrize("job_type", sorted(t.value for t in JobType))
def test_every_type_is_accepted_by_the_standin(runner, standin, job_type):
    """What render makes for each type passes the stand-in's checks (roles per JobType...)."""
    who = identity()
    job = DLCJob(type=job_type, image="registry/train:1", command=["python", "run.py"], roles=ROLES[job_type],
                 resources={"cpu": "2", "memory": "8Gi"}, env={"STANDIN_RUN_SECONDS": "0.2"})
    ref, created = runner.submit(job, naming.job_name("t", who, 1), who, 1)
    assert created
    final = wait_for(runner, ref, {JobState.SUCCEEDED})
    assert set(final.roles) == set(ROLES[job_type]), final.roles
