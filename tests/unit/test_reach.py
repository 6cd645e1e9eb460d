"""The pure parts of what users see and touch: the spec that travels with a job, replicas from
pods, the report's metric curves and restarts, the lineage rows, the extra links' URLs, which
state changes notify, carrying a notifier, and the OpenLineage datasets of a job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dlc_airflow import specpack
from dlc_airflow.airflow import lineage, links, notify
from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.events import event_of
from dlc_airflow.k8s.kinds import JOBSET, kinds_detail
from dlc_airflow.k8s.pods import replicas_of
from dlc_airflow.report import build_report, lineage_rows, metric_series
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState, JobStatus, RoleCounts

REF = JobRef(backend="jobset", place="ml", name="train-1a2b3c-1", uid="u-1", detail=kinds_detail([JOBSET]))


def test_the_spec_travels_packed_without_secret_values():
    job = DLCJob(type="pytorch", image="registry.example.com/t:1", command=["torchrun", "train.py"],
                 roles={"worker": 4}, env={"API_TOKEN": "s3cr3t", "DB": {"secret": "db", "key": "pw"}, "LR": "0.1"})
    packed = specpack.pack(job)
    assert "s3cr3t" not in packed and len(packed) < 600
    spec = specpack.unpack(packed)
    assert spec["env"] == {"API_TOKEN": "<hidden>", "DB": {"secret": "db", "key": "pw"}, "LR": "0.1"}
    assert spec["roles"] == {"worker": {"replicas": 4}}
    for bad in ("plain json", "z1:not-base64!", "z1:" + "A" * 8):
        with pytest.raises(ValueError, match="packed"):
            specpack.unpack(bad)


def pod(role, index, phase, *, started=None, finished=None, code=None, restarts=0, disrupted=False, uid="p"):
    state = {"terminated": {"exitCode": code, "finishedAt": finished, "reason": "Error" if code else "Completed"}} \
        if finished else {"running": {}}
    return {"metadata": {"name": f"j-{role}-{index}", "uid": uid, "labels": {"dlc-airflow/role": role},
                         "annotations": {"batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"nodeName": "gpu-a100-0"},
            "status": {"phase": phase, "startTime": started, "containerStatuses": [
                {"name": "main", "restartCount": restarts, "state": state}],
                "conditions": [{"type": "DisruptionTarget", "status": "True"}] if disrupted else []}}


def test_replicas_of_pods_coordinator_first_with_times_and_exits():
    found = replicas_of([
        pod("worker", 1, "Failed", started="2026-12-04T10:00:00Z", finished="2026-12-04T10:05:00Z", code=137,
            disrupted=True),
        pod("master", 0, "Running", started="2026-12-04T10:00:01Z", restarts=2),
        pod("worker", 0, "Succeeded", started="2026-12-04T10:00:00Z", finished="2026-12-04T10:06:00Z", code=0),
    ])
    assert [r.name for r in found] == ["master-0", "worker-0", "worker-1"]
    master, _, preempted = found
    assert (master.state, master.restarts, master.node, master.finished) == ("Running", 2, "gpu-a100-0", None)
    assert (preempted.exit_code, preempted.reason, preempted.finished) == (
        137, "Preempted", datetime(2026, 12, 4, 10, 5, tzinfo=UTC))


def test_metric_curves_come_from_the_coordinators_lines():
    lines = [("worker-1", 'DLC_METRICS {"step": 1, "loss": 9}'), ("master-0", "epoch 1"),
             ("master-0", 'DLC_METRICS {"step": 1, "loss": 0.9, "accuracy": 0.5, "note": "x"}'),
             ("master-0", '2026-12-04T10:00:00Z DLC_METRICS {"step": 2, "loss": 0.4, "ok": true}'),
             ("master-0", 'DLC_METRICS {"loss": 0.3}')]  # no step: numbered by position
    assert metric_series(lines) == {"loss": [[1.0, 0.9], [2.0, 0.4], [2.0, 0.3]], "accuracy": [[1.0, 0.5]]}
    assert metric_series([("worker-0", "nothing here")]) == {}


def test_the_report_says_what_restarted_and_why():
    status = JobStatus(state=JobState.FAILED, reason="PodFailurePolicy", message="worker-1 exited with code 3",
                       restarts=1, roles={"worker": RoleCounts(replicas=2, failed=1)})
    replicas = replicas_of([pod("worker", 1, "Failed", started="2026-12-04T10:00:00Z",
                                       finished="2026-12-04T10:01:00Z", code=3)])
    event = {"type": "Warning", "reason": "BackoffLimitExceeded", "message": "Job has reached the limit ",
             "involvedObject": {"kind": "Job", "name": "j-worker"}, "lastTimestamp": "2026-12-04T10:01:00Z"}
    report = build_report(JobInfo(REF, dag_id="d", task_id="t", run_id="r"), status, replicas, [event_of(event)],
                          [], {"metrics": {"loss": 1}, "outputs": {"checkpoint": "s3://c"}})
    assert report["job"]["state"] == "FAILED" and report["job"]["dag_id"] == "d"
    assert [(r["replica"], r["reason"]) for r in report["restarts"]] == [
        ("worker-1", "Error"), ("job", "PodFailurePolicy: worker-1 exited with code 3")]
    assert report["events"][0]["object"] == "Job j-worker" and report["events"][0]["message"] == "Job has reached the limit"
    assert report["metrics"]["final"] == {"loss": 1} and report["outputs"] == {"checkpoint": "s3://c"}


def test_lineage_rows_in_interval_order_with_promotions():
    manifest = {"intervals": {
        "b": {"start": "2026-01-02", "status": "succeeded", "resumed_from": "a", "checkpoint": "c2",
              "metrics": {"accuracy": 0.9}},
        "a": {"start": "2026-01-01", "status": "succeeded", "resumed_from": None, "checkpoint": "c1",
              "metrics": {"accuracy": 0.8}}},
        "promotions": [{"interval": "b"}]}
    rows = lineage_rows(manifest)
    assert [(r["interval"], r["resumed_from"], r["promoted"]) for r in rows] == [("a", None, False), ("b", "a", True)]


def test_link_urls():
    urls = links.link_urls(REF, "retrain daily", "scheduled__2026-01-01T00:00:00+00:00", "grp.train", -1,
                           {links.DASHBOARD_EXTRA: "https://dash.example.com/#/{backend}/{namespace}/{name}"},
                           "https://airflow.example.com/")
    assert urls == {
        "DLC job report": "https://airflow.example.com/dlc/jobs/retrain%20daily/"
                          "scheduled__2026-01-01T00%3A00%3A00%2B00%3A00/grp.train",
        "Job in dashboard": "https://dash.example.com/#/jobset/ml/train-1a2b3c-1"}
    local = JobRef(backend="local", place="/srv/jobs", name="j-1")
    assert links.link_urls(local, "d", "r", "t", 3, None, "http://a")["Local job folder"] == "file:///srv/jobs/j-1"
    assert links.link_urls(local, "d", "r", "t", 3, None, "http://a")["DLC job report"].endswith("/t?map_index=3")


def status(state, restarts=0):
    return JobStatus(state=state, restarts=restarts)


@pytest.mark.parametrize("previous,new,event", [
    (None, status(JobState.RUNNING), "running"),
    (status(JobState.QUEUED), status(JobState.RUNNING), "running"),
    (status(JobState.RUNNING), status(JobState.RUNNING), None),
    (status(JobState.RESTARTING, 1), status(JobState.RUNNING, 1), None),  # back from a restart: no news
    (status(JobState.RUNNING), status(JobState.RESTARTING, 1), "restarting"),
    (status(JobState.RESTARTING, 1), status(JobState.RESTARTING, 2), "restarting"),
    (status(JobState.RESTARTING, 1), status(JobState.RESTARTING, 1), None),
    (status(JobState.RUNNING), status(JobState.SUCCEEDED), None),  # the finish step notifies the end
])
def test_which_changes_notify(previous, new, event):
    assert notify.job_event(previous, new) == event


def test_a_notifier_travels_as_its_class_and_arguments():
    from tests.support.notifiers import FileNotifier

    spec = notify.carry(FileNotifier("/tmp/x", text="{{ job }}"), "t: notify[0]")
    assert spec == {"class": "tests.support.notifiers.FileNotifier", "kwargs": {"path": "/tmp/x", "text": "{{ job }}"}}
    rebuilt = notify.rebuild(spec)
    assert (type(rebuilt).__name__, rebuilt.path, rebuilt.text) == ("FileNotifier", "/tmp/x", "{{ job }}")


def test_openlineage_datasets_of_a_job():
    job = {"env": {"DLC_DATA_URI": "s3://lake/d/1", "DLC_OUTPUT_URI": "file:///out/1", "OTHER": "s3://no"},
           "checkpoint": {"uri": "oss://ckpt/1", "resume_from": "oss://ckpt/0/step-3"}}
    inputs, outputs = lineage.uris(job, {"outputs": {"model_uri": "s3://m/1", "checkpoint": "oss://ckpt/1",
                                                     "rows": 10, "note": "text"}})
    assert inputs == ["s3://lake/d/1", "oss://ckpt/0/step-3"]
    assert outputs == ["file:///out/1", "oss://ckpt/1", "s3://m/1"]
    assert [lineage.dataset(u) for u in ("s3://lake/d/1", "file:///out/1", "/plain/path")] == [
        ("s3://lake", "d/1"), ("file", "/out/1"), ("file", "/plain/path")]
