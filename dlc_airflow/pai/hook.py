"""PaiHook: the `dlc_pai` connection in Airflow (the UI form, the Test button).

The runner reads the connection through settings.settings_from; see settings.py for the
fields.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.hook import BaseHook

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.pai.client import PaiClient, PaiError
from dlc_airflow.pai.settings import CONN_TYPE, DEFAULT_CONN_ID, PaiConfigError, PaiSettings, settings_from


class PaiHook(BaseHook):
    """Airflow's face of the connection (the UI form, Test button); the runner reads settings."""

    conn_name_attr = "pai_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "DLC jobs on PAI-DLC"

    def __init__(self, pai_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pai_conn_id = pai_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> JSONObject:
        return {
            "hidden_fields": ["schema", "port"],
            "relabeling": {"login": "AccessKey ID", "password": "AccessKey secret", "host": "Endpoint (optional)"},
            "placeholders": {"extra": '{"region_id": "cn-hangzhou", "workspace_id": "12345"}'},
        }

    def settings(self, namespace: str | None = None) -> PaiSettings:
        return settings_from(self.pai_conn_id, self.get_connection(self.pai_conn_id), namespace)

    def get_conn(self) -> PaiClient:
        return PaiClient(self.settings())

    def test_connection(self) -> tuple[bool, str]:
        try:
            settings = self.settings()
            PaiClient(settings).list_jobs(WorkspaceId=settings.workspace_id, PageSize=1)
        except (PaiError, PaiConfigError) as exc:
            return False, str(exc)
        return True, f"Listed jobs of workspace {settings.workspace_id} in {settings.region_id} ({settings.auth})"
