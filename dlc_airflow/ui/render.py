"""The HTML of the "DLC jobs" pages (pure): whole pages as strings, no JavaScript, no
external assets. Styles are inline; the timeline and the charts are SVG drawn here.

Every value that reaches a page goes through `_e` (html.escape), attributes included; links
other than http(s), relative or file URLs are shown as text, never as links.

The pages carry what the browser tests read: element ids (`summary`, `timeline`, `restarts`,
`progress`, `events`, `metrics`, `outputs`, `links`, `jobs`, `runs`, `lineage`, `lineage-chart`) and
data-* attributes (`data-replicas`, `data-replica`, `data-state`, `data-metric`,
`data-points`, `data-interval`, `data-percent`, `data-eta`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

from dlc_airflow.jsonvalue import JSONObject

__all__ = ["error_page", "index_page", "job_page", "lineage_page", "run_page"]

# Airflow's light theme, roughly: its state colours and its greys
STATE_COLOURS = {
    "succeeded": "#15803d", "success": "#15803d",
    "failed": "#dc2626", "error": "#dc2626",
    "running": "#0891b2",
    "restarting": "#7c3aed", "up_for_retry": "#7c3aed",
    "queued": "#78716c",
    "pending": "#a8a29e", "scheduled": "#a8a29e",
    "stopped": "#ea580c", "preempted": "#ea580c", "deleted": "#ea580c",
}
UNKNOWN_COLOUR = "#94a3b8"

CSS = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; padding: 16px 20px 32px; background: #fff; color: #1a202c;
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
h1 { font-size: 20px; font-weight: 600; margin: 0 0 4px; }
h2 { font-size: 16px; font-weight: 600; margin: 24px 0 8px; padding-bottom: 4px; border-bottom: 1px solid #e2e8f0; }
h3 { font-size: 14px; font-weight: 600; margin: 12px 0 6px; }
a { color: #0369a1; text-decoration: none; }
a:hover { text-decoration: underline; }
nav.crumbs { font-size: 13px; color: #64748b; margin-bottom: 8px; }
nav.crumbs a { color: #64748b; }
p.sub { color: #64748b; margin: 0 0 12px; font-size: 13px; }
p.empty { color: #64748b; font-style: italic; margin: 4px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 4px 0 8px; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e2e8f0; vertical-align: top; }
th { background: #f7fafc; font-weight: 600; color: #334155; white-space: nowrap; }
tr:hover td { background: #f8fafc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.fields th { background: none; text-align: right; color: #64748b; font-weight: 500; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
.uri { max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.msg { max-width: 640px; white-space: pre-wrap; word-break: break-word; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; color: #fff; font-size: 12px;
  font-weight: 600; line-height: 18px; white-space: nowrap; }
.warning td { background: #fffbeb; }
.scroll { overflow-x: auto; }
.cols { display: flex; flex-wrap: wrap; gap: 8px 40px; align-items: flex-start; }
.cols h3 { margin-top: 4px; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; border: 1px solid #e2e8f0; border-radius: 6px; padding: 6px 8px; }
figcaption { font-size: 13px; font-weight: 600; color: #334155; }
svg text { font: 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; fill: #475569; }
svg .label { fill: #1a202c; }
svg .grid { stroke: #e2e8f0; stroke-width: 1; }
svg .axis { stroke: #94a3b8; stroke-width: 1; }
svg .marker { stroke: #64748b; stroke-width: 1; stroke-dasharray: 4 3; }
svg polyline { fill: none; stroke: #0369a1; stroke-width: 1.5; }
svg circle.point { fill: #0369a1; }
svg circle.promoted { fill: #15803d; stroke: #fff; stroke-width: 1.5; }
.legend { font-size: 12px; color: #475569; margin: 4px 0; }
.legend span.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin: 0 4px 0 10px;
  vertical-align: -1px; }
ul.links { margin: 4px 0; padding-left: 20px; }
main.error { max-width: 720px; }
main.error .status { font-size: 40px; font-weight: 700; color: #dc2626; margin: 0; }
"""


# ---------------------------------------------------------------------------------------------
# pages

