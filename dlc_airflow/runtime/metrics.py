"""Report metrics and outputs from inside a job.

Two channels, so a waiting task sees them whatever the backend:
- each `log_metrics` call prints one line `DLC_METRICS {"step": 3, "loss": 0.4}` to stdout;
  the task log shows it and `parse_metric_line` reads it back;
- the latest value of every metric and every `report_output` are kept in a compact JSON
  document {"metrics": {...}, "outputs": {...}} rewritten to the file named by DLC_OUTPUT_FILE.
  On Kubernetes that is /dev/termination-log, which the operator reads from the pod status
  after the container ends; the kubelet keeps only 4096 bytes of it, so the document is kept
  under that: the least recently updated metrics go first (the largest first among equally
  old ones), then the largest outputs, and the document says what it dropped.

Progress: a job that knows how far it has to go says so, and the waiting task logs its
progress and ETA (when they change), the report page shows it and the task's XCom has it
(result["progress"]: current, total, unit, percent, eta_seconds):

    log_progress(120, 1000, loss=0.4)              # 120 of 1000 steps, with metrics
    log_progress(5_000, 80_000, unit="samples")
    log_metrics(step=120, total_steps=1000, loss=0.4)   # the same as the first line

A progress line is a metrics line with `step`, `total_steps` (`progress_unit` when not
"steps") and the job's clock `time` (so the rate is the job's, however late the lines are
read); dlc_airflow.eta estimates from them. The count may go back (a restart resumed from an
older checkpoint): the rate is measured again from there. Under Kubeflow Trainer with its
TrainJobStatus feature on (KUBEFLOW_TRAINER_SERVER_URL in the env), progress, ETA and the
numeric metrics are also sent to the Trainer's status server (dlc_airflow.runtime.trainer_status),
which writes them to the TrainJob's status.trainerStatus.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import threading
import time
from typing import Any

from dlc_airflow import eta
from dlc_airflow.jsonvalue import JSONObject

__all__ = [
    "MAX_OUTPUT_BYTES",
    "METRICS_PREFIX",
    "current_document",
    "log_metrics",
    "log_progress",
    "parse_metric_line",
    "parse_outputs",
    "read_outputs",
    "report_output",
    "write_document",
]

METRICS_PREFIX = "DLC_METRICS "
MAX_OUTPUT_BYTES = 4096  # the kubelet's limit for a termination message

_lock = threading.Lock()
_metrics: JSONObject = {}  # insertion order = least recently updated first
_updated: dict[str, int] = {}  # metric -> call counter of its last update
_outputs: JSONObject = {}
_calls = 0
_warned = False
_tracker = eta.Tracker()  # this process's progress, for the ETA sent to Kubeflow Trainer


def _json_value(key: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        value = value.item()
        if isinstance(value, (bool, int, str)):
            return value
    if isinstance(value, float) or hasattr(value, "__float__"):
        number = float(value)
        # NaN and infinity are not JSON: keep them readable as strings.
        return number if math.isfinite(number) else str(number)
    raise TypeError(
        f"metric or output {key!r}: {type(value).__name__} is not a number, string, bool or None"
    )


def _dumps(doc: JSONObject) -> str:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False, sort_keys=False)


def log_metrics(step: int | None = None, total_steps: int | None = None, **values: Any) -> JSONObject:
    """Print one `DLC_METRICS {...}` line and remember the latest values; returns the line's dict.
    With `total_steps` the line is also progress: `step` of `total_steps` (see log_progress)."""
    global _calls
    record: JSONObject = {}
    if step is not None:
        record["step"] = _count("step", step)
    if total_steps is not None:
        if step is None:
            raise ValueError("log_metrics: total_steps needs step (how many of total_steps are done)")
        record["total_steps"] = _count("total_steps", total_steps)
        eta.check_counts(record["step"], record["total_steps"])
    for key, value in values.items():
        record[key] = _json_value(key, value)
    with _lock:
        _calls += 1
        for key, value in record.items():
            _metrics.pop(key, None)
            _metrics[key] = value
            _updated[key] = _calls
        # the job's clock goes on the line only: the waiting side's rate is the job's
        line = METRICS_PREFIX + _dumps({**record, "time": round(time.time(), 3)} if total_steps is not None else record)
        print(line, flush=True)
        _write_env_file()
        snapshot = dict(_metrics)
    if total_steps is not None:  # a network call: outside the lock, other threads log on
        _to_trainer(record, snapshot)
    return record


def log_progress(current: int, total: int, unit: str = eta.DEFAULT_UNIT, **metrics: Any) -> JSONObject:
    """Say how far the job is: `current` of `total` `unit`s, with any metrics of this moment.
    The waiting task logs progress and ETA when they change; the XCom has the last of them."""
    if not isinstance(unit, str) or not unit.strip():
        raise ValueError(f"log_progress: unit must be a non-empty string such as 'steps', not {unit!r}")
    if unit != eta.DEFAULT_UNIT:
        metrics["progress_unit"] = unit
    return log_metrics(step=current, total_steps=total, **metrics)


def _count(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"log_metrics: {name} must be a whole number, not {value!r}") from None


def _to_trainer(record: JSONObject, metrics: JSONObject) -> None:
    """Progress, ETA and metrics to Kubeflow Trainer's status server, when the Trainer asks for them."""
    from dlc_airflow.runtime.trainer_status import enabled, report

    if not enabled():
        return
    found = eta.from_record(record)
    if found is None:
        return
    with _lock:
        estimate = _tracker.observe(time.time(), *found)
    report(estimate, metrics)


