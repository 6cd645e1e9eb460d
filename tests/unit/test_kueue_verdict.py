"""Kueue's reason for a queued job, from its Workloads (backends/kueue.py), on Workload status as
Kueue v0.17.0 writes it (pkg/scheduler, pkg/workload; tests/cluster/test_kueue.py reads the real one)."""

from __future__ import annotations

from dlc_airflow import reasons
from dlc_airflow.backends.kueue import pending_message, queued, with_kueue_verdict
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