def index_page(runs: list[JSONObject]) -> str:
    """Every DAG run that made dlc-airflow jobs, with how many."""
    if runs:
        rows = "".join(
            f'<tr data-dag="{_e(r.get("dag_id"))}" data-run="{_e(r.get("run_id"))}">'
            f'<td>{_e(r.get("dag_id"))}</td><td>{_link(r.get("url"), r.get("run_id"))}</td>'
            f'<td class="num">{_e(r.get("jobs"))}</td></tr>'
            for r in runs)
        table = (f'<table id="runs" data-count="{len(runs)}"><thead><tr><th>DAG</th><th>Run</th>'
                 f'<th class="num">Jobs</th></tr></thead><tbody>{rows}</tbody></table>')
    else:
        table = '<table id="runs" data-count="0"></table><p class="empty">No DAG run has made a DLC job yet.</p>'
    return _page("DLC jobs", f"<h1>DLC jobs</h1><p class=\"sub\">Jobs per DAG run</p>{table}")


def run_page(dag_id: str, run_id: str, jobs: list[JSONObject], lineage_url: str | None) -> str:
    """The jobs of one DAG run, one row per job, its state colour-coded."""
    crumbs = _crumbs([("DLC jobs", "../../"), (dag_id, None), (run_id, None)])
    lineage = (f'<p id="lineage-link">Retraining lineage: {_link(lineage_url, "table and chart")}</p>'
               if lineage_url else "")
    if jobs:
        head = ("<tr><th>Task</th><th>Job</th><th>Backend</th><th>Namespace</th><th>State</th><th>Reason</th>"
                '<th class="num">Restarts</th><th>Created</th><th>Started</th><th>Finished</th></tr>')
        rows = []
        for j in jobs:
            task = _e(j.get("task_id"))
            index = j.get("map_index")
            if isinstance(index, int) and index >= 0:
                task += f' <span class="sub">[{index}]</span>'
            state = str(j.get("state") or "")
            rows.append(
                f'<tr data-job="{_e(j.get("name"))}" data-state="{_e(state)}">'
                f'<td>{task}</td><td>{_link(j.get("report_url"), j.get("name"))}</td>'
                f'<td>{_e(j.get("backend"))}</td><td>{_e(j.get("namespace"))}</td><td>{_badge(state)}</td>'
                f'<td>{_e(j.get("reason"))}</td><td class="num">{_e(j.get("restarts"))}</td>'
                f'<td>{_time(j.get("created"))}</td><td>{_time(j.get("started"))}</td>'
                f'<td>{_time(j.get("finished"))}</td></tr>')
        table = (f'<div class="scroll"><table id="jobs" data-count="{len(jobs)}"><thead>{head}</thead>'
                 f'<tbody>{"".join(rows)}</tbody></table></div>')
    else:
        table = '<table id="jobs" data-count="0"></table><p class="empty">This run made no DLC job.</p>'
    body = (f"{crumbs}<h1>{_e(dag_id)}</h1><p class=\"sub\">Run <code>{_e(run_id)}</code></p>"
            f"{lineage}{table}")
    return _page(f"DLC jobs of {dag_id} / {run_id}", body)


def job_page(report: JSONObject, links: dict[str, str]) -> str:
    """The report of one job (what dlc_airflow.report.build_report returns)."""
    job = report.get("job") or {}
    name = str(job.get("name") or "")
    sub = " / ".join(_e(job.get(k)) for k in ("dag_id", "run_id", "task_id") if job.get(k))
    dag_id, run_id = str(job.get("dag_id") or ""), str(job.get("run_id") or "")
    # the page is /dlc/jobs/{dag_id}/{run_id}/{task_id}; the run's is /dlc/runs/{dag_id}/{run_id}
    run = f"../../../runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}" if dag_id and run_id else None
    body = [
        _crumbs([("DLC jobs", "../../../"), (f"{dag_id} / {run_id}" if run else "", run), (name, None)]),
        f"<h1>{_e(name)} {_badge(job.get('state'))}</h1>",
        f'<p class="sub">{sub}</p>' if sub else "",
        _links_section(links),
        _summary_section(job, report.get("roles") or {}),
        _progress_section(report.get("progress"), job.get("state")),
        _timeline_section(job, report.get("replicas") or []),
        _restarts_section(report.get("restarts") or []),
        _events_section(report.get("events") or []),
        _metrics_section(report.get("metrics") or {}),
        _outputs_section(report.get("outputs") or {}),
    ]
    return _page(f"DLC job {name}", "".join(body))


