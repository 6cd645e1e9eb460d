"""SlurmHook: the `slurm` Airflow connection type (slurmrestd URL, user, JWT or token file,
default partition / account / qos, job root, interpreter). The fields are described in
dlc_airflow.slurm.settings."""

from __future__ import annotations

from typing import Any

from airflow.sdk.bases.hook import BaseHook

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runner import Connection
from dlc_airflow.slurm.settings import SlurmConfigError, SlurmSettings, mask


class SlurmHook(BaseHook):
    conn_name_attr = "slurm_conn_id"
    default_conn_name = "slurm_default"
    conn_type = "slurm"
    hook_name = "Slurm (slurmrestd, DLC jobs)"

    @classmethod
    def get_ui_field_behaviour(cls) -> JSONObject:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"host": "slurmrestd URL", "login": "Slurm user", "password": "JWT"},
            "placeholders": {
                "host": "http://slurm-head:6820",
                "login": "the user jobs run as (scontrol token username=<user>)",
                "extra": '{"partition": "gpu", "account": "team-a", "job_root": "/shared/dlc-jobs", '
                         '"python": "/shared/venvs/dlc/bin/python", "token_file": "/run/secrets/slurm-jwt"}',
            },
        }

    def __init__(self, slurm_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.slurm_conn_id = slurm_conn_id

    def get_conn(self) -> SlurmSettings:
        return settings_for(self.slurm_conn_id)


def settings_for(conn_id: str, connection: Connection | None = None) -> SlurmSettings:
    """The connection's settings (read now unless given); its JWT is registered with the
    secrets masker of this process."""
    if connection is None:
        try:
            connection = BaseHook.get_connection(conn_id)
        except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException or a secrets backend failure
            raise SlurmConfigError(f"slurm connection {conn_id!r} cannot be read ({type(exc).__name__}: "
                                   f"{' '.join(str(exc).split())[:200]}): create it with conn_type slurm "
                                   "(host = slurmrestd URL, login = user, password = JWT)") from None
    settings = SlurmSettings.from_connection(connection, conn_id)
    mask(settings.token)
    return settings
