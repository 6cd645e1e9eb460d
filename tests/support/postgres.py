"""The local PostgreSQL (scripts/postgres-local) as Airflow's metadata database, for the tests
and benchmarks that run two schedulers and two triggerers.

    from tests.support.postgres import fresh_database, restart

    url = fresh_database()     # a new, empty airflow database; its SQLAlchemy URL
    restart()                  # a fast restart: every open connection is cut
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres-local"


class PostgresMissing(RuntimeError):
    """The local PostgreSQL is not running."""


def _run(command: str) -> str:
    return subprocess.run([str(SCRIPT), command], check=True, capture_output=True, text=True).stdout


def fresh_database() -> str:
    """Drop and create the airflow database; raises PostgresMissing when the server is down."""
    if subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode != 0:
        raise PostgresMissing("PostgreSQL is not running: scripts/postgres-local up (make test starts it)")
    _run("reset")
    return _run("env").split("DLC_PG_URL=", 1)[1].strip()


def restart() -> None:
    _run("restart")
