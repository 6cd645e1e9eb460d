"""The HTML of the "DLC jobs" pages (dlc_airflow.ui.render), read back with html.parser: the
ids and data-* attributes the browser tests rely on, the values, the geometry of the timeline,
and that every value is escaped."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

import pytest

from dlc_airflow.jobinfo import JobInfo
from dlc_airflow.jobref import JobRef
from dlc_airflow.k8s.events import event_of
from dlc_airflow.k8s.kinds import JOB, kinds_detail
from dlc_airflow.pipelines import lineage as lin
from dlc_airflow.report import build_report, lineage_rows
from dlc_airflow.runner import Replica
from dlc_airflow.status import JobState, JobStatus, RoleCounts
from dlc_airflow.ui import render

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
EVIL = "<script>alert('x')</script>"
VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "wbr", "source", "track", "embed"}


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element] = []
        self.text_parts: list[str] = []

    @property
    def classes(self) -> list[str]:
        return (self.attrs.get("class") or "").split()

    def text(self) -> str:
        return "".join(self.text_parts) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Element]:
        return [e for e in self.iter() if (tag is None or e.tag == tag) and (cls is None or cls in e.classes)
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls, **attrs)
        assert len(found) == 1, f"{len(found)} <{tag} class={cls} {attrs}>"
        return found[0]


class Tree(HTMLParser):
    """A DOM of the page; fails on an end tag that does not close the open element."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#root", {}, None)
        self.doctype = False
        self.feed(html)
        self.close()
        assert self.current is self.root, f"<{self.current.tag}> never closed"

    def handle_decl(self, decl: str) -> None:
        self.doctype = decl.lower() == "doctype html"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs), self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag: str) -> None:
        assert self.current.tag == tag, f"</{tag}> closes <{self.current.tag}>"
        assert self.current.parent is not None
        self.current = self.current.parent

    def handle_data(self, data: str) -> None:
        self.current.text_parts.append(data)


def parse(html: str) -> Element:
    tree = Tree(html)
    assert tree.doctype
    assert not tree.root.find_all("script"), "a page carries no script"
    assert not [e for e in tree.root.iter() for k in e.attrs if k.startswith("on")], "no event handler attributes"
    return tree.root


def ref(name: str = "train-abc") -> JobRef:
    return JobRef(backend="native", place="team-a", name=name, uid="u-1", detail=kinds_detail([JOB]))


def metric_lines(replica: str, steps: int) -> list[tuple[str, str]]:
    return [(replica, "DLC_METRICS " + json.dumps({"step": s, "loss": 1.0 / s, "accuracy": 0.5 + s / 100}))
            for s in range(1, steps + 1)]


def failed_report() -> dict:
    """A job that failed after a worker was OOM-killed and replaced; worker-1 never reported an end."""
    info = JobInfo(ref=ref(), dag_id="retrain", task_id="train", run_id="scheduled__2026-03-01", try_number=1)
    status = JobStatus(state=JobState.FAILED, reason="RestartLimitExceeded", message=f"worker died {EVIL}",
                       roles={"master": RoleCounts(replicas=1, succeeded=1), "worker": RoleCounts(replicas=2, failed=1)},
                       restarts=1, created=T0, started=T0 + timedelta(seconds=20),
                       finished=T0 + timedelta(minutes=10))
    replicas = [
        Replica("master-0", "master", 0, "Succeeded", T0 + timedelta(seconds=20), T0 + timedelta(minutes=9),
                exit_code=0, node="n1"),
        Replica("worker-0", "worker", 0, "Failed", T0 + timedelta(seconds=25), T0 + timedelta(minutes=3),
                exit_code=137, reason="OOMKilled", node="n2", uid="p1"),
        Replica("worker-0", "worker", 0, "Failed", T0 + timedelta(minutes=4), T0 + timedelta(minutes=10),
                exit_code=1, reason="Error", restarts=1, node="n3", uid="p2"),
        Replica("worker-1", "worker", 1, "Running", T0 + timedelta(seconds=30), None, node="n2"),
    ]
    events = [
        {"type": "Warning", "reason": "BackOff", "message": f"back-off {EVIL}", "count": 3,
         "lastTimestamp": "2026-03-01T10:03:00Z", "involvedObject": {"kind": "Pod", "name": "train-abc-worker-0"},
         "metadata": {}},
        {"type": "Normal", "reason": "Scheduled", "message": "assigned", "lastTimestamp": "2026-03-01T10:00:10Z",
         "involvedObject": {"kind": "Pod", "name": "train-abc-master-0"}, "metadata": {}},
    ]
    outputs = {"metrics": {"loss": 0.02, "accuracy": 0.99}, "outputs": {"checkpoint": "file:///ckpt/<1>/step-50"}}
    return build_report(info, status, replicas, [event_of(e) for e in events], metric_lines("master-0", 50) + metric_lines("worker-0", 5),
                        outputs)


