"""The Airflow plugin of dlc-airflow (entry point `airflow.plugins`): the "DLC jobs" pages
(dlc_airflow.ui.app, mounted at /dlc in the api-server) and where the UI links to them: a
"DLC jobs" tab on DAG runs and task instances, and an entry in the Browse menu."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from dlc_airflow.ui.app import PREFIX, app


class DLCPlugin(AirflowPlugin):
    name = "dlc_airflow"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "DLC jobs"}]
    # hrefs without a leading slash: relative to the UI's base, so a base_url with a path works
    external_views = [
        {"name": "DLC jobs", "href": "dlc/", "destination": "nav", "category": "browse", "url_route": "dlc-jobs"},
        {"name": "DLC jobs", "href": "dlc/runs/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": "dlc-run-jobs"},
        {"name": "DLC job report", "href": "dlc/jobs/{DAG_ID}/{RUN_ID}/{TASK_ID}?map_index={MAP_INDEX}",
         "destination": "task_instance", "url_route": "dlc-job-report"},
    ]
