"""The shared watch against the real API server: one watch per namespace and kind serves every
waiting job, and every terminal state is delivered through dropped connections, injected
errors, 410 Gone (forced by the proxy, and the real server's answer to an expired
resourceVersion) and an API server restart."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.k8s.errors import Gone
from dlc_airflow.k8s.kinds import JOB
from dlc_airflow.k8s.runner import KubeRunner
from dlc_airflow.k8s.waiter import JobWaiter
from dlc_airflow.k8s.watch import WatchRegistry
from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

RUN_FOR = "pod-complete.stage.kwok.x-k8s.io/delay"


def batch_job(seconds: float, shards: int = 1) -> DLCJob:
    return DLCJob(type="batch", image="registry.local/prep:1", command=["prep"], roles={"worker": shards},
                  annotations={RUN_FOR: f"{seconds}s"})


class Recorder:
    """Collects the statuses one waiter sees."""

    def __init__(self):
        self.states: list[JobState] = []
        self.done = threading.Event()

    def __call__(self, status, pods):
        self.states.append(status.state)
        if status.terminal:
            self.done.set()


def submit_many(runner: KubeRunner, count: int, seconds) -> list:
    refs = []
    for i in range(count):
        identity = TaskIdentity("watch", f"t{i}", uuid.uuid4().hex)
        job = batch_job(seconds(i))
        ref, _ = runner.submit(job, job_name(f"w{i}", identity, 1), identity, 1)
        refs.append(ref)
    return refs


def follow(runner: KubeRunner, refs, registry: WatchRegistry):
    recorders = {}
    waiters = []
    for ref in refs:
        rec = Recorder()
        waiter = JobWaiter(runner.client, runner.backend, ref, JOB, "test", registry=registry)
        waiter.start(rec)
        recorders[ref.name] = rec
        waiters.append(waiter)
    return recorders, waiters


def wait_all(recorders, timeout=120):
    deadline = time.monotonic() + timeout
    for name, rec in recorders.items():
        assert rec.done.wait(max(0.1, deadline - time.monotonic())), f"{name} never reached a terminal state: {rec.states}"


def test_one_watch_per_namespace_serves_every_waiter(cluster, namespace):
    kube = cluster.restricted(namespace)
    runner = KubeRunner(kube, get_backend("native"))
    registry = WatchRegistry()
    refs = submit_many(runner, 15, lambda i: 1 + (i % 4))
    recorders, waiters = follow(runner, refs, registry)
    wait_all(recorders)
    assert all(rec.states[-1] == JobState.SUCCEEDED for rec in recorders.values())
    watches = registry.watches()
    # one for Jobs, one for Pods, one for Events, whatever the number of waiters
    assert sorted(key[2].kind for key in watches) == ["Event", "Job", "Pod"]
    assert all(w.stats.lists == 1 for w in watches.values())
    # the Events of every job are at hand without a request (KubeRunner.events reads the cache)
    events = next(w for key, w in watches.items() if key[2].kind == "Event")
    assert all(events.cached(ref.name) is not None for ref in refs)
    assert all(events.cached(ref.name).live for ref in refs)  # each job's pods were Scheduled at least
    for waiter in waiters:
        waiter.close()


def test_every_terminal_state_survives_drops_errors_and_410(cluster, namespace):
    with cluster.fault_proxy() as proxy:
        kube = cluster.restricted(namespace, server=proxy.url, ca_file=proxy.ca_file, backoff=0.01, retries=8)
        runner = KubeRunner(kube, get_backend("native"))
        registry = WatchRegistry()
        refs = submit_many(runner, 12, lambda i: 1 + (i % 5))
        # some jobs fail (chaos), some are deleted while the watch is away
        failing = DLCJob(type="batch", image="registry.local/prep:1", command=["prep"],
                         labels={"pod-container-running-failed.stage.kwok.x-k8s.io": "true"},
                         annotations={"pod-container-running-failed.stage.kwok.x-k8s.io/exit-code": "2"},
                         fault_tolerance={"retryable_exit_codes": [1]})
        identity = TaskIdentity("watch", "failing", uuid.uuid4().hex)
        failed_ref, _ = runner.submit(failing, job_name("failing", identity, 1), identity, 1)
        doomed = submit_many(runner, 1, lambda i: 600)[0]
        recorders, waiters = follow(runner, refs + [failed_ref, doomed], registry)

        stop = threading.Event()

        def gone_seen() -> bool:
            return proxy.gone > 0 and sum(w.stats.gone for w in registry.watches().values()) > 0

        def chaos():
            # first every watch request is answered 410 until one is handled: the random phases
            # below may send none (the watches back off through the blackouts)
            proxy.set(only_watches=True, gone_share=1.0)
            proxy.drop_connections()
            deadline = time.monotonic() + 60
            while not gone_seen() and time.monotonic() < deadline and not stop.is_set():
                time.sleep(0.1)
            while not stop.is_set():
                proxy.set(error_share=0.3, error_status=503, gone_share=0.3)
                time.sleep(0.7)
                proxy.drop_connections()
                # a blackout: nothing reaches the server while jobs finish
                proxy.set(error_share=1.0, error_status=503)
                time.sleep(1.0)
        chaos_thread = threading.Thread(target=chaos, daemon=True)
        chaos_thread.start()
        time.sleep(2)
        cluster.admin().delete(JOB, f"{doomed.name}-worker", namespace)  # deleted while we are away
        try:
            wait_all(recorders, timeout=180)
        finally:
            stop.set()
            chaos_thread.join(5)
            proxy.set()
        for ref in refs:
            assert recorders[ref.name].states[-1] == JobState.SUCCEEDED, (ref.name, recorders[ref.name].states)
        assert recorders[failed_ref.name].states[-1] == JobState.FAILED
        assert recorders[doomed.name].states[-1] == JobState.STOPPED
        stats = [w.stats for w in registry.watches().values()]
        assert gone_seen()  # 410s were really handled
        assert sum(s.errors for s in stats) > 0  # and broken connections
        for waiter in waiters:
            waiter.close()
        for watch in registry.watches().values():
            watch.stop()  # before the proxy goes: no thread left logging after the test


def test_real_410_for_an_expired_resource_version(kube):
    with pytest.raises(Gone) as exc:
        for _ in kube.watch(JOB, resource_version="1", timeout_seconds=5):
            pass
    assert exc.value.status == 410 and "too old resource version" in exc.value.message


def test_waiters_get_terminal_states_across_an_api_server_restart(cluster, namespace):
    kube = cluster.restricted(namespace, backoff=0.5, retries=10)
    runner = KubeRunner(kube, get_backend("native"))
    registry = WatchRegistry()
    refs = submit_many(runner, 6, lambda i: 4 + i)
    recorders, waiters = follow(runner, refs, registry)
    time.sleep(1)
    cluster.restart_apiserver()
    wait_all(recorders, timeout=180)
    assert all(rec.states[-1] == JobState.SUCCEEDED for rec in recorders.values())
    for waiter in waiters:
        waiter.close()