def test_job_page_sections_and_counts() -> None:
    report = failed_report()
    links = {"DAG run": "/dags/retrain/runs/scheduled__2026-03-01", "Job folder": "file:///tmp/jobs/train-abc"}
    root = parse(render.job_page(report, links))
    for ident in ("summary", "timeline", "restarts", "events", "metrics", "outputs", "links"):
        root.one(id=ident)

    summary = root.one(id="summary")
    assert summary.one("tr", data_field="state").one("span", cls="badge").text() == "FAILED"
    assert summary.one("tr", data_field="restarts").one("td").text() == "1"
    assert summary.one("tr", data_field="queued_seconds").one("td").text() == "20s"
    assert summary.one("tr", data_field="running_seconds").one("td").text() == "9m40s"
    assert {r.attrs["data-role"] for r in summary.find_all("tr") if "data-role" in r.attrs} == {"master", "worker"}

    timeline = root.one(id="timeline")
    svg = timeline.one("svg")
    assert svg.attrs["data-replicas"] == "4" and svg.attrs["data-rows"] == "3"
    bars = timeline.find_all("rect", cls="bar")
    assert [(b.attrs["data-replica"], b.attrs["data-state"]) for b in bars] == [
        ("master-0", "Succeeded"), ("worker-0", "Failed"), ("worker-0", "Failed"), ("worker-1", "Running")]
    assert all(b.one("title").text() for b in bars)
    assert "OOMKilled" in bars[1].one("title").text() and "exit code 137" in bars[1].one("title").text()
    labels = [t.text() for t in timeline.find_all("text", cls="label")]
    assert labels == ["master-0", "worker-0", "worker-1"]
    colours = {b.attrs["data-state"]: b.attrs["fill"] for b in bars}
    assert colours["Succeeded"] != colours["Failed"] != colours["Running"]

    restarts = root.one(id="restarts")
    rows = restarts.find_all("tr", data_replica="worker-0")
    assert len(rows) == 2 and "OOMKilled" in rows[0].text()
    assert "RestartLimitExceeded" in restarts.one("tr", data_replica="job").text()

    events = root.one(id="events").find_all("tbody")[0].find_all("tr")
    assert [e.attrs["data-type"] for e in events] == ["Normal", "Warning"]  # oldest first
    assert events[1].attrs.get("class") == "warning"

    metrics = root.one(id="metrics")
    charts = {c.attrs["data-metric"]: c for c in metrics.find_all("svg", cls="chart")}
    assert set(charts) == {"loss", "accuracy"}  # the coordinator's series only
    for chart in charts.values():
        assert chart.attrs["data-points"] == "50"
        assert len(chart.one("polyline").attrs["points"].split()) == 50
    loss = charts["loss"]
    assert loss.one("text", cls="y-max").text() == "1" and loss.one("text", cls="y-min").text() == "0.02"
    assert loss.one("text", cls="x-min").text() == "1" and loss.one("text", cls="x-max").text() == "50"
    final = metrics.one("table", id="final-metrics")
    assert final.one("tr", data_metric="accuracy").find_all("td")[1].text() == "0.99"

    assert root.one(id="outputs").one("tr", data_output="checkpoint").text() == "checkpointfile:///ckpt/<1>/step-50"
    hrefs = {a.text(): a.attrs["href"] for a in root.one(id="links").find_all("a")}
    assert hrefs == {label: url for label, url in links.items()}


def test_job_page_escapes_every_value() -> None:
    report = failed_report()
    report["job"]["name"] = f"job{EVIL}"
    report["outputs"]["note"] = EVIL
    html = render.job_page(report, {f"link{EVIL}": "/x?a=1&b=<2>"})
    assert "<script>" not in html
    root = parse(html)
    assert EVIL in root.one(id="summary").one("tr", data_field="message").text()
    assert EVIL in root.one(id="events").text()
    assert root.one("head").one("title").text() == f"DLC job job{EVIL}"
    link = root.one(id="links").one("a")
    assert link.attrs["href"] == "/x?a=1&b=<2>" and link.text() == f"link{EVIL}"
    assert "&amp;b=&lt;2&gt;" in html