def lineage_page(dag_id: str, lineage: str, manifest_uri: str, rows: list[JSONObject], metric: str | None) -> str:
    """A retraining DAG's lineage (dlc_airflow.report.lineage_rows): interval -> resumed from
    -> checkpoint -> metric -> promoted, as a table and a chart of the metric per interval."""
    names = [metric] if metric else sorted({k for r in rows for k in (r.get("metrics") or {})})
    charted = metric or next((n for n in names if any(_number((r.get("metrics") or {}).get(n)) is not None
                                                       for r in rows)), None)
    head = ("<tr><th>Interval</th><th>Status</th><th>Attempt</th><th>Resumed from</th><th>Checkpoint</th>"
            + "".join(f'<th class="num">{_e(n)}</th>' for n in names) + "<th>Promoted</th></tr>")
    trs = []
    for r in rows:
        key = str(r.get("interval") or "")
        values = r.get("metrics") or {}
        promoted = bool(r.get("promoted"))
        checkpoint = r.get("checkpoint")
        trs.append(
            f'<tr data-interval="{_e(key)}" data-status="{_e(r.get("status"))}" '
            f'data-promoted="{"yes" if promoted else "no"}">'
            f'<td title="{_e(key)}">{_interval(r)}</td><td>{_badge(r.get("status"))}</td>'
            f'<td class="num">{_e(r.get("attempt"))}</td>'
            f'<td><span class="mono">{_e(r.get("resumed_from")) or "—"}</span></td>'
            f'<td><div class="uri mono" title="{_e(checkpoint)}">{_e(checkpoint) or "—"}</div></td>'
            + "".join(f'<td class="num" data-metric="{_e(n)}">{_value(values.get(n))}</td>' for n in names)
            + f'<td>{"<strong>yes</strong>" if promoted else "no"}</td></tr>')
    table = (f'<div class="scroll"><table id="lineage" data-count="{len(rows)}"><thead>{head}</thead>'
             f'<tbody>{"".join(trs)}</tbody></table></div>')
    if not rows:
        table += '<p class="empty">No interval has run yet.</p>'
    crumbs = _crumbs([("DLC jobs", "../"), (dag_id, None), ("lineage", None)])
    body = (f"{crumbs}<h1>Lineage {_e(lineage)}</h1>"
            f'<p class="sub">DAG <code>{_e(dag_id)}</code> · manifest <code>{_e(manifest_uri)}</code></p>'
            f"<h2>Intervals</h2>{table}<h2>{_e(charted or 'Metric')} per interval</h2>"
            f"{_lineage_chart(rows, charted)}")
    return _page(f"Lineage {lineage} of {dag_id}", body)


def error_page(title: str, message: str, status: int) -> str:
    body = (f'<main class="error" id="error" data-status="{_e(status)}"><p class="status">{_e(status)}</p>'
            f'<h1>{_e(title)}</h1><p class="msg">{_e(message)}</p></main>')
    return _page(f"{status} {title}", body)


# ---------------------------------------------------------------------------------------------
# job page sections

SUMMARY_FIELDS = (("name", "Job"), ("state", "State"), ("reason", "Reason"), ("message", "Message"),
                  ("queue_position", "Queue"),
                  ("backend", "Backend"), ("namespace", "Namespace"), ("uid", "UID"), ("attempt", "Attempt"),
                  ("dag_id", "DAG"), ("run_id", "Run"), ("task_id", "Task"), ("map_index", "Map index"),
                  ("try", "Try"), ("restarts", "Restarts"), ("created", "Created"), ("started", "Started"),
                  ("finished", "Finished"), ("queued_seconds", "Queued"), ("running_seconds", "Running"))


def _summary_section(job: JSONObject, roles: JSONObject) -> str:
    rows = []
    for key, label in SUMMARY_FIELDS:
        value = job.get(key)
        if key == "state":
            cell = _badge(value)
        elif key in ("created", "started", "finished"):
            cell = _time(value)
        elif key.endswith("_seconds"):
            cell = _e(_duration(value)) if value is not None else "—"
        elif key == "message":
            cell = f'<div class="msg">{_e(value)}</div>'
        elif key == "map_index" and value == -1:
            cell = "—"
        else:
            cell = _e(value) if value not in (None, "") else "—"
        rows.append(f'<tr data-field="{key}"><th>{label}</th><td>{cell}</td></tr>')
    roles_html = ""
    if roles:
        trs = "".join(
            f'<tr data-role="{_e(role)}"><td>{_e(role)}</td>'
            + "".join(f'<td class="num">{_e((counts or {}).get(k, 0))}</td>'
                      for k in ("replicas", "active", "succeeded", "failed"))
            + "</tr>" for role, counts in roles.items())
        roles_html = ('<h3>Roles</h3><table id="roles"><thead><tr><th>Role</th><th class="num">Replicas</th>'
                      '<th class="num">Active</th><th class="num">Succeeded</th><th class="num">Failed</th></tr>'
                      f"</thead><tbody>{trs}</tbody></table>")
    return (f'<section id="summary"><h2>Summary</h2><div class="cols"><table class="fields"><tbody>'
            f'{"".join(rows)}</tbody></table><div>{roles_html}</div></div></section>')


