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


# One turn of a wait (Progress.step): what the worker's and the triggerer's loops both act on.

def test_a_step_logs_changes_tells_every_status_and_reads_logs_at_changes():
    p = Progress("job-1", now=0.0, stream_logs=True)  # the triggerer's shape: logs at changes only
    first, same = status("PENDING"), status("PENDING")
    step = p.step([first, same], 1.0)
    assert step.info == ["job job-1: PENDING [worker 0 active/0 ok/0 failed of 2]"]
    assert [(c.previous, c.status) for c in step.changes] == [(None, first), (first, same)]
    assert step.read_logs and step.read_events and step.verdict is None
    quiet = p.step([], 2.0)  # no news: nothing to read, no heartbeat yet
    assert quiet == type(quiet)() and not quiet.read_logs
    done = p.step([status("SUCCEEDED")], 3.0)
    assert done.read_logs and done.verdict is not None and done.verdict.kind == "finished"


def test_a_step_without_news_is_a_heartbeat_without_reading_logs():
    p = Progress("job-1", now=0.0, heartbeat=60, stream_logs=True)
    p.step([status("RUNNING", active=2)], 1.0)
    step = p.step([], 62.0)
    assert step.info == ["job job-1: still RUNNING [worker 2 active/0 ok/0 failed of 2] after 62s"]
    assert not step.read_logs and step.changes == []


def test_a_workers_wait_reads_logs_on_a_clock_and_events_less_often():
    from dlc_airflow.progress import EVENTS_EVERY

    p = Progress("job-1", now=0.0, stream_logs=True, log_every=2.0)
    p.step([status("RUNNING", active=2)], 0.0)
    assert not p.step([], 1.0).read_logs
    logs_only = p.step([], 2.0)
    assert logs_only.read_logs and not logs_only.read_events
    later = p.step([], EVENTS_EVERY + 0.5)
    assert later.read_logs and later.read_events


def test_no_logs_are_read_when_not_streamed_even_at_the_end():
    p = Progress("job-1", now=0.0, log_every=2.0)
    assert not p.step([status("RUNNING", active=2)], 0.0).read_logs
    end = p.step([status("FAILED", reason="Error", message="exit 3")], 5.0)
    assert not end.read_logs and end.verdict is not None and "exit 3" in end.verdict.message


def test_why_a_job_cannot_start_is_asked_at_most_every_start_check_and_said_once():
    from dlc_airflow.progress import START_CHECK_EVERY

    p = Progress("job-1", now=0.0, queue_timeout=60)
    p.step([status("PENDING")], 0.0)
    assert not p.time_to_ask_why(4.0)  # a moment to start first
    assert p.time_to_ask_why(5.0) and not p.time_to_ask_why(5.0 + START_CHECK_EVERY - 1)
    why = "Job job-1-worker: pods \"x\" is forbidden: quota"
    step = p.step([], 6.0, why=why)
    assert step.warnings == [f"job job-1: cannot start: {why}"] and step.verdict is None
    assert p.step([], 7.0, why=why).warnings == []  # said once
    assert "could not start within queue_timeout (60s)" in p.step([], 60.0).verdict.message
    p2 = Progress("job-2", now=0.0)
    p2.step([status("RUNNING", active=2)], 0.0)
    assert not p2.time_to_ask_why(100.0)  # running: nothing to ask


def test_the_next_turn_is_due_sooner_while_a_job_has_not_started():
    from dlc_airflow.progress import QUIET_WAKEUP, START_CHECK_EVERY

    p = Progress("job-1", now=0.0, heartbeat=3600)
    p.step([status("PENDING")], 0.0)
    assert p.wakeup(1.0) == START_CHECK_EVERY
    p.step([status("RUNNING", active=2)], 2.0)
    assert p.wakeup(3.0) == QUIET_WAKEUP
    streaming = Progress("job-2", now=0.0, heartbeat=3600, stream_logs=True, log_every=2.0)
    streaming.step([status("RUNNING", active=2)], 0.0)
    assert streaming.wakeup(0.5) == 2.0


def _line(replica, step, total, t):
    return (replica, f'DLC_METRICS {{"step":{step},"total_steps":{total},"loss":0.5,"time":{t}}}')


def test_progress_lines_are_logged_on_change_only():
    from dlc_airflow.runner import LogLine

    p = Progress("job-1", now=0.0)
    said = []
    for i in range(0, 101):  # one progress line a second, read in batches of 5
        if i % 5 == 0 and i:
            batch = [LogLine(*_line("worker-0", s, 100, 1000.0 + s)) for s in range(i - 4, i + 1)]
            said += p.observe(batch, float(i))
    assert said[0] == "job job-1: progress 5/100 steps (5%), ETA 95s"
    assert said[-1] == "job job-1: progress 100/100 steps (100%), ETA 0s"
    assert len(said) <= 21  # at most one per 5% step (plus an ETA that moved), never one per line
    assert p.observe([LogLine("worker-0", "hello")], 200.0) == []


def test_progress_counts_the_coordinators_lines_and_the_backends_when_none():
    from dlc_airflow.runner import LogLine
    from dlc_airflow.status import ReportedProgress

    p = Progress("job-1", now=0.0)
    running = JobStatus(state=JobState.RUNNING, progress=ReportedProgress(percent=30, eta_seconds=70))
    assert p.update(running, 1.0)[-1] == "job job-1: progress 30%, ETA 70s"
    p.observe([LogLine(*_line("worker-1", 90, 100, 10.0))], 2.0)
    assert p.counting == "worker-1"
    said = p.observe([LogLine(*_line("master-0", 20, 100, 10.0)), LogLine(*_line("worker-1", 95, 100, 11.0))], 3.0)
    assert p.counting == "master-0" and said == ["job job-1: progress 20/100 steps (20%), ETA unknown"]
    # the job's own lines win over the backend's percentage from now on
    assert not any("progress" in line for line in p.update(running.model_copy(update={"message": "x"}), 4.0))
