"""What a wait logs and decides (pure bookkeeping, fed with statuses and a clock)."""

from dlc_airflow.progress import Progress
from dlc_airflow.status import JobState, JobStatus, RoleCounts


def status(state, reason="", message="", restarts=0, active=0):
    return JobStatus(state=JobState(state), reason=reason, message=message, restarts=restarts,
                     roles={"worker": RoleCounts(replicas=2, active=active)})


def test_logs_state_changes_and_restarts_but_not_repeats():
    p = Progress("job-1", now=0.0)
    assert p.update(status("PENDING"), 1.0) == ["job job-1: PENDING [worker 0 active/0 ok/0 failed of 2]"]
    assert p.update(status("PENDING"), 2.0) == []
    lines = p.update(status("RUNNING", active=2, restarts=1), 3.0)
    assert lines[0].startswith("job job-1: RUNNING") and "restarts=1" in lines[0]
    assert "restarted (1 restart so far)" in lines[1]
    lines = p.update(status("RESTARTING", reason="Preempted", message="Kueue: Preempted to accommodate a workload",
                            restarts=2), 4.0)
    assert "job job-1: was preempted and requeued (2 restarts so far)" in lines[1]


def test_queue_timeout_carries_the_schedulers_message():
    p = Progress("job-1", now=0.0, queue_timeout=60)
    msg = "0/7 nodes are available: 7 Insufficient nvidia.com/gpu."
    p.update(status("QUEUED", reason="Unschedulable", message=msg), 1.0)
    assert p.verdict(59.0) is None
    verdict = p.verdict(60.0)
    assert verdict.kind == "queue_timeout" and msg in verdict.message and "(60s)" in verdict.message


def test_queue_clock_restarts_when_the_job_runs_and_queues_again():
    p = Progress("job-1", now=0.0, queue_timeout=10)
    p.update(status("RUNNING", active=2), 5.0)
    p.update(status("QUEUED", message="preempted; no capacity"), 100.0)
    assert p.verdict(109.0) is None and p.verdict(110.0).kind == "queue_timeout"


def test_a_resumed_wait_keeps_the_time_already_queued():
    p = Progress("job-1", now=1000.0, queue_timeout=60, queued_already=50)
    p.update(status("PENDING"), 1000.0)
    assert p.verdict(1009.0) is None and p.verdict(1010.0).kind == "queue_timeout"


def test_timeout_and_finish():
    p = Progress("job-1", now=0.0, timeout=100)
    p.update(status("RUNNING", active=2), 1.0)
    assert p.verdict(99.0) is None
    assert p.verdict(100.0).kind == "timeout"
    p.update(status("SUCCEEDED"), 101.0)
    verdict = p.verdict(101.0)  # a finished job wins over a just-expired timeout
    assert verdict.kind == "finished" and verdict.status.state.value == "SUCCEEDED"


def test_failure_verdict_names_reason_and_message():
    p = Progress("job-1", now=0.0)
    p.update(status("FAILED", reason="PodFailurePolicy", message="container main exited with code 3"), 1.0)
    verdict = p.verdict(1.0)
    assert verdict.kind == "finished" and verdict.status.state.value == "FAILED"
    assert verdict.message == "job job-1 failed: PodFailurePolicy - container main exited with code 3"


def test_heartbeat_on_long_quiet_waits_and_next_wakeup():
    p = Progress("job-1", now=0.0, heartbeat=60, timeout=1000)
    p.update(status("RUNNING", active=2), 0.0)
    assert p.heartbeat(30.0) is None
    assert "still RUNNING" in p.heartbeat(61.0) and "after 3m20s" in p.heartbeat(200.0)
    assert p.next_wakeup(200.0, default=5.0) == 5.0
    p.heartbeat(990.0)
    assert abs(p.next_wakeup(998.0, default=5.0) - 2.0) < 1e-9  # the timeout is due first
    assert p.next_wakeup(1100.0, default=5.0) == 0.05  # overdue: wake at once


def test_a_job_that_cannot_start_fails_after_queue_timeout_with_the_controllers_reason():
    p = Progress("job-1", now=0.0, queue_timeout=30)
    p.update(status("PENDING"), 0.0)
    assert not p.starting(4.0) and p.starting(5.0)  # a moment before asking why
    why = 'Job job-1-worker: pods "job-1-worker-0-x" is forbidden: serviceaccount "nope" not found'
    assert p.cannot_start(why, 6.0) == [f"job job-1: cannot start: {why}"]
    assert p.cannot_start(why, 7.0) == []  # said once
    assert p.verdict(29.0) is None
    verdict = p.verdict(30.0)
    assert verdict.kind == "queue_timeout" and "could not start within queue_timeout (30s)" in verdict.message
    assert why in verdict.message


def test_a_job_that_cannot_start_has_a_default_limit_and_running_clears_it():
    from dlc_airflow.progress import CANNOT_START_TIMEOUT

    p = Progress("job-1", now=0.0)  # no queue_timeout
    p.update(status("PENDING"), 0.0)
    assert p.queue_limit() is None and p.verdict(10_000.0) is None  # queued for capacity: no limit
    p.cannot_start("Job job-1-worker: quota exceeded", 10_000.0)
    assert p.queue_limit() == CANNOT_START_TIMEOUT
    assert "the default for jobs that cannot start" in p.verdict(10_000.0).message  # queued since 0
    p.update(status("RUNNING", active=2), 10_001.0)
    assert p.blocked == "" and p.queue_limit() is None and p.verdict(20_000.0) is None


def test_image_pull_errors_make_a_job_queued_cannot_start():
    from dlc_airflow.progress import CANNOT_START_TIMEOUT

    p = Progress("job-1", now=0.0)
    p.update(status("QUEUED", reason="CannotStart", message="pod p container main: ImagePullBackOff: x"), 1.0)
    assert p.queue_limit() == CANNOT_START_TIMEOUT
    assert p.verdict(CANNOT_START_TIMEOUT).message.endswith("ImagePullBackOff: x")
