"""Real Airflow components as processes, for tests that need the real scheduler.

    from tests.support.airflow_stack import AirflowStack

    with AirflowStack(tmp_path / "home", dags_folder) as stack:     # what `airflow standalone` runs
        stack.wait_for_dag("my_dag")                                 # parsed and serialized
        stack.airflow("dags", "unpause", "my_dag")                   # any CLI command, same home
        stack.airflow("backfill", "create", "--dag-id", "my_dag", "--from-date", "2026-01-01",
                      "--to-date", "2026-01-04")
        runs = stack.wait_for_runs("my_dag", count=4, states={"success"})
        stack.kill("scheduler")                                      # SIGKILL (or sig=SIGTERM)
        stack.start("scheduler")                                     # start it again
        stack.task_states("my_dag", runs[0]["run_id"])               # {task_id: state}

What it sets up for its AIRFLOW_HOME (each stack has its own, so stacks never share state
with the test session's Airflow home or with each other):
- SQLite metadata DB (`airflow db migrate` on first start), LocalExecutor, no examples;
- the dags folder you give (AIRFLOW__CORE__DAGS_FOLDER), re-listed every few seconds; new
  DAGs start paused (unpause with `stack.airflow("dags", "unpause", dag_id)`);
- an api-server on a free 127.0.0.1 port: in Airflow 3 the LocalExecutor's task
  supervisor talks to the Execution API there (AIRFLOW__CORE__EXECUTION_API_SERVER_URL),
  so every component shares one JWT secret;
- `env` entries you pass override all of the above and go to every component and CLI call.

Components: "api-server", "scheduler", "dag-processor", "triggerer" (the ones `airflow
standalone` runs, and the default: a DLC task defers unless told otherwise); "scheduler:2",
"triggerer:2"... are more instances of one (HA, with a PostgreSQL `database` -
scripts/postgres-local - since SQLite allows a single scheduler). start() starts the given
ones (default: all of `components`), each in its own process group, output in <home>/<component>.log (`log(name)` reads it). stop() ends them
(SIGTERM, SIGKILL after a grace period) and the LocalExecutor's workers with them.

Reading state: dag runs and task instances are read straight from the SQLite file (fast, no
auth); `airflow(...)` runs any CLI command against the same home.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["ALL_COMPONENTS", "AirflowStack", "StackError"]

ALL_COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def _command(component: str) -> str:
    """The airflow command of a component ("triggerer:2" is a second triggerer)."""
    return component.split(":", 1)[0]


class StackError(AssertionError):
    """A component did not start, or what was waited for did not happen; carries log tails."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class AirflowStack:
    def __init__(self, home: str | os.PathLike, dags_folder: str | os.PathLike, *,
                 components: Iterable[str] = ALL_COMPONENTS,
                 env: dict[str, str] | None = None, parallelism: int = 4, database: str | None = None) -> None:
        """`database`: a PostgreSQL SQLAlchemy URL (scripts/postgres-local env), else SQLite."""
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self.components = tuple(components)
        self.database = database
        unknown = {_command(c) for c in self.components} - set(ALL_COMPONENTS)
        if unknown:
            raise ValueError(f"unknown components {sorted(unknown)}; choose from {ALL_COMPONENTS}")
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        self.home.mkdir(parents=True, exist_ok=True)
        base = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__") and k != "AIRFLOW_HOME"}
        self.env = {
            **base,
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": str(parallelism),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            # the CLI and the components write the same SQLite file: wait for its lock
            # (default 5 s) rather than fail with "database is locked" on a busy machine
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database or f"sqlite:///{self.home / 'airflow.db'}?timeout=60",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.home / "logs"),
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.port}/execution/",
            "AIRFLOW__API__PORT": str(self.port),
            # the log servers of its own: a stack beside another (make test's two lanes) would
            # find 8793 / 8794 taken, and its api-server would ask the other stack for logs
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": "dlc-airflow-test-jwt-secret",
            "AIRFLOW__API__SECRET_KEY": "dlc-airflow-test-secret-key",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            **(env or {}),
        }
        self._migrated = database is None and (self.home / "airflow.db").exists()

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> AirflowStack:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def migrate(self) -> None:
        if not self._migrated:
            self.airflow("db", "migrate", timeout=600)
            self._migrated = True

    def start(self, *names: str, timeout: float = 120.0) -> None:
        """Start components (default: all of this stack's) and wait until they are up."""
        self.migrate()
        names = names or self.components
        for name in names:
            command = _command(name)
            if command not in ALL_COMPONENTS:
                raise ValueError(f"unknown component {name!r}; choose from {ALL_COMPONENTS}")
            if self.running(name):
                continue
            log = open(self.home / f"{name.replace(':', '-')}.log", "ab")
            argv = [AIRFLOW, command] + (["--port", str(self.port), "--host", "127.0.0.1"]
                                         if command == "api-server" else [])
            self.procs[name] = subprocess.Popen(argv, env=self.env, cwd=self.home, stdin=subprocess.DEVNULL,
                                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
        if "api-server" in names:
            self._wait(lambda: self._api_up(), timeout, "the api-server to answer", "api-server")

    def running(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def pid(self, name: str) -> int:
        if not self.running(name):
            raise StackError(f"{name} is not running")
        return self.procs[name].pid

    def kill(self, name: str, sig: int = signal.SIGKILL, wait: float = 30.0) -> None:
        """Send `sig` to the component's whole process group (it and the processes it started,
        e.g. the scheduler's LocalExecutor workers) and wait for the component to exit."""
        proc = self.procs.get(name)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            if sig != signal.SIGKILL:
                self.kill(name, signal.SIGKILL, wait)

    def restart(self, name: str, sig: int = signal.SIGTERM) -> None:
        self.kill(name, sig)
        self.start(name)

    def stop(self, grace: float = 20.0) -> None:
        """End every component: SIGTERM to each process group, SIGKILL after `grace`."""
        for name in list(self.procs):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        for proc in list(self.procs.values()):
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # and whatever is left in the group
            except ProcessLookupError:
                pass
            proc.wait(10)
        self.procs.clear()

    # -- CLI and logs -------------------------------------------------------------------
    def airflow(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess:
        """Run `airflow <args>` against this home; raises StackError with its output on failure.

        SQLite has one writer: a command whose transaction meets the scheduler's write can be
        refused at once with "database is locked" (a read lock cannot be upgraded, whatever the
        busy timeout). Airflow rolls such a command back (a backfill cleans up its partial
        runs "so the user can retry"), so it is retried, as a user would.
        """
        for attempt in range(6):
            done = subprocess.run([AIRFLOW, *args], env=self.env, cwd=self.home, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
            locked = done.returncode != 0 and "database is locked" in done.stdout + done.stderr
            if not locked:
                break
            time.sleep(1 + attempt)
        if check and done.returncode != 0:
            raise StackError(f"`airflow {' '.join(args)}` exited {done.returncode}:\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
        return done

    def log(self, name: str, tail: int | None = None) -> str:
        path = self.home / f"{name.replace(':', '-')}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-tail:]) if tail else text

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1, map_index: int = -1) -> str:
        """The task's log file(s) for that try, concatenated ('' if none)."""
        folder = self.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            folder = folder / f"map_index={map_index}"
        return "".join(p.read_text(errors="replace") for p in sorted(folder.glob(f"attempt={try_number}*")))

    def _api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v2/monitor/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    # -- state (read from the SQLite metadata DB) ---------------------------------------
    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """Rows of a read-only query; `?` placeholders (on PostgreSQL too)."""
        if self.database:
            import psycopg2
            import psycopg2.extras

            url = self.database.replace("postgresql+psycopg2://", "postgresql://")
            with psycopg2.connect(url) as db, db.cursor(cursor_factory=psycopg2.extras.RealDictCursor) as cur:
                # psycopg2 formats with %: a literal one (LIKE 'x%') is doubled when there are params
                cur.execute(sql.replace("%", "%%").replace("?", "%s") if params else sql, params or None)
                return [dict(row) for row in cur.fetchall()]
        db = sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=30)
        db.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in db.execute(sql, params)]
        finally:
            db.close()

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Runs of `dag_id`, oldest logical date first: run_id, state, run_type, logical_date,
        data_interval_start, data_interval_end, clear_number."""
        return self.query(
            "SELECT run_id, state, run_type, logical_date, data_interval_start, data_interval_end, clear_number "
            "FROM dag_run WHERE dag_id = ? ORDER BY logical_date", dag_id)

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        rows = self.query("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                          dag_id, run_id)
        return {r["task_id"] if r["map_index"] < 0 else f"{r['task_id']}[{r['map_index']}]": r["state"] for r in rows}

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ? "
                          "AND map_index = -1", dag_id, run_id, task_id)
        return rows[0] if rows else None

    # -- waiting ------------------------------------------------------------------------
    def _wait(self, predicate, timeout: float, what: str, *components: str, poll: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for name in components or self.procs:
                if name in self.procs and not self.running(name):
                    raise StackError(f"{name} exited ({self.procs[name].returncode}) while waiting for {what}:\n"
                                     f"{self.log(name, 40)}")
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n} ---\n{self.log(n, 25)}" for n in self.procs)
                raise StackError(f"timed out after {timeout:.0f}s waiting for {what}\n{tails}")
            time.sleep(poll)

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        """Until the dag-processor has parsed and serialized `dag_id` (import errors fail fast)."""

        def parsed() -> bool:
            try:
                if self.query("SELECT 1 FROM serialized_dag WHERE dag_id = ?", dag_id):
                    return True
                errors = self.query("SELECT filename, stacktrace FROM import_error")
            except Exception:  # noqa: BLE001 - tables not there yet (sqlite3 or psycopg2 errors)
                return False
            if errors:
                raise StackError(f"DAG files failed to import: {errors}")
            return False

        self._wait(parsed, timeout, f"DAG {dag_id} to be parsed")

    def wait_for_runs(self, dag_id: str, count: int, states: Iterable[str] = ("success",),
                      timeout: float = 600.0, where=None) -> list[dict[str, Any]]:
        """Until at least `count` runs of `dag_id` (those `where(run)` accepts) are in `states`;
        fails fast when a run ends in a terminal state not among them."""
        wanted = set(states)

        def done() -> list[dict] | None:
            runs = [r for r in self.dag_runs(dag_id) if where is None or where(r)]
            bad = [r for r in runs if r["state"] in ("success", "failed") and r["state"] not in wanted]
            if bad:
                raise StackError(f"runs of {dag_id} ended {[(r['run_id'], r['state']) for r in bad]}; "
                                 f"task states: {[self.task_states(dag_id, r['run_id']) for r in bad]}")
            matched = [r for r in runs if r["state"] in wanted]
            return runs if len(matched) >= count else None

        return self._wait(done, timeout, f"{count} runs of {dag_id} in {sorted(wanted)}")

    def wait_for_task(self, dag_id: str, run_id: str, task_id: str, states: Iterable[str],
                      timeout: float = 300.0) -> str:
        wanted = set(states)

        def reached() -> str | None:
            ti = self.task_instance(dag_id, run_id, task_id)
            return ti["state"] if ti and ti["state"] in wanted else None

        return self._wait(reached, timeout, f"{task_id} of {run_id} to be in {sorted(wanted)}")