def test_links_refuse_script_urls() -> None:
    root = parse(render.job_page(failed_report(), {"bad": "javascript:alert(1)", "data": "data:text/html,x",
                                                   "ok": "https://dash.example/#/jobs"}))
    links = root.one(id="links")
    assert [a.text() for a in links.find_all("a")] == ["ok"]
    assert "javascript:alert(1)" not in [a.attrs.get("href") for a in root.find_all("a")]


def _right(bar: Element) -> float:
    return float(bar.attrs["x"]) + float(bar.attrs["width"])


def test_timeline_bars_follow_times() -> None:
    root = parse(render.job_page(failed_report(), {}))
    timeline = root.one(id="timeline")
    bars = timeline.find_all("rect", cls="bar")
    finished = float(timeline.one("line", data_marker="finished").attrs["x1"])
    started = float(timeline.one("line", data_marker="started").attrs["x1"])
    # worker-1 never reported an end: its bar reaches the job's end, as does the last worker-0 pod
    assert _right(bars[3]) == pytest.approx(finished, abs=0.2)
    assert _right(bars[2]) == pytest.approx(finished, abs=0.2)
    assert float(bars[0].attrs["x"]) == pytest.approx(started, abs=0.2)
    assert _right(bars[1]) < float(bars[2].attrs["x"])  # the replaced pod ended before its successor began
    assert {bars[1].attrs["y"], bars[2].attrs["y"]} == {bars[1].attrs["y"]}  # same row
    assert "now" not in bars[3].one("title").text()


def test_timeline_of_a_running_job_reaches_now(monkeypatch: pytest.MonkeyPatch) -> None:
    info = JobInfo(ref=ref())
    status = JobStatus(state=JobState.RUNNING, created=T0, started=T0 + timedelta(seconds=5))
    replicas = [Replica("worker-0", "worker", 0, "Running", T0 + timedelta(seconds=5)),
                Replica("worker-1", "worker", 1, "Pending")]
    monkeypatch.setattr(render, "_now", lambda: T0 + timedelta(minutes=2))
    root = parse(render.job_page(build_report(info, status, replicas, [], [], {}), {}))
    bars = root.one(id="timeline").find_all("rect", cls="bar")
    assert [b.attrs["data-state"] for b in bars] == ["Running", "Pending"]
    # both reach now, the right edge; the pending one waits since the job was created
    assert _right(bars[0]) == pytest.approx(_right(bars[1]))
    assert float(bars[1].attrs["x"]) < float(bars[0].attrs["x"])
    assert "→ now" in bars[0].one("title").text()
    assert root.one(id="timeline").find_all("line", data_marker="finished") == []


def test_job_page_of_an_empty_report() -> None:
    info = JobInfo(ref=ref())
    root = parse(render.job_page(build_report(info, JobStatus(state=JobState.PENDING), [], [], [], {}), {}))
    for ident in ("summary", "timeline", "restarts", "events", "metrics", "outputs"):
        root.one(id=ident)
    assert root.one(id="timeline").one("svg").attrs["data-replicas"] == "0"
    assert root.find_all("rect", cls="bar") == [] and root.find_all("svg", cls="chart") == []
    assert root.find_all(id="links") == []


def test_chart_skips_values_that_are_not_finite_and_draws_flat_series() -> None:
    report = failed_report()
    report["metrics"]["series"] = {"flat": [[0, 2.0], [1, 2.0]], "odd": [[0, 1.0], [1, float("nan")], [2, 3.0]]}
    root = parse(render.job_page(report, {}))
    flat = root.one("svg", cls="chart", data_metric="flat")
    assert flat.attrs["data-points"] == "2"
    assert float(flat.one("text", cls="y-min").text()) < 2 < float(flat.one("text", cls="y-max").text())
    assert root.one("svg", cls="chart", data_metric="odd").attrs["data-points"] == "2"
    assert "nan" not in root.one("svg", data_metric="odd").one("polyline").attrs["points"]