TL_LABEL, TL_WIDTH, TL_ROW, TL_BAR, TL_TOP, TL_BOTTOM = 150, 760, 24, 14, 28, 10


def _timeline_section(job: JSONObject, replicas: list[JSONObject]) -> str:
    """One row per replica name (a replica's successive pods share its row), a bar per pod
    from its start to its end; a replica still running (or never ended) reaches the job's
    end, or now while the job runs; one that never started is drawn from the job's creation."""
    created, started, finished = (_parse(job.get(k)) for k in ("created", "started", "finished"))
    now = _now()
    spans = []
    for r in replicas:
        begin = _parse(r.get("started")) or created or started
        end = _parse(r.get("finished")) or finished or now
        if begin is not None and end < begin:
            end = begin
        spans.append((r, begin, end))
    times = [t for _, b, e in spans for t in (b, e) if t is not None and b is not None]
    times += [t for t in (created, started, finished) if t is not None]
    order: list[str] = []
    for r in replicas:
        if str(r.get("name")) not in order:
            order.append(str(r.get("name")))
    height = TL_TOP + max(1, len(order)) * TL_ROW + TL_BOTTOM
    width = TL_LABEL + TL_WIDTH + 20
    parts = [f'<svg id="timeline-svg" data-replicas="{len(replicas)}" data-rows="{len(order)}" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="replicas over time" xmlns="http://www.w3.org/2000/svg">']
    if not replicas:
        parts.append(f'<text x="{TL_LABEL}" y="{TL_TOP + 14}">No replica has been seen yet.</text></svg>')
        return _section("timeline", "Timeline", "".join(parts))
    t0 = min(times) if times else None
    t1 = max(times) if times else None
    span = max((t1 - t0).total_seconds(), 1.0) if t0 and t1 else 1.0

    def x(t: datetime) -> float:
        assert t0 is not None
        return TL_LABEL + TL_WIDTH * (t - t0).total_seconds() / span

    bottom = TL_TOP + len(order) * TL_ROW
    if t0 is not None:
        step = _tick_step(span)
        tick = 0.0
        while tick <= span + 1e-9:
            tx = TL_LABEL + TL_WIDTH * tick / span
            parts.append(f'<line class="grid" x1="{tx:.1f}" y1="{TL_TOP - 4}" x2="{tx:.1f}" y2="{bottom}"/>'
                         f'<text x="{tx:.1f}" y="{TL_TOP - 8}" text-anchor="middle">+{_e(_duration(tick))}</text>')
            tick += step
        for label, t in (("started", started), ("finished", finished)):
            if t is not None:
                parts.append(f'<line class="marker" data-marker="{label}" x1="{x(t):.1f}" y1="{TL_TOP - 4}" '
                             f'x2="{x(t):.1f}" y2="{bottom}"><title>job {label} {_e(_clock(t))}</title></line>')
    for row, name in enumerate(order):
        parts.append(f'<text class="label" x="{TL_LABEL - 8}" y="{TL_TOP + row * TL_ROW + TL_ROW / 2 + 4:.1f}" '
                     f'text-anchor="end">{_e(name)}</text>')
    for r, begin, end in spans:
        state = str(r.get("state") or "")
        y = TL_TOP + order.index(str(r.get("name"))) * TL_ROW + (TL_ROW - TL_BAR) / 2
        tip = _e(_replica_tip(r, begin, end, ongoing=not r.get("finished") and finished is None))
        if begin is None or t0 is None:
            parts.append(f'<rect class="bar" data-replica="{_e(r.get("name"))}" data-state="{_e(state)}" '
                         f'x="{TL_LABEL}" y="{y:.1f}" width="0" height="{TL_BAR}" fill="{_colour(state)}">'
                         f"<title>{tip}</title></rect>")
            continue
        left, right = x(begin), x(end)
        parts.append(f'<rect class="bar" data-replica="{_e(r.get("name"))}" data-state="{_e(state)}" '
                     f'x="{left:.1f}" y="{y:.1f}" width="{max(right - left, 2.0):.1f}" height="{TL_BAR}" rx="2" '
                     f'fill="{_colour(state)}"><title>{tip}</title></rect>')
    parts.append(f'<line class="axis" x1="{TL_LABEL}" y1="{bottom}" x2="{TL_LABEL + TL_WIDTH}" y2="{bottom}"/></svg>')
    caption = (f'<p class="sub">From {_time(_iso(t0))} to {_time(_iso(t1))} ({_e(_duration(span))}); '
               "dashed lines: the job started and finished.</p>") if t0 and t1 else ""
    states = list(dict.fromkeys(str(r.get("state") or "") for r in replicas))
    legend = '<div class="legend">' + "".join(
        f'<span class="swatch" style="background:{_colour(s)}"></span>{_e(s or "unknown")}' for s in states) + "</div>"
    return _section("timeline", "Timeline", f'{caption}{legend}<div class="scroll">{"".join(parts)}</div>')


