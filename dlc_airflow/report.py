"""The job report (the DLC "analysis report") and the lineage view, as plain data.

`job_report` gathers one job through its runner (the same contract on every backend:
status, replicas, events, logs, outputs) and `build_report` shapes it (pure): the job, its
roles, a timeline of its replicas, its restarts and their reasons, its Events, and the
curves of the metrics its code printed with dlc_airflow.runtime.log_metrics
(`DLC_METRICS {...}` lines in its logs), and its progress and ETA (log_progress lines, read as
the wait reads them: dlc_airflow.progress). `lineage_rows` turns a retraining lineage's
manifest into the rows of its table: interval, resumed from, checkpoint, metric, promoted.
The UI (dlc_airflow/ui) and `dlc-airflow jobs describe` render these; nothing here draws.
"""

from __future__ import annotations

from datetime import datetime

from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.progress import QUEUED_STATES
from dlc_airflow.runner import (
    Event,
    EventSource,
    JobRunner,
    LogLine,
    LogPositions,
    Outputs,
    QueueSource,
    Replica,
    log_replica_order,
)
from dlc_airflow.status import JobStatus

MAX_LOG_LINES = 20_000  # read for the metric curves; a report never needs more
MAX_POINTS = 2_000  # per metric, evenly thinned beyond that (the chart has a few hundred pixels)


def job_report(runner: JobRunner, info: JobInfo) -> JSONObject:
    """Everything the report shows of one job (I/O through the runner)."""
    ref = info.ref
    status = runner.status(ref)
    lines: list[LogLine] = []
    positions: LogPositions = {}
    while len(lines) < MAX_LOG_LINES:
        new, positions = runner.logs(ref, positions)
        if not new:
            break
        lines.extend(new)
    events = runner.events(ref) if isinstance(runner, EventSource) else []
    position = ""
    if isinstance(runner, QueueSource) and status.state in QUEUED_STATES:
        try:
            position = runner.queue_position(ref)
        except Exception:  # noqa: BLE001 - the report shows the rest
            position = ""
    return build_report(info, status, runner.replicas(ref), events, lines, runner.outputs(ref), position)


def build_report(info: JobInfo, status: JobStatus, replicas: list[Replica], events: list[Event],
                 log_lines: list[LogLine], outputs: Outputs, queue_position: str = "") -> JSONObject:
    ref = info.ref
    return {
        "job": {
            "name": ref.name, "backend": ref.backend, "namespace": ref.place, "uid": ref.uid,
            "attempt": ref.attempt, "dag_id": info.dag_id, "task_id": info.task_id, "run_id": info.run_id,
            "map_index": info.map_index, "try": info.try_number, "state": status.state.value,
            "reason": status.reason, "message": status.message, "restarts": status.restarts,
            "created": _iso(status.created or info.created), "started": _iso(status.started),
            "finished": _iso(status.finished), **status.durations(), "queue_position": queue_position,
        },
        "roles": {role: counts.model_dump() for role, counts in status.roles.items()},
        "replicas": [replica_row(r) for r in replicas],
        "restarts": restart_rows(replicas, status),
        "events": [event_row(e) for e in sorted(events, key=lambda e: e.time)],
        "progress": progress_of(status, log_lines, outputs),
        "metrics": {"series": metric_series(log_lines), "final": dict(outputs.get("metrics") or {})},
        "outputs": dict(outputs.get("outputs") or {}),
    }


def progress_of(status: JobStatus, log_lines: list[LogLine], outputs: Outputs) -> JSONObject | None:
    """The job's progress: its last (finished job, as its XCom says) or its current one with the
    ETA as of its newest progress line ("as_of", Unix seconds; None when the line had no time)."""
    from dlc_airflow.finish import final_progress
    from dlc_airflow.progress import Progress

    if status.terminal:
        return final_progress(status, dict(outputs.get("metrics") or {}))
    reading = Progress("report", 0.0)
    reading.update(status, 0.0)
    reading.observe(log_lines, 0.0)  # (a line without the job's clock: time 0, "as_of" None)
    if reading.estimate is None:
        return None
    points = reading.tracker.points
    as_of = points[-1][0] if reading.counting is not None and points and points[-1][0] > 0 else None
    return {**reading.estimate.to_dict(), "as_of": as_of}


