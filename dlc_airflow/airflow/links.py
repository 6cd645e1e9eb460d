"""DLCJobOperator's extra links: the job's report page (dlc_airflow.ui), the job in the
cluster's dashboard (a URL pattern the admin sets on the connection), the local job folder.

Airflow writes an extra link's URL as an XCom when the task ends on a worker; a task the
trigger ends never goes back to a worker, so the operator pushes every link's URL itself as
soon as the job exists (dlc_airflow.airflow.lifecycle.publication), and each link's `get_link`
returns what was pushed.
The api-server only reads those XComs: it never imports this module.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.registry import is_folder

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
              extras: JSONObject | None, base_url: str) -> dict[str, str]:
    """{link name: URL} for a job (pure); links that do not apply are left out."""
    urls = {DLCJobReportLink.name: f"{base_url.rstrip('/')}/dlc/jobs/{quote(dag_id, safe='')}/"
            f"{quote(run_id, safe='')}/{quote(task_id, safe='')}" + (f"?map_index={map_index}" if map_index >= 0 else "")}
    pattern = (extras or {}).get(DASHBOARD_EXTRA)
    folder = is_folder(ref.backend)
    if pattern and not folder:
        urls[DLCJobDashboardLink.name] = str(pattern).format(namespace=quote(ref.place, safe=""),
                                                             name=quote(ref.name, safe=""), backend=ref.backend,
                                                             uid=ref.uid)
    if folder:
        urls[DLCJobFolderLink.name] = f"file://{ref.place.rstrip('/')}/{quote(ref.name)}"
    return urls


def links_xcoms(urls: dict[str, str]) -> dict[str, str]:
    """{XCom key: URL} of every link, "" for those that do not apply: Airflow reads each link's
    XCom when the task ends, and a key never pushed logs an error-level "XCom not found"."""
    return {link.xcom_key: urls.get(link.name, "") for link in LINKS}
