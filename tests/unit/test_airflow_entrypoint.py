"""docker/airflow-entrypoint.sh, the Airflow image's entrypoint, run with this machine's real
Airflow: it runs `airflow <arguments>`, and first what the variables of Airflow's own images ask
for (docker/compose.yaml's airflow-init sets them)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import airflow

ENTRYPOINT = Path(__file__).resolve().parents[2] / "docker" / "airflow-entrypoint.sh"


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))}
    return subprocess.run(["sh", str(ENTRYPOINT), *args], capture_output=True, text=True, timeout=120, env={
        **base, "PATH": f"{Path(sys.executable).parent}:{base['PATH']}", "AIRFLOW_HOME": str(tmp_path), **env})


def test_it_runs_airflow_with_the_arguments(tmp_path):
    done = run(tmp_path, "version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == airflow.__version__
    assert not (tmp_path / "simple_auth_manager_passwords.json.generated").exists()


def test_it_sets_the_admins_password_without_showing_it(tmp_path):
    passwords = tmp_path / "auth" / "passwords.json"
    passwords.parent.mkdir()
    passwords.write_text(json.dumps({"viewer": "kept"}))
    done = run(tmp_path, "version", _AIRFLOW_WWW_USER_CREATE="true", _AIRFLOW_WWW_USER_USERNAME="admin",
               _AIRFLOW_WWW_USER_PASSWORD="s3cret-pw", AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords))
    assert done.returncode == 0, done.stderr
    assert json.loads(passwords.read_text()) == {"viewer": "kept", "admin": "s3cret-pw"}
    assert passwords.stat().st_mode & 0o077 == 0  # the owner's alone
    assert "s3cret-pw" not in done.stdout + done.stderr and f"password of admin is set in {passwords}" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == airflow.__version__


def test_a_database_that_never_answers_stops_it_before_the_migration_and_the_command(tmp_path):
    done = run(tmp_path, "version", _AIRFLOW_DB_MIGRATE="true", CONNECTION_CHECK_MAX_COUNT="2",
               CONNECTION_CHECK_SLEEP_TIME="0",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path}/missing/dir/airflow.db")
    assert done.returncode != 0
    assert "waiting for the metadata database (1)" in done.stdout
    assert "did not answer after 2 tries; check [database] sql_alchemy_conn" in done.stderr
    assert airflow.__version__ not in done.stdout.strip().splitlines()[-1:]


def test_it_migrates_a_database_that_answers(tmp_path):
    database = tmp_path / "airflow.db"
    done = run(tmp_path, "version", _AIRFLOW_DB_MIGRATE="true",
               AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{database}")
    assert done.returncode == 0, done.stderr
    assert "waiting for the metadata database" not in done.stdout
    with sqlite3.connect(database) as db:  # migrated: Airflow's schema records its revision
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()
    assert done.stdout.strip().splitlines()[-1] == airflow.__version__