def _replica_tip(r: JSONObject, begin: datetime | None, end: datetime | None, *, ongoing: bool) -> str:
    bits = [f"{r.get('name')} ({r.get('role')} #{r.get('index')}): {r.get('state')}"]
    if begin is not None and end is not None:
        until = "now" if ongoing else _clock(end)
        bits.append(f"{_clock(begin)} → {until} ({_duration((end - begin).total_seconds())})")
    if r.get("exit_code") is not None:
        bits.append(f"exit code {r.get('exit_code')}")
    if r.get("reason"):
        bits.append(str(r.get("reason")))
    if r.get("restarts"):
        bits.append(f"restarts {r.get('restarts')}")
    if r.get("node"):
        bits.append(f"node {r.get('node')}")
    return "; ".join(bits)


def _restarts_section(rows: list[JSONObject]) -> str:
    if not rows:
        return _section("restarts", "Restarts and failures",
                        '<table data-count="0"></table><p class="empty">No replica failed or restarted.</p>')
    trs = "".join(
        f'<tr data-replica="{_e(r.get("replica"))}"><td>{_e(r.get("replica"))}</td><td>{_time(r.get("time"))}</td>'
        f'<td class="num">{_e(r.get("restarts"))}</td><td class="num">{_e(r.get("exit_code"))}</td>'
        f'<td><div class="msg">{_e(r.get("reason"))}</div></td></tr>' for r in rows)
    return _section("restarts", "Restarts and failures",
                    f'<table data-count="{len(rows)}"><thead><tr><th>Replica</th><th>Time</th>'
                    '<th class="num">Restarts</th><th class="num">Exit code</th><th>Reason</th></tr></thead>'
                    f"<tbody>{trs}</tbody></table>")


def _events_section(events: list[JSONObject]) -> str:
    if not events:
        return _section("events", "Events", '<table data-count="0"></table><p class="empty">No events.</p>')
    trs = "".join(
        f'<tr{" class=warning" if e.get("type") == "Warning" else ""} data-type="{_e(e.get("type"))}">'
        f'<td>{_time(e.get("time"))}</td><td>{_e(e.get("type"))}</td><td>{_e(e.get("reason"))}</td>'
        f'<td>{_e(e.get("object"))}</td><td><div class="msg">{_e(e.get("message"))}</div></td>'
        f'<td class="num">{_e(e.get("count"))}</td></tr>' for e in events)
    return _section("events", "Events",
                    f'<div class="scroll"><table data-count="{len(events)}"><thead><tr><th>Time</th><th>Type</th>'
                    '<th>Reason</th><th>Object</th><th>Message</th><th class="num">Count</th></tr></thead>'
                    f"<tbody>{trs}</tbody></table></div>")


def _metrics_section(metrics: JSONObject) -> str:
    series = metrics.get("series") or {}
    final = metrics.get("final") or {}
    charts = "".join(_line_chart(name, points) for name, points in series.items())
    html = (f'<div class="charts">{charts}</div>' if charts
            else '<p class="empty">No metric curves: the job printed no DLC_METRICS lines '
                 "(dlc_airflow.runtime.log_metrics).</p>")
    if final:
        trs = "".join(f'<tr data-metric="{_e(k)}"><td>{_e(k)}</td><td class="num">{_value(v)}</td></tr>'
                      for k, v in final.items())
        html += (f'<h3>Final values</h3><table id="final-metrics" data-count="{len(final)}"><thead><tr>'
                 f'<th>Metric</th><th class="num">Value</th></tr></thead><tbody>{trs}</tbody></table>')
    return _section("metrics", "Metrics", html)


