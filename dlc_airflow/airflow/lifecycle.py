"""The start of a task's job, written once for the worker (DLCJobOperator.execute) and the
triggerer (a task started there, dlc_airflow.airflow.start).

    started = start(request, log, make=make_runner)

does, in this order: which backend and connection, the admin's policy (before anything is
created), the runner, the secrets masker, submit-or-adopt. `publication` (pure) is what the
task then publishes about its job: the XCom `dlc_job`, every extra link's URL, and where the
job is for the notifiers. Errors propagate; each caller turns them into its own failure.
At the other end, `runs_again(current_state(ti))` tells a killed try whether Airflow runs the
task again, in which case its job is left to the next try (DLCJobOperator.on_kill).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dlc_airflow.airflow.keys import STATE_KEY, XCOM_REF
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.naming import TaskIdentity
from dlc_airflow.runner import JobRunner, Log
from dlc_airflow.spec import DLCJob
from dlc_airflow.submission import Submission

if TYPE_CHECKING:  # Airflow 3.3's task state store (the context's task_state_store)
    from airflow.sdk.execution_time.context import TaskStateStoreAccessor

RunnerFactory = Callable[..., JobRunner]  # make_runner / shared_runner's signature


class TaskInstanceIds(Protocol):
    """What a task instance says of itself (Airflow's RuntimeTaskInstance and TaskInstance)."""

    @property
    def dag_id(self) -> str: ...

    @property
    def task_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    @property
    def map_index(self) -> int | None: ...

    @property
    def try_number(self) -> int: ...


def identity_of(ti: TaskInstanceIds, dag_run: object = None) -> TaskIdentity:
    """The task instance a job is for (with its run's clear count: a cleared task runs anew)."""
    return TaskIdentity(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                        map_index=ti.map_index if ti.map_index is not None else -1, try_number=ti.try_number,
                        clear_number=getattr(dag_run, "clear_number", 0) or 0)


@dataclass(frozen=True)
class StartRequest:
    job: DLCJob  # rendered
    identity: TaskIdentity
    backend: str | None  # the task's backend=, None to choose
    conn_id: str | None  # the task's conn_id=
    namespace: str | None
    local_root: str | None
    base_name: str
    reuse_succeeded: bool = True
    recorded: JSONObject | None = None  # the task state store's entry, where there is one


@dataclass(frozen=True)
class Started:
    submission: Submission
    runner: JobRunner
    backend: str
    conn_id: str
    extras: JSONObject | None  # the connection's extras (None without a connection)
    secrets: JSONObject | None  # what a trigger masks (dlc_airflow.secrets.TriggerSecrets)


def start(request: StartRequest, log: Log, *, make: RunnerFactory, place: str = "") -> Started:
    """See the module docstring; `place` is said in the first log line ("started in the triggerer")."""
    from dlc_airflow.airflow.policy_source import policy_for
    from dlc_airflow.airflow.runners import choose_backend, connection_for
    from dlc_airflow.policy import enforce
    from dlc_airflow.registry import check
    from dlc_airflow.secrets.mask import register_job
    from dlc_airflow.submission import submit_or_adopt

    job = request.job
    backend, conn_id, why = choose_backend(request.backend, request.conn_id)
    log.info("DLC %s job on the %s backend (%s; %d replicas: %s)%s", job.type.value, backend, why,
             job.total_replicas(), ", ".join(f"{r}={v.replicas}" for r, v in job.roles.items()),
             f", {place}" if place else "")
    check(backend, job)  # a template may have rendered a type or option the backend cannot run
    connection, extras = connection_for(backend, conn_id)
    # the admin's policy, before anything is created (the local backend's too)
    policy, source = policy_for(backend, conn_id, connection)
    log.info("DLC policy: %s", source)
    enforce(policy, job, source)
    runner = make(backend, conn_id, request.namespace, extras=extras, local_root=request.local_root,
                  connection=connection)
    # masked before any of the job's logs reach the task log: Airflow sources (read now: a
    # missing one fails here, before anything is created), secret-looking literals, the
    # Kubernetes Secrets this identity may read
    found = register_job(job, runner, log)
    submission = submit_or_adopt(runner, job, request.identity, base_name=request.base_name,
                                 reuse_succeeded=request.reuse_succeeded, recorded=request.recorded, log=log)
    return Started(submission=submission, runner=runner, backend=backend, conn_id=conn_id, extras=extras,
                   secrets=found.to_dict() if found else None)


@dataclass(frozen=True)
class Publication:
    xcoms: JSONObject  # {XCom key: value}: the job's whereabouts, every extra link's URL
    where: JSONObject  # where the job is, for the notifiers (dlc_airflow.airflow.notify)


def publication(ref: JobRef, identity: TaskIdentity, conn_id: str, local_root: str | None,
                extras: JSONObject | None, base_url: str) -> Publication:
    """What a task publishes about its job once it exists (pure)."""
    from dlc_airflow.airflow.links import link_urls, links_xcoms

    urls = link_urls(ref, identity.dag_id, identity.run_id, identity.task_id, identity.map_index, extras,
                     base_url)
    xcoms = {XCOM_REF: {**ref.to_dict(), "conn_id": conn_id, "local_root": local_root,
                        "try_number": identity.try_number}, **links_xcoms(urls)}
    where = {"dag_id": identity.dag_id, "task_id": identity.task_id, "run_id": identity.run_id,
             "map_index": identity.map_index, "try_number": identity.try_number, "job": ref.name,
             "backend": ref.backend, "namespace": ref.place, "link": urls.get("DLC job report", "")}
    return Publication(xcoms=xcoms, where=where)


class TaskState:
    """The task state store (durable execution) under dlc-airflow's key: the job a try made,
    then its result; an extra, never a requirement (no store, or a failing one, is no store)."""

    def __init__(self, store: TaskStateStoreAccessor | None) -> None:
        self.store = store

    def recorded(self) -> JSONObject | None:
        if self.store is None:
            return None
        try:
            found = self.store.get(STATE_KEY)
        except Exception:  # noqa: BLE001 - durable execution is an extra
            return None
        return found if isinstance(found, dict) else None

    def record(self, entry: JSONObject) -> None:
        if self.store is None:
            return
        try:
            self.store.set(STATE_KEY, entry)
        except Exception:  # noqa: BLE001
            pass


# A killed try's task instance in one of these states will run again (a newer try): its job is
# left to that try, which adopts it. "running" is not one: it is also this try's own state when
# a timeout or a worker's shutdown kills it (the claim guards a newer try that runs already).
RUNS_AGAIN = frozenset({"up_for_retry", "up_for_reschedule", "scheduled", "queued", "deferred"})


def runs_again(state: str | None) -> bool:
    """Does a task instance in `state` (as read when a try is killed) run again? (pure)"""
    return state in RUNS_AGAIN


def current_state(ti: Any, timeout: float = 3.0) -> str | None:
    """The task instance's state as Airflow has it now (its newest try's); None when it cannot
    say. Asked from a thread: a kill may have interrupted the task's own call to its
    supervisor, whose lock the ask would then wait on for ever."""
    found: list[str | None] = []

    def ask() -> None:
        try:
            index = ti.map_index if ti.map_index is not None else -1
            states = ti.get_task_states(dag_id=ti.dag_id, map_index=index, task_ids=[ti.task_id],
                                        run_ids=[ti.run_id])
            key = ti.task_id if index < 0 else f"{ti.task_id}_{index}"
            found.append((states.get(ti.run_id) or {}).get(key))
        except Exception:  # noqa: BLE001 - no answer: the caller stops the job as before
            found.append(None)

    asker = threading.Thread(target=ask, name="dlc-task-state", daemon=True)
    asker.start()
    asker.join(timeout)
    state = found[0] if found else None
    return str(getattr(state, "value", state)) if state else None


@contextmanager
def failing_for_good() -> Iterator[None]:
    """Errors no retry can fix (a refused spec, a forbidden namespace, bad credentials: their
    `permanent`) fail the task at once; the others leave it to Airflow's retries."""
    from dlc_airflow.airflow.compat import AirflowFailException

    try:
        yield
    except Exception as exc:
        if getattr(exc, "permanent", False) and not isinstance(exc, AirflowFailException):
            raise AirflowFailException(str(exc)) from exc
        raise


def base_url() -> str:
    """The api-server's URL the report link points at ([api] base_url)."""
    from airflow.configuration import conf

    return conf.get("api", "base_url", fallback="") or "http://localhost:8080"
