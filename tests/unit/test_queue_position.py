"""Where a queued job stands (pure): Kueue's visibility list -> position and what is ahead, and
the wait's bookkeeping says it on change only."""

from __future__ import annotations

from dlc_airflow import reasons
from dlc_airflow.k8s.backends.kueue import QueuePosition, queue_position, workload_gpus
from dlc_airflow.progress import Progress
from dlc_airflow.status import JobState, JobStatus


def pending(name: str, uid: str, in_lq: int, in_cq: int, queue: str = "team-a") -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "ownerReferences": [{"kind": "JobSet", "uid": uid}]},
            "localQueueName": queue, "positionInLocalQueue": in_lq, "positionInClusterQueue": in_cq, "priority": 0}


def workload(name: str, *pod_sets: tuple[int, int]) -> dict:
    return {"metadata": {"name": name}, "spec": {"podSets": [
        {"name": f"ps{i}", "count": count, "template": {"spec": {"containers": [
            {"name": "main", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}}}]}}}
        for i, (count, gpus) in enumerate(pod_sets)]}}


def test_position_counts_from_one_and_sums_the_gpus_ahead():
    items = [pending("wl-a", "uid-a", 0, 2), pending("wl-b", "uid-b", 1, 4), pending("wl-me", "uid-me", 2, 7)]
    workloads = [workload("wl-a", (1, 8), (2, 8)), workload("wl-b", (1, 0)), workload("wl-me", (4, 8))]
    position = queue_position(items, "uid-me", workloads)
    assert position == QueuePosition("team-a", 3, 8, ahead=2, gpus_ahead=24)
    assert position.describe() == ("queue position 3 in LocalQueue team-a (8 in its ClusterQueue); "
                                   "2 workloads ahead asking 24 GPUs")


def test_first_in_line_and_not_pending():
    items = [pending("wl-me", "uid-me", 0, 0)]
    position = queue_position(items, "uid-me", [])
    assert position is not None and position.describe().endswith("nothing ahead")
    assert queue_position(items, "uid-other", []) is None  # admitted, or not in this queue
    assert queue_position([], "uid-me", []) is None


def test_gpus_of_a_workload_from_requests_or_limits():
    limits_only = {"spec": {"podSets": [{"count": 2, "template": {"spec": {"containers": [
        {"resources": {"limits": {"nvidia.com/gpu": "4"}}}, {"resources": {}}]}}}]}}
    assert workload_gpus(limits_only) == 8
    assert workload_gpus({"spec": {}}) == 0


def queued() -> JobStatus:
    return JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED, message="Kueue: waiting for quota")


def test_the_wait_says_the_position_on_change_only():
    progress = Progress("job-1", 0.0)
    progress.step([queued()], 0.0)
    first = progress.step([], 10.0, position="queue position 3 in LocalQueue q (3 in its ClusterQueue); x")
    assert first.info == ["job job-1: queue position 3 in LocalQueue q (3 in its ClusterQueue); x"]
    assert not first.read_logs  # not news about the job itself
    assert progress.step([], 20.0, position="queue position 3 in LocalQueue q (3 in its ClusterQueue); x").info == []
    assert progress.step([], 30.0, position="queue position 2 in LocalQueue q (2 in its ClusterQueue); y").info \
        == ["job job-1: queue position 2 in LocalQueue q (2 in its ClusterQueue); y"]
    assert progress.step([], 40.0, position="").info == []


def test_no_position_once_running():
    progress = Progress("job-1", 0.0)
    progress.step([JobStatus(state=JobState.RUNNING)], 0.0)
    assert progress.step([], 10.0, position="queue position 1 in LocalQueue q").info == []
