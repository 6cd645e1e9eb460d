"""The registry of shared watches: one per key, reaped after its last waiter has lingered."""

import time

from dlc_airflow.k8s.watch import WatchRegistry


class StubWatch:
    """Stands in for SharedWatch (no API server needed for the registry's bookkeeping)."""

    def __init__(self):
        self.waiters = 0
        self.stopped = False

    def waiting(self):
        return self.waiters

    def stop(self):
        self.stopped = True


def test_one_watch_per_key_and_reaped_after_linger():
    registry = WatchRegistry(linger=0.2)
    made = []

    def factory():
        made.append(StubWatch())
        return made[-1]

    a = registry.get(("c", "ns", "jobs"), factory)
    assert registry.get(("c", "ns", "jobs"), factory) is a and len(made) == 1
    b = registry.get(("c", "ns", "pods"), factory)
    assert b is not a and len(made) == 2
    registry.release(("c", "ns", "jobs"))  # no waiters: idle, not yet stopped
    assert not a.stopped and ("c", "ns", "jobs") in registry.watches()
    time.sleep(0.5)  # reaped by the release timer, without further calls
    assert a.stopped and ("c", "ns", "jobs") not in registry.watches()
    assert not b.stopped


def test_a_watch_that_gets_a_waiter_again_is_kept():
    registry = WatchRegistry(linger=0.2)
    watch = registry.get("k", StubWatch)
    registry.release("k")
    watch.waiters = 1
    assert registry.get("k", StubWatch) is watch
    time.sleep(0.4)
    assert not watch.stopped


class SyncedWatch(StubWatch):
    """A shared watch that has listed already: it answers a new subscriber at once, in the call."""

    def __init__(self, objects):
        super().__init__()
        self.objects = objects

    def subscribe(self, job, callback):
        from dlc_airflow.k8s.watch import JobObjects

        self.waiters += 1
        callback(JobObjects(live=dict(self.objects), synced=True))
        return lambda: None


def test_a_waiter_on_warm_watches_of_a_queued_job_follows_its_workloads():
    """The job watch answers during start(), and the job names a Kueue queue: the waiter adds the
    Workloads' watch while it is still subscribing (this once broke start())."""
    from dlc_airflow.jobref import JobRef
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.kinds import JOBSET, WORKLOAD
    from dlc_airflow.k8s.waiter import JobWaiter

    queued = {"j": {"apiVersion": JOBSET.api_version, "kind": "JobSet", "metadata": {
        "name": "j", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}}, "spec": {"suspend": True}}}
    registry = WatchRegistry()
    watches = {}

    def factory_for(key):
        return watches.setdefault(key, SyncedWatch(queued if key[2] == JOBSET else {}))

    waiter = JobWaiter(None, get_backend("jobset"), JobRef("jobset", "ns", "j"), JOBSET, "c", registry=registry)
    waiter._watch_factory = lambda key: (lambda: factory_for(key))
    seen = []
    waiter.start(lambda status, pods: seen.append(status))
    assert ("c", "ns", WORKLOAD) in watches and seen and seen[-1].state.value == "QUEUED"
    waiter.close()
