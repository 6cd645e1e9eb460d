"""The "DLC jobs" pages, a FastAPI app the plugin (dlc_airflow.airflow.plugin) mounts at /dlc
in Airflow's api-server, behind Airflow's own auth (a user must be allowed to read the DAG):

    /dlc/                                       DAG runs that made DLC jobs, newest first
    /dlc/runs/{dag_id}/{run_id}                 the jobs of one run (one row per task and map index)
    /dlc/jobs/{dag_id}/{run_id}/{task_id}       a job's report (?map_index=N for mapped tasks)
    /dlc/lineage/{dag_id}                       a retraining DAG's lineage: interval -> resumed from
                                                -> checkpoint -> metric -> promoted

Where a job is comes from its task's XCom `dlc_job` (backend, namespace, connection); what it
is comes through the backend's runner (dlc_airflow.report), as for the operator: no second
copy of the status logic.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse

from dlc_airflow.airflow.keys import XCOM_REF
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.ui import render

PREFIX = "/dlc"

app = FastAPI(title="DLC jobs", docs_url=None, redoc_url=None, openapi_url=None)


def _can_read_dag() -> Any:
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    return Depends(requires_access_dag("GET", DagAccessEntity.RUN))


def _logged_in() -> Any:
    from airflow.api_fastapi.core_api.security import get_user

    return Depends(get_user)


# -- the metadata DB ---------------------------------------------------------------------------
def _xcoms(dag_id: str | None, run_id: str | None, key: str, task_suffix: str | None = None) -> list[Any]:
    """(dag_id, run_id, task_id, map_index, value) of XComs, newest run first."""
    from airflow.models.dagrun import DagRun
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (select(XComModel, DagRun.run_after).join(DagRun, (DagRun.dag_id == XComModel.dag_id)
                                                      & (DagRun.run_id == XComModel.run_id))
             .where(XComModel.key == key).order_by(DagRun.run_after.desc(), XComModel.task_id, XComModel.map_index))
    if dag_id is not None:
        query = query.where(XComModel.dag_id == dag_id)
    if run_id is not None:
        query = query.where(XComModel.run_id == run_id)
    if task_suffix is not None:
        query = query.where(XComModel.task_id.like(f"%{task_suffix}"))
    with create_session() as session:
        return [(x.dag_id, x.run_id, x.task_id, x.map_index, XComModel.deserialize_value(x))
                for x, _ in session.execute(query).all()]


def _runner(data: JSONObject) -> Any:
    from dlc_airflow.airflow.runners import runner_of

    return runner_of(data)[0]


def _info(data: JSONObject, dag_id: str, run_id: str, task_id: str, map_index: int) -> Any:
    from dlc_airflow.jobinfo import JobInfo
    return JobInfo(ref=JobRef.from_dict(data), dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index,
                   try_number=int(data.get("try_number") or 0))


def _report_url(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    from urllib.parse import quote

    url = f"{PREFIX}/jobs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/{quote(task_id, safe='')}"
    return url + (f"?map_index={map_index}" if map_index >= 0 else "")


# -- pages -------------------------------------------------------------------------------------
@app.get("/", response_class=HTMLResponse, dependencies=[_logged_in()])
def index() -> str:
    from urllib.parse import quote

    runs: dict[tuple[str, str], int] = {}
    for dag_id, run_id, *_ in _xcoms(None, None, XCOM_REF):
        runs[(dag_id, run_id)] = runs.get((dag_id, run_id), 0) + 1
    return render.index_page([{"dag_id": d, "run_id": r, "jobs": n,
                               "url": f"{PREFIX}/runs/{quote(d, safe='')}/{quote(r, safe='')}"}
                              for (d, r), n in list(runs.items())[:200]])


@app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse, dependencies=[_can_read_dag()])
def run_page(dag_id: str, run_id: str) -> HTMLResponse:
    rows = []
    for _, _, task_id, map_index, data in _xcoms(dag_id, run_id, XCOM_REF):
        row: JSONObject = {"task_id": task_id, "map_index": map_index, "name": data["name"],
                               "backend": data["backend"], "namespace": JobRef.from_dict(data).place,
                               "report_url": _report_url(dag_id, run_id, task_id, map_index)}
        try:
            status = _runner(data).status(_info(data, dag_id, run_id, task_id, map_index).ref)
            row.update(state=status.state.value, reason=status.reason, restarts=status.restarts,
                       created=_iso(status.created), started=_iso(status.started), finished=_iso(status.finished))
        except Exception as exc:  # noqa: BLE001 - one unreachable backend must not hide the others
            row.update(state="UNKNOWN", reason=" ".join(str(exc).split())[:200], restarts=0,
                       created=None, started=None, finished=None)
        rows.append(row)
    if not rows:
        return _error(404, "No DLC jobs", f"run {run_id} of DAG {dag_id} made no DLC job (or its XComs are gone)")
    lineage = f"{PREFIX}/lineage/{dag_id}" if _xcoms(dag_id, None, "return_value", ".lineage") else None
    return HTMLResponse(render.run_page(dag_id, run_id, rows, lineage))


@app.get("/jobs/{dag_id}/{run_id}/{task_id}", response_class=HTMLResponse, dependencies=[_can_read_dag()])
def job_page(dag_id: str, run_id: str, task_id: str, map_index: str = Query("-1")) -> HTMLResponse:
    """`map_index` as text: the UI's task-instance tab fills {MAP_INDEX} in only for mapped tasks."""
    map_index = map_index if map_index.lstrip("-").isdigit() else "-1"
    return _job_page(dag_id, run_id, task_id, int(map_index))