def _progress_section(progress: Any, state: Any) -> str:
    """How far the job is (dlc_airflow.report.progress_of): a bar, the counts and the ETA; nothing
    when it reported no progress."""
    shown = _number(progress.get("percent")) if isinstance(progress, dict) else None
    if shown is None:
        return ""
    percent = max(0.0, min(100.0, shown))
    eta = _number(progress.get("eta_seconds"))
    if str(state).upper() in ("SUCCEEDED", "FAILED", "STOPPED"):
        when = ""
    elif eta is None:
        when = "ETA unknown (no rate yet)"
    else:
        as_of = _number(progress.get("as_of"))  # the job's clock: whatever it printed
        stamp = f" as of {_clock(datetime.fromtimestamp(as_of, UTC))}" if as_of is not None and 0 <= as_of < 1e11 else ""
        when = f"ETA {_duration(eta)}{stamp}"
    unit = progress.get("unit") or "steps"
    counts = ("" if unit == "percent" else
              f"{_value(progress.get('current'))} / {_value(progress.get('total'))} {_e(unit)} · ")
    bar = (f'<div style="background:#e5e7eb;border-radius:4px;height:12px;width:100%;max-width:760px">'
           f'<div style="background:#2563eb;border-radius:4px;height:12px;width:{percent:.1f}%"></div></div>')
    return (f'<section id="progress" data-percent="{percent:.1f}" data-eta="{"" if eta is None else int(eta)}">'
            f"<h2>Progress</h2>{bar}<p>{counts}{percent:.1f}%{' · ' + _e(when) if when else ''}</p></section>")


def _outputs_section(outputs: JSONObject) -> str:
    if not outputs:
        return _section("outputs", "Outputs", '<p class="empty">The job reported no outputs.</p>')
    trs = "".join(f'<tr data-output="{_e(k)}"><td>{_e(k)}</td><td><span class="mono">{_value(v)}</span></td></tr>'
                  for k, v in outputs.items())
    return _section("outputs", "Outputs",
                    f'<table data-count="{len(outputs)}"><thead><tr><th>Output</th><th>Value</th></tr></thead>'
                    f"<tbody>{trs}</tbody></table>")


def _links_section(links: dict[str, str]) -> str:
    if not links:
        return ""
    items = "".join(f"<li>{_link(url, label)}</li>" for label, url in links.items())
    return f'<ul id="links" class="links">{items}</ul>'


# ---------------------------------------------------------------------------------------------
# charts

CH_W, CH_H, CH_LEFT, CH_RIGHT, CH_TOP, CH_BOTTOM = 440, 220, 64, 16, 12, 34
PAD = 8  # between the plot's edges and its extreme points


def _line_chart(name: str, points: Iterable[Sequence[float]]) -> str:
    """One metric's curve: value per step, with the axes' min and max labelled."""
    pts = [(float(p[0]), float(p[1])) for p in points
           if len(p) >= 2 and _number(p[0]) is not None and _number(p[1]) is not None]
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    parts = [f'<svg class="chart" data-metric="{_e(name)}" data-points="{len(pts)}" width="{CH_W}" height="{CH_H}" '
             f'viewBox="0 0 {CH_W} {CH_H}" role="img" aria-label="{_e(name)} per step" '
             'xmlns="http://www.w3.org/2000/svg">']
    if not pts:
        parts.append(f'<text x="{CH_LEFT}" y="{CH_H / 2:.0f}">no values</text></svg>')
        return f"<figure><figcaption>{_e(name)}</figcaption>{''.join(parts)}</figure>"
    x0, x1 = _range(xs)
    y0, y1 = _range(ys)
    sx = _scale(x0, x1, CH_LEFT + PAD, CH_W - CH_RIGHT - PAD)
    sy = _scale(y0, y1, CH_H - CH_BOTTOM - PAD, CH_TOP + PAD)
    parts.append(_axes(CH_W, CH_H, y0, y1, x0, x1, x_label="step"))
    coords = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in pts)
    parts.append(f'<polyline points="{coords}"><title>{_e(name)}: last {_e(_fmt(ys[-1]))} at step '
                 f"{_e(_fmt(xs[-1]))}, min {_e(_fmt(min(ys)))}, max {_e(_fmt(max(ys)))}</title></polyline>")
    if len(pts) <= 40:
        parts.extend(f'<circle class="point" cx="{sx(a):.1f}" cy="{sy(b):.1f}" r="2.5">'
                     f"<title>step {_e(_fmt(a))}: {_e(_fmt(b))}</title></circle>" for a, b in pts)
    parts.append("</svg>")
    caption = f"{_e(name)} <span class=\"sub\">last {_e(_fmt(ys[-1]))}</span>"
    return f"<figure><figcaption>{caption}</figcaption>{''.join(parts)}</figure>"