def test_run_page() -> None:
    jobs = [
        {"task_id": "train", "map_index": -1, "name": "train-abc", "backend": "native", "namespace": "team-a",
         "state": "SUCCEEDED", "reason": "", "restarts": 0, "created": "2026-03-01T10:00:00+00:00",
         "started": "2026-03-01T10:00:20+00:00", "finished": "2026-03-01T10:10:00+00:00",
         "report_url": "/dlc/jobs/d/r/train"},
        {"task_id": "infer", "map_index": 2, "name": "infer-2", "backend": "local", "namespace": "/tmp/jobs",
         "state": "FAILED", "reason": EVIL, "restarts": 3, "created": None, "started": None, "finished": None,
         "report_url": "/dlc/jobs/d/r/infer?map_index=2"},
    ]
    html = render.run_page("d", f"manual__{EVIL}", jobs, "/dlc/lineage/d")
    assert "<script>" not in html
    root = parse(html)
    table = root.one("table", id="jobs")
    assert table.attrs["data-count"] == "2"
    rows = table.one("tbody").find_all("tr")
    assert [r.attrs["data-state"] for r in rows] == ["SUCCEEDED", "FAILED"]
    badges = [r.one("span", cls="badge") for r in rows]
    assert badges[0].attrs["style"] != badges[1].attrs["style"]
    assert rows[1].one("a").attrs["href"] == "/dlc/jobs/d/r/infer?map_index=2"
    assert "[2]" in rows[1].text() and EVIL in rows[1].text()
    assert rows[0].one("time", datetime="2026-03-01T10:00:20+00:00").text() == "2026-03-01 10:00:20 UTC"
    assert root.one(id="lineage-link").one("a").attrs["href"] == "/dlc/lineage/d"
    assert root.find_all(id="lineage-link") and not parse(render.run_page("d", "r", [], None)).find_all(
        id="lineage-link")


def test_index_page() -> None:
    runs = [{"dag_id": "retrain", "run_id": "scheduled__1", "jobs": 3, "url": "/dlc/runs/retrain/scheduled__1"},
            {"dag_id": f"d{EVIL}", "run_id": "r", "jobs": 1, "url": "/dlc/runs/x/r"}]
    html = render.index_page(runs)
    assert "<script>" not in html
    root = parse(html)
    rows = root.one("table", id="runs").one("tbody").find_all("tr")
    assert [(r.find_all("td")[0].text(), r.one("a").attrs["href"], r.find_all("td")[2].text()) for r in rows] == [
        ("retrain", "/dlc/runs/retrain/scheduled__1", "3"), (f"d{EVIL}", "/dlc/runs/x/r", "1")]
    assert parse(render.index_page([])).one("table", id="runs").attrs["data-count"] == "0"


def lineage_manifest() -> dict:
    day = timedelta(days=1)
    manifest = lin.empty_manifest("digits")
    accuracies = {0: 0.8, 1: 0.9, 2: None, 3: 0.95}
    for k, accuracy in accuracies.items():
        interval = lin.Interval(T0 + k * day, T0 + (k + 1) * day)
        predecessor = lin.resolve_predecessor(manifest, interval, on_unfinished="skip")
        manifest = lin.begin_attempt(manifest, interval, run_id=f"run-{k}", predecessor=predecessor)
        if accuracy is None:
            manifest = lin.finish_attempt(manifest, interval, status=lin.FAILED, error=EVIL)
            continue
        manifest = lin.finish_attempt(manifest, interval, status=lin.SUCCEEDED, checkpoint=f"file:///ckpt/{k}",
                                      metrics={"accuracy": accuracy, "loss": 1 - accuracy})
        if accuracy >= 0.9:
            manifest = lin.promote(manifest, interval, metric="accuracy", value=accuracy, run_id=f"run-{k}")
    return manifest