def _job_page(dag_id: str, run_id: str, task_id: str, map_index: int) -> HTMLResponse:
    from dlc_airflow.report import job_report

    found = [data for _, _, t, m, data in _xcoms(dag_id, run_id, XCOM_REF) if t == task_id and m == map_index]
    if not found:
        return _error(404, "No such job", f"task {task_id} (map index {map_index}) of run {run_id} of DAG {dag_id} "
                      "made no DLC job")
    data = found[0]
    try:
        report = job_report(_runner(data), _info(data, dag_id, run_id, task_id, map_index))
    except Exception as exc:  # noqa: BLE001 - say why on the page rather than a bare 500
        return _error(502, "Cannot read the job", f"{data['backend']} job {data['name']} in {data['namespace']}: "
                      + " ".join(str(exc).split()))
    links = {"DAG run's jobs": f"{PREFIX}/runs/{dag_id}/{run_id}"}
    return HTMLResponse(render.job_page(report, links))


@app.get("/lineage/{dag_id}", response_class=HTMLResponse, dependencies=[_can_read_dag()])
def lineage_page(dag_id: str) -> HTMLResponse:
    from dlc_airflow.pipelines.store import ManifestStore
    from dlc_airflow.report import lineage_rows

    found = _xcoms(dag_id, None, "return_value", ".lineage")
    if not found:
        return _error(404, "No lineage", f"DAG {dag_id} has no retraining lineage task (or it never ran)")
    latest = found[0][4]
    manifest = ManifestStore(latest["manifest"], latest.get("lineage") or "",
                             conn_id=latest.get("storage_conn_id")).load()
    promoted = manifest.get("promoted") or {}
    rows = lineage_rows(manifest)
    metric = promoted.get("metric") or next((m for r in rows for m in r["metrics"]), None)
    return HTMLResponse(render.lineage_page(dag_id, manifest.get("lineage") or "", latest["manifest"], rows, metric))


def _error(status: int, title: str, message: str) -> HTMLResponse:
    return HTMLResponse(render.error_page(title, message, status), status_code=status)


def _iso(value: Any) -> str | None:
    return value.isoformat() if value else None