LN_W, LN_H = 760, 260


def _lineage_chart(rows: list[JSONObject], metric: str | None) -> str:
    """The metric per interval (x: intervals in order, gaps kept), promoted ones marked."""
    values = [(i, r, _number((r.get("metrics") or {}).get(metric))) for i, r in enumerate(rows)] if metric else []
    pts = [(i, r, v) for i, r, v in values if v is not None]
    parts = [f'<svg id="lineage-chart" class="chart" data-metric="{_e(metric or "")}" data-points="{len(pts)}" '
             f'data-promoted="{sum(1 for _, r, _ in pts if r.get("promoted"))}" width="{LN_W}" height="{LN_H}" '
             f'viewBox="0 0 {LN_W} {LN_H}" role="img" aria-label="{_e(metric or "metric")} per interval" '
             'xmlns="http://www.w3.org/2000/svg">']
    if not pts:
        why = f"no interval reported {metric}" if metric else "no interval reported a metric"
        parts.append(f'<text x="{CH_LEFT}" y="{LN_H / 2:.0f}">{_e(why)}</text></svg>')
        return f'<div class="scroll">{"".join(parts)}</div>'
    y0, y1 = _range([v for _, _, v in pts])
    sx = _scale(-0.5, len(rows) - 0.5, CH_LEFT, LN_W - CH_RIGHT) if len(rows) > 1 else (
        lambda _i: (CH_LEFT + LN_W - CH_RIGHT) / 2)
    sy = _scale(y0, y1, LN_H - CH_BOTTOM - PAD, CH_TOP + PAD)
    parts.append(_axes(LN_W, LN_H, y0, y1, None, None, x_label="interval"))
    every = max(1, math.ceil(len(rows) / 8))
    for i, r in enumerate(rows):
        if i % every == 0 or i == len(rows) - 1:
            parts.append(f'<text class="x-tick" x="{sx(i):.1f}" y="{LN_H - CH_BOTTOM + 14}" text-anchor="middle">'
                         f"{_e(_short_interval(r))}</text>")
    parts.append('<polyline points="' + " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, _, v in pts) + '"/>')
    for i, r, v in pts:
        promoted = bool(r.get("promoted"))
        tip = f"{r.get('interval')}: {metric} {_fmt(v)}" + (" (promoted)" if promoted else "")
        parts.append(f'<circle class="{"promoted" if promoted else "point"}" data-interval="{_e(r.get("interval"))}" '
                     f'cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="{6 if promoted else 3.5}"><title>{_e(tip)}</title></circle>')
    parts.append("</svg>")
    legend = ('<div class="legend"><span class="swatch" style="background:#0369a1"></span>trained'
              '<span class="swatch" style="background:#15803d"></span>promoted</div>')
    return f'{legend}<div class="scroll">{"".join(parts)}</div>'


def _axes(width: int, height: int, y0: float, y1: float, x0: float | None, x1: float | None, *, x_label: str) -> str:
    left, right, top, bottom = CH_LEFT, width - CH_RIGHT, CH_TOP, height - CH_BOTTOM
    high, low, middle = top + PAD, bottom - PAD, (top + bottom) / 2
    out = [f'<line class="grid" x1="{left}" y1="{high}" x2="{right}" y2="{high}"/>',
           f'<line class="grid" x1="{left}" y1="{middle:.1f}" x2="{right}" y2="{middle:.1f}"/>',
           f'<line class="grid" x1="{left}" y1="{low}" x2="{right}" y2="{low}"/>',
           f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>',
           f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
           f'<text class="y-max" x="{left - 6}" y="{high + 4}" text-anchor="end">{_e(_fmt(y1))}</text>',
           f'<text class="y-min" x="{left - 6}" y="{low + 4}" text-anchor="end">{_e(_fmt(y0))}</text>']
    if x0 is not None and x1 is not None:
        out += [f'<text class="x-min" x="{left + PAD}" y="{bottom + 14}" text-anchor="middle">{_e(_fmt(x0))}</text>',
                f'<text class="x-max" x="{right - PAD}" y="{bottom + 14}" text-anchor="middle">{_e(_fmt(x1))}</text>']
    out.append(f'<text x="{(left + right) / 2:.1f}" y="{height - 4}" text-anchor="middle">{_e(x_label)}</text>')
    return "".join(out)


def _range(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    if low == high:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    return low, high


def _scale(d0: float, d1: float, r0: float, r1: float) -> Callable[[float], float]:
    ratio = (r1 - r0) / (d1 - d0) if d1 != d0 else 0.0
    return lambda v: r0 + (v - d0) * ratio


def _tick_step(span: float) -> float:
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400):
        if span / step <= 8:
            return float(step)
    return 86400.0 * math.ceil(span / 86400 / 8)


# ---------------------------------------------------------------------------------------------
# values

def _e(value: Any) -> str:
    """Escaped text of any value ('' for None)."""
    return "" if value is None else escape(str(value), quote=True)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _value(value: Any) -> str:
    """A metric or output value as escaped text: numbers compact, structures as JSON."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return _e(str(value).lower())
    if isinstance(value, float):
        return _e(_fmt(value) if math.isfinite(value) else str(value))
    if isinstance(value, (dict, list)):
        return _e(json.dumps(value, sort_keys=True, default=str))
    return _e(value)


def _parse(value: Any) -> datetime | None:
    if not value:
        return None
    if isinstance(value, datetime):
        parsed = value
    else:
        try:
            parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _clock(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _time(value: Any) -> str:
    """An ISO time as a <time> element, shown in UTC to the second."""
    parsed = _parse(value)
    if parsed is None:
        return _e(value) if value else "—"
    return f'<time datetime="{_e(parsed.isoformat())}">{_e(_clock(parsed))}</time>'


def _duration(seconds: Any) -> str:
    if seconds is None:
        return ""
    total = float(seconds)
    if total < 60:
        return f"{total:.0f}s" if total >= 1 or total == 0 else f"{total:.1f}s"
    whole = int(round(total))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else "",
             f"{secs}s" if secs else ""]
    return "".join(p for p in parts if p) or "0s"


def _interval(row: JSONObject) -> str:
    start, end = _parse(row.get("start")), _parse(row.get("end"))
    if start is None or end is None:
        return _e(row.get("interval"))
    fmt = "%Y-%m-%d" if start.time() == end.time() == datetime.min.time() else "%Y-%m-%d %H:%M"
    return (f'<time datetime="{_e(start.isoformat())}">{_e(start.astimezone(UTC).strftime(fmt))}</time> → '
            f'<time datetime="{_e(end.isoformat())}">{_e(end.astimezone(UTC).strftime(fmt))}</time>')


def _short_interval(row: JSONObject) -> str:
    start = _parse(row.get("start"))
    if start is None:
        return str(row.get("interval") or "")[:16]
    return start.astimezone(UTC).strftime("%m-%d" if start.time() == datetime.min.time() else "%m-%d %H:%M")


def _colour(state: Any) -> str:
    return STATE_COLOURS.get(str(state or "").lower(), UNKNOWN_COLOUR)


def _badge(state: Any) -> str:
    if not state:
        return "—"
    return (f'<span class="badge state" data-state="{_e(state)}" style="background:{_colour(state)}">'
            f"{_e(state)}</span>")


SAFE_SCHEMES = ("http://", "https://", "file://")


def _link(url: Any, text: Any) -> str:
    """A link, or the text alone when there is no URL or its scheme is not a safe one."""
    label = _e(text) if text not in (None, "") else _e(url)
    if not url:
        return label
    target = str(url).strip()
    scheme, colon, _ = target.partition(":")
    if colon and "/" not in scheme and "?" not in scheme and not target.lower().startswith(SAFE_SCHEMES):
        return label  # javascript:, data:... are never links
    return f'<a href="{_e(target)}">{label}</a>'


def _crumbs(items: list[tuple[str, str | None]]) -> str:
    return '<nav class="crumbs">' + " / ".join(_link(href, label) if href else _e(label)
                                                for label, href in items if label) + "</nav>"


def _section(ident: str, title: str, inner: str) -> str:
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{inner}</section>'


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head>"
            f"<body>{body}</body></html>\n")
