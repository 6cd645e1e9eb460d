"""Metrics lines and the outputs document (DLC_OUTPUT_FILE / termination message)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dlc_airflow.runtime import metrics


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("DLC_OUTPUT_FILE", raising=False)
    metrics._reset_for_tests()
    yield monkeypatch
    metrics._reset_for_tests()


def test_log_metrics_prints_a_line_and_updates_the_file(tmp_path, fresh, capsys):
    out = tmp_path / "worker-0.json"
    fresh.setenv("DLC_OUTPUT_FILE", str(out))
    metrics.log_metrics(step=1, loss=0.9, accuracy=0.5)
    metrics.log_metrics(step=2, loss=0.4)
    metrics.report_output("model", "s3://b/model")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ['DLC_METRICS {"step":1,"loss":0.9,"accuracy":0.5}', 'DLC_METRICS {"step":2,"loss":0.4}']
    assert [metrics.parse_metric_line(line) for line in lines] == [
        {"step": 1, "loss": 0.9, "accuracy": 0.5}, {"step": 2, "loss": 0.4}]
    assert metrics.read_outputs(out) == {
        "metrics": {"accuracy": 0.5, "step": 2, "loss": 0.4}, "outputs": {"model": "s3://b/model"}}
    assert [p.name for p in tmp_path.iterdir()] == ["worker-0.json"]  # no temp files left


def test_parse_metric_line_tolerates_prefixes_and_rejects_the_rest():
    assert metrics.parse_metric_line('2026-01-01T00:00:00Z stdout F DLC_METRICS {"a": 1}') == {"a": 1}
    assert metrics.parse_metric_line("DLC_METRICS not json") is None
    assert metrics.parse_metric_line("DLC_METRICS [1, 2]") is None
    assert metrics.parse_metric_line("loss 0.5") is None


def test_values_become_strict_json():
    class Scalar:  # what numpy / torch scalars look like
        def item(self):
            return 2.5

    record = metrics.log_metrics(nan=float("nan"), inf=float("inf"), scalar=Scalar(), ok=True)
    assert record == {"nan": "nan", "inf": "inf", "scalar": 2.5, "ok": True}
    with pytest.raises(TypeError, match="metric or output 'bad': list"):
        metrics.log_metrics(bad=[1, 2])
    with pytest.raises(ValueError, match="non-empty string"):
        metrics.report_output("", "x")


def test_document_stays_under_4096_bytes_dropping_oldest_first(tmp_path, fresh, capsys):
    out = tmp_path / "termination-log"
    fresh.setenv("DLC_OUTPUT_FILE", str(out))
    metrics.report_output("checkpoint", "file:///ckpt/step-000100")
    for i in range(300):
        metrics.log_metrics(**{f"metric_{i:03d}": i * 1.5})
    data = out.read_bytes()
    assert len(data) <= metrics.MAX_OUTPUT_BYTES
    doc = json.loads(data)
    assert doc["outputs"] == {"checkpoint": "file:///ckpt/step-000100"}  # outputs are kept
    kept = sorted(doc["metrics"])
    assert kept[-1] == "metric_299" and "metric_000" not in kept  # the newest survive
    assert kept == [f"metric_{i:03d}" for i in range(300 - len(kept), 300)]
    assert doc["dropped"]["metrics"] == 300 - len(kept)
    assert "over 4096 bytes" in capsys.readouterr().err
    assert metrics.read_outputs(out)["dropped"]["metrics"] == 300 - len(kept)


def test_largest_outputs_go_when_outputs_alone_are_too_big():
    metrics.report_output("small", "x")
    metrics.report_output("huge", "y" * 5000)
    doc = metrics.current_document()
    assert doc["outputs"] == {"small": "x"} and doc["dropped"]["outputs"] == ["huge"]


def test_read_outputs_of_missing_or_non_json_files(tmp_path):
    assert metrics.read_outputs(tmp_path / "nope") == {"metrics": {}, "outputs": {}}
    log_fallback = tmp_path / "termination-log"
    log_fallback.write_text("Traceback (most recent call last):\n  ...")
    assert metrics.read_outputs(log_fallback) == {"metrics": {}, "outputs": {}}


def test_a_replica_process_writes_the_document(tmp_path):
    out = tmp_path / "out.json"
    code = textwrap.dedent("""
        from dlc_airflow.runtime import log_metrics, report_output
        log_metrics(step=3, loss=0.25)
        report_output("model", "/models/m1")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"DLC_OUTPUT_FILE": str(out), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == 'DLC_METRICS {"step":3,"loss":0.25}\n'
    assert metrics.read_outputs(out) == {"metrics": {"step": 3, "loss": 0.25}, "outputs": {"model": "/models/m1"}}


def test_log_progress_is_a_metrics_line_with_the_jobs_clock(tmp_path, fresh, capsys):
    out = tmp_path / "worker-0.json"
    fresh.setenv("DLC_OUTPUT_FILE", str(out))
    assert metrics.log_progress(120, 1000, loss=0.4) == {"step": 120, "total_steps": 1000, "loss": 0.4}
    metrics.log_progress(5, 80, unit="shards")
    metrics.log_metrics(step=121, total_steps=1000)
    first, second, third = (metrics.parse_metric_line(line, with_time=True)
                            for line in capsys.readouterr().out.splitlines())
    assert set(first) == {"step", "total_steps", "loss", "time"} and isinstance(first["time"], float)
    assert second["progress_unit"] == "shards" and third["step"] == 121
    assert "time" not in metrics.read_outputs(out)["metrics"]  # the clock is the line's, not a metric
    metrics.log_progress(122, 1000)
    assert metrics.parse_metric_line(capsys.readouterr().out) == {"step": 122, "total_steps": 1000}
    metrics.log_metrics(step=3, loss=0.1)
    assert "time" not in metrics.parse_metric_line(capsys.readouterr().out, with_time=True)


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: metrics.log_metrics(total_steps=10), ValueError, "log_metrics: total_steps needs step"),
    (lambda: metrics.log_progress(5, 0), ValueError, "progress: total must be > 0, not 0"),
    (lambda: metrics.log_progress(-1, 10), ValueError, "progress: current must be >= 0, not -1"),
    (lambda: metrics.log_progress("x", 10), TypeError, "log_metrics: step must be a whole number, not 'x'"),
    (lambda: metrics.log_progress(1, 10, unit=""), ValueError, "log_progress: unit must be a non-empty string"),
])
def test_bad_progress_is_refused_with_a_clear_error(call, error, message, capsys):
    with pytest.raises(error, match=message):
        call()
    assert capsys.readouterr().out == ""  # nothing printed for a refused call
