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