def report_output(key: str, value: Any) -> None:
    """Record a result of the job (checkpoint URI, model path...) for the waiting task."""
    if not isinstance(key, str) or not key:
        raise ValueError("report_output: key must be a non-empty string")
    with _lock:
        _outputs[key] = _json_value(key, value)
        _write_env_file()


def current_document(limit: int = MAX_OUTPUT_BYTES) -> JSONObject:
    """The document as it would be written now, trimmed to `limit` bytes."""
    with _lock:
        return _fit(dict(_metrics), dict(_outputs), limit)


def _fit(metrics: JSONObject, outputs: JSONObject, limit: int) -> JSONObject:
    doc: JSONObject = {"metrics": metrics, "outputs": outputs}
    if len(_dumps(doc).encode()) <= limit:
        return doc
    dropped_metrics: list[str] = []
    dropped_outputs: list[str] = []
    # oldest update first; among metrics of the same update, the largest first
    order = sorted(metrics, key=lambda k: (_updated.get(k, 0), -len(_dumps({k: metrics[k]}))))

    def trimmed() -> JSONObject:
        out = {"metrics": metrics, "outputs": outputs}
        out["dropped"] = {"metrics": len(dropped_metrics), "outputs": dropped_outputs}
        return out

    for key in order:
        if len(_dumps(trimmed()).encode()) <= limit:
            break
        metrics.pop(key)
        dropped_metrics.append(key)
    for key in sorted(outputs, key=lambda k: -len(_dumps({k: outputs[k]}))):
        if len(_dumps(trimmed()).encode()) <= limit:
            break
        outputs.pop(key)
        dropped_outputs.append(key)
    result = trimmed()
    if len(_dumps(result).encode()) > limit:  # only the names of dropped outputs are left
        result["dropped"]["outputs"] = len(dropped_outputs)
    _warn_dropped(dropped_metrics, dropped_outputs, limit)
    return result


def _warn_dropped(metrics: list[str], outputs: list[str], limit: int) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    print(
        f"dlc-airflow: the outputs document is over {limit} bytes (the Kubernetes termination "
        f"message limit): dropped metrics {metrics[:10]}{'...' if len(metrics) > 10 else ''}"
        f"{f' and outputs {outputs}' if outputs else ''}; log fewer or shorter values",
        file=sys.stderr,
        flush=True,
    )


def _write_env_file() -> None:
    path = os.environ.get("DLC_OUTPUT_FILE")
    if path:
        write_document(path, _fit(dict(_metrics), dict(_outputs), MAX_OUTPUT_BYTES))


def write_document(path: str, doc: JSONObject) -> None:
    """Replace `path` with the JSON document atomically (temp file + os.replace).

    /dev/termination-log is a bind mount that cannot be renamed over: such a file is
    rewritten in place with one write, which is enough since it is only read after exit.
    """
    data = _dumps(doc).encode()
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".outputs-", dir=directory)
    except OSError:
        fd, tmp = -1, None
    if tmp is not None:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
            return
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    with open(path, "wb") as handle:
        handle.write(data)


def parse_outputs(text: str) -> JSONObject:
    """The {"metrics", "outputs"} document in `text`; empty parts when it is not one.

    A termination message may hold log lines instead (FallbackToLogsOnError): those give
    an empty document rather than an error.
    """
    empty: JSONObject = {"metrics": {}, "outputs": {}}
    try:
        doc = json.loads(text)
    except (ValueError, TypeError):
        return empty
    if not isinstance(doc, dict):
        return empty
    result = {
        "metrics": doc.get("metrics") if isinstance(doc.get("metrics"), dict) else {},
        "outputs": doc.get("outputs") if isinstance(doc.get("outputs"), dict) else {},
    }
    if isinstance(doc.get("dropped"), dict):
        result["dropped"] = doc["dropped"]
    return result


def read_outputs(path: str | os.PathLike[str]) -> JSONObject:
    """Parse the document a replica wrote at `path` (missing file: empty document)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return parse_outputs(handle.read())
    except FileNotFoundError:
        return {"metrics": {}, "outputs": {}}


def parse_metric_line(line: str, *, with_time: bool = False) -> JSONObject | None:
    """The metrics of a `DLC_METRICS {...}` log line, or None for any other line.

    The marker may follow a prefix (a timestamp, a stream name) added by the log source. A
    progress line's `time` (the job's clock, not a metric) is left out unless `with_time`.
    """
    at = line.find(METRICS_PREFIX)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(METRICS_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if not with_time:
        record.pop("time", None)
    return record


def _reset_for_tests() -> None:
    global _calls, _warned
    with _lock:
        _metrics.clear()
        _updated.clear()
        _outputs.clear()
        _calls = 0
        _warned = False
        _tracker.points.clear()
        _tracker.total = None