def replica_row(replica: Replica) -> JSONObject:
    return {"name": replica.name, "role": replica.role, "index": replica.index, "state": replica.state,
            "started": _iso(replica.started), "finished": _iso(replica.finished), "exit_code": replica.exit_code,
            "reason": replica.reason, "restarts": replica.restarts, "node": replica.node}


def restart_rows(replicas: list[Replica], status: JobStatus) -> list[JSONObject]:
    """What failed or was restarted, and why: each replica that failed or restarted in place, and
    the job's own verdict when it restarted or failed (Kueue preemptions included)."""
    rows = []
    for r in replicas:
        if r.state == "Failed" or r.restarts or r.reason == "Preempted":
            why = r.reason or (f"exit code {r.exit_code}" if r.exit_code is not None else "")
            rows.append({"replica": r.name, "time": _iso(r.finished or r.started), "restarts": r.restarts,
                         "exit_code": r.exit_code, "reason": why})
    if status.restarts or status.state.value in ("RESTARTING", "FAILED"):
        rows.append({"replica": "job", "time": _iso(status.finished), "restarts": status.restarts,
                     "exit_code": None, "reason": f"{status.reason}: {status.message}".strip(": ")})
    return rows


def event_row(event: Event) -> JSONObject:
    return {"time": event.time, "type": "Warning" if event.warning else "Normal", "reason": event.reason,
            "object": event.object, "message": event.message, "count": event.count}


def metric_series(lines: list[LogLine]) -> dict[str, list[list[float]]]:
    """{metric: [[step, value], ...]} from the `DLC_METRICS` lines of the coordinator replica (the
    first replica that printed any: rank 0 reports, as the runtime's outputs do). Lines without a
    step are numbered in order; values that are not numbers are left out."""
    from dlc_airflow.runtime.metrics import parse_metric_line

    by_replica: dict[str, list[JSONObject]] = {}
    for replica, line in lines:
        record = parse_metric_line(line)
        if record is not None:
            by_replica.setdefault(replica, []).append(record)
    if not by_replica:
        return {}
    chosen = min(by_replica, key=log_replica_order)
    series: dict[str, list[list[float]]] = {}
    for position, record in enumerate(by_replica[chosen]):
        step = record.get("step", position)
        for key, value in record.items():
            if key in ("step", "total_steps") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            series.setdefault(key, []).append([float(step), float(value)])
    return {k: _thin(v) for k, v in series.items()}


def lineage_rows(manifest: JSONObject) -> list[JSONObject]:
    """The lineage table, oldest interval first: what each interval resumed from, the checkpoint
    it made, its metrics, and whether it was promoted."""
    promoted = {p.get("interval") for p in manifest.get("promotions") or []}
    rows = []
    for key, entry in sorted((manifest.get("intervals") or {}).items(), key=lambda kv: kv[1].get("start") or kv[0]):
        rows.append({"interval": key, "start": entry.get("start"), "end": entry.get("end"),
                     "status": entry.get("status"), "attempt": entry.get("attempt"), "run_id": entry.get("run_id"),
                     "resumed_from": entry.get("resumed_from"), "checkpoint": entry.get("checkpoint"),
                     "metrics": dict(entry.get("metrics") or {}), "promoted": key in promoted})
    return rows


def _thin(points: list[list[float]]) -> list[list[float]]:
    if len(points) <= MAX_POINTS:
        return points
    every = len(points) / MAX_POINTS
    return [points[int(i * every)] for i in range(MAX_POINTS - 1)] + [points[-1]]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
