"""Kueue's reason for a queued job, from its Workloads (backends/kueue.py), on Workload status as
Kueue v0.17.0 writes it (pkg/scheduler, pkg/workload; tests/cluster/test_kueue.py reads the real one)."""

from __future__ import annotations

from dlc_airflow import reasons
from dlc_airflow.k8s.backends.kueue import pending_message, queued, with_kueue_verdict
from dlc_airflow.status import JobState, JobStatus

PENDING = ("couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
           "on-demand, 8 more needed")


def workload(*conditions: tuple[str, str, str, str]) -> dict:
    return {"kind": "Workload", "status": {"conditions": [
        {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}}


SUSPENDED = JobStatus(state=JobState.QUEUED, reason=reasons.SUSPENDED, message="suspended (waiting for admission)")


def test_a_pending_workload_gives_kueues_reason():
    found = with_kueue_verdict(SUSPENDED, [workload(("QuotaReserved", "False", "Pending", PENDING))])
    assert (found.state, found.reason, found.message) == (JobState.QUEUED, reasons.SUSPENDED, f"Kueue: {PENDING}")


def test_an_inadmissible_workload_says_why():
    message = "LocalQueue team-x doesn't exist"
    assert pending_message([workload(("QuotaReserved", "False", "Inadmissible", message))]) == message


def test_admitted_or_unknown_workloads_leave_the_status_alone():
    admitted = workload(("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team-a"),
                        ("Admitted", "True", "Admitted", "The workload is admitted"))
    assert with_kueue_verdict(SUSPENDED, [admitted]) == SUSPENDED
    assert with_kueue_verdict(SUSPENDED, [workload()]) == SUSPENDED
    assert with_kueue_verdict(SUSPENDED, []) == SUSPENDED
    running = JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING)
    assert with_kueue_verdict(running, [workload(("QuotaReserved", "False", "Pending", PENDING))]) == running


def test_one_role_admitted_another_pending():
    """A job of several Workloads (a native job's roles would be): the one still waiting speaks."""
    admitted = workload(("Admitted", "True", "Admitted", ""), ("QuotaReserved", "True", "QuotaReserved", ""))
    waiting = workload(("QuotaReserved", "False", "Pending", PENDING))
    assert pending_message([admitted, waiting]) == PENDING


def test_queued_reads_the_queue_label():
    assert queued([{"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}}])
    assert not queued([{"metadata": {"labels": {}}}, {"metadata": {}}])


PREEMPTED = ("Preempted to accommodate a workload (UID: 1f2, JobUID: 9a8) due to prioritization in the "
             "ClusterQueue; preemptor path: /team-a; preemptee path: /team-a")


def evicted_workload(count: int = 1, *, evicted: bool = True) -> dict:
    found = workload(("Evicted", "True" if evicted else "False", "Preempted" if evicted else "QuotaReserved",
                      PREEMPTED if evicted else f"Previously: {PREEMPTED}"),
                     ("QuotaReserved", "False" if evicted else "True", "Pending", PREEMPTED))
    found["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "",
                                                         "count": count}]}
    return found


def job_object(on_preemption: str | None = None) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": "team-a"}
    if on_preemption:
        labels["dlc-airflow/on-preemption"] = on_preemption
    return {"metadata": {"labels": labels}}


RUNNING = JobStatus(state=JobState.RUNNING, reason=reasons.RUNNING)


def test_a_preempted_job_is_restarting_with_kueues_message_and_counted():
    found = with_kueue_verdict(RUNNING, [evicted_workload()], [job_object()])
    assert (found.state, found.reason, found.restarts) == (JobState.RESTARTING, reasons.PREEMPTED, 1)
    assert found.message.startswith(f"Kueue: {PREEMPTED}") and "requeued" in found.message
    # re-admitted: running again, the preemption still counted
    again = with_kueue_verdict(RUNNING, [evicted_workload(2, evicted=False)], [job_object()])
    assert (again.state, again.restarts) == (JobState.RUNNING, 2)


def test_a_preemption_fails_a_job_whose_fault_tolerance_says_so():
    found = with_kueue_verdict(SUSPENDED, [evicted_workload()], [job_object("fail")])
    assert (found.state, found.reason) == (JobState.FAILED, reasons.PREEMPTED)
    assert PREEMPTED in found.message and "restart_on_preemption is off" in found.message


def test_a_finished_job_keeps_its_verdict_and_counts_its_preemptions():
    done = JobStatus(state=JobState.SUCCEEDED, reason=reasons.COMPLETED)
    assert with_kueue_verdict(done, [evicted_workload(2)], [job_object("fail")]) == done.model_copy(
        update={"restarts": 2})


def test_the_queue_labels_carry_priority_and_what_a_preemption_means():
    from dlc_airflow.k8s.backends.base import queue_labels
    from dlc_airflow.spec import DLCJob

    job = DLCJob(image="img", command=["x"], scheduling={"queue": "team-a", "queue_priority": "production"},
                 fault_tolerance={"restart_on_preemption": False})
    assert queue_labels(job) == {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/priority-class": "production",
                                 "dlc-airflow/on-preemption": "fail"}
    assert queue_labels(DLCJob(image="img", command=["x"], scheduling={"queue": "team-a"})) == {
        "kueue.x-k8s.io/queue-name": "team-a"}
    assert queue_labels(DLCJob(image="img", command=["x"])) == {}