def test_lineage_page_with_a_metric() -> None:
    rows = lineage_rows(lineage_manifest())
    html = render.lineage_page("retrain", "digits", "file:///store/digits/manifest.json", rows, "accuracy")
    root = parse(html)
    table = root.one("table", id="lineage")
    trs = table.find_all("tr", cls=None)[1:]
    assert [tr.attrs["data-interval"] for tr in trs] == [r["interval"] for r in rows]
    headers = [th.text() for th in table.one("thead").find_all("th")]
    assert headers == ["Interval", "Status", "Attempt", "Resumed from", "Checkpoint", "accuracy", "Promoted"]
    cells = [[td.text() for td in tr.find_all("td")] for tr in trs]
    assert [c[5] for c in cells] == ["0.8", "0.9", "—", "0.95"]
    assert [c[6] for c in cells] == ["no", "yes", "no", "yes"]
    assert [c[4] for c in cells] == ["file:///ckpt/0", "file:///ckpt/1", "—", "file:///ckpt/3"]
    assert cells[3][3] == rows[1]["interval"]  # interval 3 resumed from 1, past the failed 2
    assert cells[2][1] == "failed"

    chart = root.one("svg", id="lineage-chart")
    assert "chart" in chart.classes and chart.attrs["data-metric"] == "accuracy"
    assert chart.attrs["data-points"] == "3"
    promoted = chart.find_all("circle", cls="promoted")
    assert [c.attrs["data-interval"] for c in promoted] == [rows[1]["interval"], rows[3]["interval"]]
    assert [c.attrs["data-interval"] for c in chart.find_all("circle", cls="point")] == [rows[0]["interval"]]
    assert len(chart.one("polyline").attrs["points"].split()) == 3
    # higher accuracy is drawn higher up
    ys = {c.attrs["data-interval"]: float(c.attrs["cy"]) for c in chart.find_all("circle")}
    assert ys[rows[3]["interval"]] < ys[rows[1]["interval"]] < ys[rows[0]["interval"]]
    assert chart.one("text", cls="y-max").text() == "0.95" and chart.one("text", cls="y-min").text() == "0.8"


def test_lineage_page_without_a_metric_shows_every_metric() -> None:
    rows = lineage_rows(lineage_manifest())
    rows[0]["metrics"]["note"] = EVIL
    html = render.lineage_page(f"d{EVIL}", "digits", "file:///m.json", rows, None)
    assert "<script>" not in html
    root = parse(html)
    headers = [th.text() for th in root.one("table", id="lineage").one("thead").find_all("th")]
    assert headers[5:] == ["accuracy", "loss", "note", "Promoted"]
    assert root.find_all("td", data_metric="note")[0].text() == EVIL
    assert root.one("svg", id="lineage-chart").attrs["data-metric"] == "accuracy"  # the first with numbers


def test_lineage_page_without_rows() -> None:
    root = parse(render.lineage_page("d", "digits", "file:///m.json", [], "accuracy"))
    assert root.one("table", id="lineage").attrs["data-count"] == "0"
    chart = root.one("svg", id="lineage-chart")
    assert chart.attrs["data-points"] == "0" and chart.find_all("circle") == []


def test_error_page() -> None:
    html = render.error_page("Not found", f"no job {EVIL}", 404)
    assert "<script>" not in html
    root = parse(html)
    main = root.one("main", id="error")
    assert main.attrs["data-status"] == "404" and EVIL in main.text()
    assert re.search(r"<title>404 Not found</title>", html)


def test_progress_section_of_a_running_and_a_finished_job() -> None:
    info = JobInfo(ref=ref())
    lines = [("worker-0", "DLC_METRICS " + json.dumps({"step": s, "total_steps": 400, "loss": 1.0,
                                                        "time": 1_800_000_000 + s / 10}))
             for s in range(0, 101, 10)]
    running = JobStatus(state=JobState.RUNNING, created=T0)
    report = build_report(info, running, [], [], lines, {})
    assert report["progress"] == {"current": 100, "total": 400, "unit": "steps", "percent": 25.0,
                                  "eta_seconds": 30, "as_of": 1_800_000_010.0}
    assert "total_steps" not in report["metrics"]["series"] and "time" not in report["metrics"]["series"]
    section = parse(render.job_page(report, {})).one(id="progress")
    assert section.attrs["data-percent"] == "25.0" and section.attrs["data-eta"] == "30"
    assert "100 / 400 steps · 25.0% · ETA 30s as of 2027-01-15 08:00:10 UTC" in section.text()
    done = JobStatus(state=JobState.SUCCEEDED, created=T0)
    report = build_report(info, done, [], [], lines, {"metrics": {"step": 400, "total_steps": 400}, "outputs": {}})
    section = parse(render.job_page(report, {})).one(id="progress")
    assert section.attrs["data-percent"] == "100.0" and "ETA" not in section.text()
    assert parse(render.job_page(build_report(info, running, [], [], [], {}), {})).find_all(id="progress") == []
