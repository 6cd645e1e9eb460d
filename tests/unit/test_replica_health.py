"""A running replica whose node stopped reporting: how a pod says so, and what the wait logs
when it happens and when the replica is no longer unwell (the job's own state may not change)."""

import logging
from dataclasses import replace

from dlc_airflow.airflow.waiting import WaitIO
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.pods import replicas_of, unwell
from dlc_airflow.progress import Progress, replica_health
from dlc_airflow.runner import Replica
from dlc_airflow.status import JobState, JobStatus

NODE_LOST = "its node stopped reporting (NodeNotReady): the pod is marked not ready"


def pod(phase="Running", ready="True", reason=None, uid="u-1"):
    condition = {"type": "Ready", "status": ready, **({"reason": reason} if reason else {})}
    return {"metadata": {"name": "j-worker-0-abc", "uid": uid, "labels": {"dlc-airflow/role": "worker"},
                         "annotations": {"batch.kubernetes.io/job-completion-index": "0"}},
            "spec": {"nodeName": "dlc-node-0", "containers": [{"name": "main"}]},
            "status": {"phase": phase, "conditions": [condition]}}


def test_only_the_node_controllers_not_ready_marks_a_pod_unwell():
    # the node lifecycle controller flips Ready to False and leaves the (absent) reason as it was
    assert unwell(pod(ready="False")) == NODE_LOST
    # the kubelet's own Ready=False always has a reason: a container restarting or not started
    assert unwell(pod(ready="False", reason="ContainersNotReady")) == ""
    assert unwell(pod(ready="True")) == ""
    # only a running pod: a finished one is not ready by design
    assert unwell(pod(phase="Succeeded", ready="False")) == ""
    assert unwell(pod(phase="Pending", ready="False")) == ""
    assert replicas_of([pod(ready="False")])[0].unwell == NODE_LOST


def replica(unwell_="", uid="u-1", state="Running"):
    return Replica(name="worker-0", role="worker", index=0, state=state, node="dlc-node-0", uid=uid, unwell=unwell_)


def test_the_wait_says_when_a_replica_becomes_unwell_and_when_it_is_no_longer():
    warnings, lines = replica_health("j", [replica()], [replica(NODE_LOST)])
    assert lines == [] and len(warnings) == 1
    assert warnings[0].startswith("job j: replica worker-0 on node dlc-node-0: its node stopped reporting")
    assert "the wait goes on until the job itself ends" in warnings[0]
    # said once, not on every look while it lasts
    assert replica_health("j", [replica(NODE_LOST)], [replica(NODE_LOST)]) == ([], [])
    assert replica_health("j", [replica(NODE_LOST)], [replica()]) == (
        [], ["job j: replica worker-0 on node dlc-node-0 is no longer reported unwell"])
    # a wait that starts (or resumes in another triggerer) while it lasts says so at once
    assert len(replica_health("j", [], [replica(NODE_LOST)])[0]) == 1
    # a replacement is a new replica: its predecessor's trouble is not its recovery
    assert replica_health("j", [replica(NODE_LOST)], [replica(uid="u-2")]) == ([], [])
    assert replica_health("j", [replica(NODE_LOST)], [replica(state="Succeeded")]) == ([], [])
    # the replacement and the evicted pod it replaces (Terminating on the lost node, same name):
    # the loss is said once, not again at every look while both exist
    both = [replica(NODE_LOST), replica(uid="u-2")]
    assert replica_health("j", both, list(reversed(both))) == ([], [])


def test_each_update_of_a_turn_is_compared_with_the_one_before(caplog):
    running = JobStatus(state=JobState.RUNNING)
    wait = WaitIO(runner=None, ref=JobRef(backend="native", place="ml", name="j"),  # type: ignore[arg-type]
                  log=logging.getLogger("test.wait"), progress=Progress("j", 0.0))
    with caplog.at_level(logging.INFO, logger="test.wait"):
        wait.turn([(running, [replica()])], 1.0)
        # lost and back within one turn: both are said, in order
        wait.turn([(running, [replica(NODE_LOST)]), (running, [replica()])], 2.0)
    said = [(r.levelname, r.getMessage()) for r in caplog.records if "replica worker-0" in r.getMessage()]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert wait.replicas == [replica()]


class Rereads:
    """The one runner call a wait makes when its job has ended: the replicas, read again."""

    def __init__(self, fresh):
        self.fresh = fresh

    def replicas(self, ref):
        if isinstance(self.fresh, Exception):
            raise self.fresh
        return self.fresh


def ended_wait(fresh, followed):
    wait = WaitIO(runner=Rereads(fresh), ref=JobRef(backend="kubeflow", place="ml", name="j"),  # type: ignore[arg-type]
                  log=logging.getLogger("test.wait"), progress=Progress("j", 0.0, stream_logs=False))
    wait.turn([(JobStatus(state=JobState.RUNNING), followed)], 1.0)
    return wait


def test_the_replicas_are_read_again_when_the_job_ends():
    master = Replica(name="master-0", role="master", index=0, state="Running")
    worker = Replica(name="worker-0", role="worker", index=0, state="Pending")
    wait = ended_wait([replace(master, state="Succeeded"), replace(worker, state="Running")], [master, worker])
    assert wait.turn([(JobStatus(state=JobState.SUCCEEDED), [replace(master, state="Succeeded"), worker])], 2.0)
    # the follower's report lagged the worker: the fresh read says it ran, so its lines are read
    assert [(r.name, r.state) for r in wait.replicas] == [("master-0", "Succeeded"), ("worker-0", "Running")]


def test_a_replica_gone_at_the_end_is_kept_as_last_seen_and_a_failed_read_keeps_them_all():
    master = Replica(name="master-0", role="master", index=0, state="Succeeded")
    worker = Replica(name="worker-0", role="worker", index=0, state="Running")
    wait = ended_wait([master], [master, worker])  # the controller deleted the running worker
    assert wait.turn([(JobStatus(state=JobState.SUCCEEDED), [master, worker])], 2.0)
    assert [r.name for r in wait.replicas] == ["master-0", "worker-0"]
    wait = ended_wait(ConnectionError("refused"), [master, worker])
    assert wait.turn([(JobStatus(state=JobState.SUCCEEDED), [master, worker])], 2.0)
    assert wait.replicas == [master, worker]
