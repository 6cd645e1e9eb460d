"""DLCJobOperator's extra links: the job's report page (dlc_airflow.ui), the job in the
cluster's dashboard (a URL pattern the admin sets on the connection), the local job folder.

Airflow writes an extra link's URL as an XCom when the task ends on a worker; a task the
trigger ends never goes back to a worker, so the operator pushes every link's URL itself as
soon as the job exists (`push_links`), and each link's `get_link` returns what was pushed.
The api-server only reads those XComs: it never imports this module.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from dlc_airflow.jobref import JobRef

# The connection's extra naming the dashboard URL of a job, e.g.
# "https://dashboard.example.com/#/job/{namespace}/{name}?backend={backend}"
DASHBOARD_EXTRA = "dlc_dashboard_url"


class _PushedLink(BaseOperatorLink):
    """A link whose URL the operator pushed to XCom when the job was made."""

    name = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(ti_key=ti_key, key=self.xcom_key)
        return value if isinstance(value, str) else ""


class DLCJobReportLink(_PushedLink):
    name = "DLC job report"


class DLCJobDashboardLink(_PushedLink):
    name = "Job in dashboard"


class DLCJobFolderLink(_PushedLink):
    name = "Local job folder"


LINKS = (DLCJobReportLink(), DLCJobDashboardLink(), DLCJobFolderLink())


def link_urls(ref: JobRef, dag_id: str, run_id: str, task_id: str, map_index: int,
              extras: dict[str, Any] | None, base_url: str) -> dict[str, str]:
    """{link name: URL} for a job (pure); links that do not apply are left out."""
    urls = {DLCJobReportLink.name: f"{base_url.rstrip('/')}/dlc/jobs/{quote(dag_id, safe='')}/"
            f"{quote(run_id, safe='')}/{quote(task_id, safe='')}" + (f"?map_index={map_index}" if map_index >= 0 else "")}
    pattern = (extras or {}).get(DASHBOARD_EXTRA)
    if pattern and ref.backend != "local":
        urls[DLCJobDashboardLink.name] = str(pattern).format(namespace=quote(ref.namespace, safe=""),
                                                             name=quote(ref.name, safe=""), backend=ref.backend,
                                                             uid=ref.uid)
    if ref.backend == "local":
        urls[DLCJobFolderLink.name] = f"file://{ref.namespace.rstrip('/')}/{quote(ref.name)}"
    return urls


def push_links_xcoms(urls: dict[str, str]) -> dict[str, str]:
    """{XCom key: URL} of the links that apply (what a task ending in the triggerer hands over)."""
    return {link.xcom_key: urls[link.name] for link in LINKS if link.name in urls}


def push_links(ti: Any, ref: JobRef, extras: dict[str, Any] | None) -> dict[str, str]:
    """Push each link's URL under its XCom key (see the module docstring); returns them."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or "http://localhost:8080"
    urls = link_urls(ref, ti.dag_id, ti.run_id, ti.task_id, ti.map_index if ti.map_index is not None else -1,
                     extras, base)
    for key, url in push_links_xcoms(urls).items():
        ti.xcom_push(key=key, value=url)
    return urls
