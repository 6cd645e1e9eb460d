"""DLCJobOperator: submit a DLC job (or adopt the one this task already made) and wait on it."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk import BaseOperator

from dlc_airflow.spec import DLCJob, SpecError, load_job, parse_duration, parse_job

if TYPE_CHECKING:
    from airflow.sdk import Context

    from dlc_airflow.k8s.runner import JobRef
    from dlc_airflow.status import JobStatus

STATE_KEY = "dlc_job"  # task state store key (durable execution, Airflow 3.3+)
XCOM_REF = "dlc_job"  # XCom key of the job's whereabouts (pushed as soon as it exists)


def _default_deferrable() -> bool:
    from airflow.configuration import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


class DLCJobOperator(BaseOperator):
    """Run a DLC-style distributed job and wait for it.

    :param job: a DLCJob, a dict of its fields, or the path of a YAML/JSON spec (relative
        paths are looked up next to the DAG file). String fields may be Jinja templates.
    :param backend: native (default with a cluster), kubeflow, trainer, jobset, ray, or local
        (the default when no cluster is configured).
    :param namespace: Kubernetes namespace (default: the connection's, else the kubeconfig's).
    :param conn_id: the cncf.kubernetes connection (kubernetes_default).
    :param wait_for_completion: wait for the job to finish (else return once it is submitted).
    :param deferrable: wait in the triggerer (default: [operators] default_deferrable).
    :param stream_logs: copy the job's pod logs and Kubernetes Events into the task log.
    :param queue_timeout: fail (and stop the job) if it is not running after this long
        (seconds, timedelta or '30m'), with the scheduler's reason.
    :param timeout: fail (and stop the job) if it has not finished after this long.
    :param on_finish: keep (default) or delete the job's objects once the task has its result.
    :param reuse_succeeded: on a retry, take the result of this task's succeeded job instead
        of running it again (a cleared task always runs anew).
    """

    template_fields: Sequence[str] = ("job", "namespace")
    template_fields_renderers = {"job": "json"}
    ui_color = "#dbe9f6"

    def __init__(self, *, job: DLCJob | dict | str, backend: str | None = None, namespace: str | None = None,
                 conn_id: str = "kubernetes_default", wait_for_completion: bool = True,
                 deferrable: bool | None = None, stream_logs: bool = True,
                 queue_timeout: int | float | timedelta | str | None = None,
                 timeout: int | float | timedelta | str | None = None, on_finish: str = "keep",
                 reuse_succeeded: bool = True, local_root: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        spec = _load(job, self)
        self.job = spec.to_dict()
        self.backend = backend
        self.namespace = namespace
        self.conn_id = conn_id
        self.wait_for_completion = wait_for_completion
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.stream_logs = stream_logs
        self.queue_timeout = _seconds(queue_timeout, "queue_timeout")
        self.timeout = _seconds(timeout, "timeout")
        if on_finish not in ("keep", "delete"):
            raise ValueError(f"{self.task_id}: on_finish must be 'keep' or 'delete', not {on_finish!r}")
        self.on_finish = on_finish
        self.reuse_succeeded = reuse_succeeded
        self.local_root = local_root
        self._check_backend(spec)
        self._ref: JobRef | None = None
        self._runner: Any = None

    # -- parse-time checks ---------------------------------------------------------------
    def _check_backend(self, spec: DLCJob) -> None:
        from dlc_airflow.airflow.runners import BACKENDS, LOCAL

        if self.backend is None or self.backend == LOCAL:
            if self.backend is not None and self.backend not in BACKENDS:
                raise ValueError(f"{self.task_id}: unknown backend {self.backend!r}")
            return
        from dlc_airflow.backends import get_backend

        get_backend(self.backend).check(spec)  # BackendError names the type and what to use

    # -- run -----------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        from dlc_airflow.airflow.runners import make_runner, resolve_backend
        from dlc_airflow.airflow.waiting import job_result, wait_sync

        job = self._rendered_job()
        backend = resolve_backend(self.backend, self.conn_id)
        self.log.info("DLC %s job on the %s backend (%d replicas: %s)", job.type.value, backend,
                      job.total_replicas(), ", ".join(f"{r}={v.replicas}" for r, v in job.roles.items()))
        self._runner = runner = make_runner(backend, self.conn_id, self.namespace, local_root=self.local_root)
        ref, status, cached = self._submit_or_adopt(runner, job, context)
        if cached is not None:
            return cached
        self._ref = ref
        context["ti"].xcom_push(key=XCOM_REF, value=ref.to_dict())
        if status.terminal:  # adopted a finished job, or a very fast one: no wait, no deferral
            return self._finish(context, runner, ref, status, [])
        if not self.wait_for_completion:
            self.log.info("not waiting for job %s (wait_for_completion=False)", ref.name)
            return job_result(ref, status, {})
        if self.deferrable:
            self._defer(ref)
        verdict, pods = wait_sync(runner, ref, self.log, queue_timeout=self.queue_timeout,
                                  timeout=self.timeout, stream_logs=self.stream_logs)
        return self._conclude(context, runner, ref, verdict, pods)

    def _defer(self, ref: JobRef) -> None:
        from dlc_airflow.airflow.trigger import DLCJobTrigger

        now = time.time()
        trigger = DLCJobTrigger(
            ref=ref.to_dict(), conn_id=self.conn_id, namespace=self.namespace, local_root=self.local_root,
            deadline=now + self.timeout if self.timeout else None, queue_timeout=self.queue_timeout,
            queued_since=now, stream_logs=self.stream_logs, on_finish=self.on_finish,
            end_from_trigger=True,
        )
        # Airflow does not enforce execution_timeout while deferred: the trigger enforces
        # `timeout` itself (stopping the job); this backstop only ends a wedged trigger.
        backstop = timedelta(seconds=self.timeout + 300) if self.timeout else None
        self.defer(trigger=trigger, method_name="execute_complete", timeout=backstop)

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        """Back from the trigger (dag.test and end_from_trigger=False land here)."""
        from dlc_airflow.airflow.runners import make_runner
        from dlc_airflow.airflow.waiting import job_result
        from dlc_airflow.k8s.runner import JobRef

        if isinstance(event, dict) and "ref" in event:
            ref = JobRef.from_dict(event["ref"])
            if event.get("error"):
                raise AirflowException(event["error"])
            return event.get("result")
        # A TaskSuccessEvent/TaskFailedEvent payload ("success"/"failed") when run inline
        # by dag.test: the job is where the trigger left it; read its final state.
        data = context["ti"].xcom_pull(task_ids=self.task_id, key=XCOM_REF, map_indexes=context["ti"].map_index)
        if not data:
            raise AirflowException(f"{self.task_id}: resumed without the job's reference")
        ref = JobRef.from_dict(data)
        if str(event).lower().startswith("fail"):
            raise AirflowException(f"job {ref.name} did not succeed (see the trigger's log above)")
        runner = make_runner(ref.backend, self.conn_id, self.namespace, local_root=self.local_root)
        status = runner.status(ref)
        if status.state.value == "SUCCEEDED":
            return job_result(ref, status, runner.outputs(ref))
        if self.on_finish == "delete" and status.reason == "NotFound":
            # the trigger took the result and deleted the job, as asked
            from dlc_airflow.status import JobState

            return job_result(ref, status.model_copy(update={"state": JobState.SUCCEEDED, "message": ""}), {})
        raise AirflowException(f"job {ref.name} did not succeed: {status.summary()}")

    def _conclude(self, context: Context, runner: Any, ref: JobRef, verdict: Any, pods: list[dict]) -> Any:
        if verdict.kind != "finished":
            self.log.error("%s; stopping the job", verdict.message)
            runner.stop(ref)
            raise AirflowException(verdict.message)
        return self._finish(context, runner, ref, verdict.status, pods)

    def _finish(self, context: Context, runner: Any, ref: JobRef, status: JobStatus, pods: list[dict]) -> Any:
        from dlc_airflow.airflow.waiting import job_result

        result = job_result(ref, status, runner.outputs(ref, pods=pods or None))
        self._record(context, ref, status.state.value, result)
        for name in runner.settle(ref):
            self.log.info("stopped %s: still running after the job finished", name)
        if self.on_finish == "delete":
            self.log.info("deleting job %s (on_finish='delete')", ref.name)
            runner.stop(ref)
        if status.state.value != "SUCCEEDED":
            raise AirflowException(f"job {ref.name} {status.state.value.lower()}: {status.reason} "
                                   f"{('- ' + status.message) if status.message else ''}".strip())
        self.log.info("job %s succeeded (queued %ss, ran %ss, %d restarts)", ref.name,
                      _round(result["queued_seconds"]), _round(result["running_seconds"]), status.restarts)
        return result

    # -- idempotency ---------------------------------------------------------------------
    def _submit_or_adopt(self, runner: Any, job: DLCJob, context: Context) -> tuple[JobRef, JobStatus, Any]:
        """Adopt this task instance's live job, take a succeeded one's result, or submit the
        next attempt after a failed one. Never two live jobs for one task instance."""
        from dlc_airflow.k8s.runner import OwnershipError, SubmitError
        from dlc_airflow.naming import job_name

        identity = self._identity(context)
        store = context.get("task_state_store")
        kind = runner.backend.kind(job) if hasattr(runner, "backend") else None
        existing = runner.find(identity, kind)
        recorded = _get(store, STATE_KEY)
        attempt = 1
        if existing:
            newest = existing[-1]
            status = runner.status(newest)
            if not status.terminal:
                self.log.info("adopting job %s (attempt %d), which this task started earlier: %s",
                              newest.name, newest.attempt, status.summary())
                return newest, status, None
            if status.state.value == "SUCCEEDED" and self.reuse_succeeded:
                self.log.info("job %s (attempt %d) already succeeded: taking its result", newest.name, newest.attempt)
                return newest, status, None
            self.log.warning("job %s (attempt %d) ended %s; submitting attempt %d", newest.name,
                             newest.attempt, status.summary(), newest.attempt + 1)
            attempt = newest.attempt + 1
        elif recorded:
            # The job itself is gone (deleted, or TTL); the store remembers how it went.
            if recorded.get("state") == "SUCCEEDED" and self.reuse_succeeded and recorded.get("result"):
                self.log.info("job %s already succeeded (recorded in the task state store)", recorded.get("name"))
                return None, None, recorded["result"]  # type: ignore[return-value]
            attempt = int(recorded.get("attempt", 0)) + 1
        name = job_name(job.name or self.task_id, identity, attempt)
        try:
            ref, created = runner.submit(job, name, identity, attempt)
        except OwnershipError as exc:
            raise AirflowFailException(str(exc)) from exc
        except SubmitError as exc:
            cause = exc.__cause__
            permanent = getattr(cause, "status", 0) in (400, 403, 404, 422)
            raise (AirflowFailException if permanent else AirflowException)(str(exc)) from exc
        _set(store, STATE_KEY, {**ref.to_dict(), "state": "SUBMITTED"})
        self.log.info("%s job %s (attempt %d) in %s", "submitted" if created else "adopted", ref.name,
                      attempt, ref.namespace)
        return ref, runner.status(ref), None

    def _identity(self, context: Context):
        from dlc_airflow.naming import TaskIdentity

        ti = context["ti"]
        dag_run = context.get("dag_run")
        return TaskIdentity(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id,
                            map_index=ti.map_index if ti.map_index is not None else -1,
                            try_number=ti.try_number, clear_number=getattr(dag_run, "clear_number", 0) or 0)

    def _record(self, context: Context, ref: JobRef, state: str, result: dict) -> None:
        _set(context.get("task_state_store"), STATE_KEY, {**ref.to_dict(), "state": state, "result": result})

    def _rendered_job(self) -> DLCJob:
        try:
            return parse_job(self.job, source=f"job of task {self.task_id}")
        except SpecError as exc:  # a template rendered into something invalid: no retry helps
            raise AirflowFailException(str(exc)) from None

    # -- kill ----------------------------------------------------------------------------
    def on_kill(self) -> None:
        if self._ref is not None and self._runner is not None:
            self.log.info("task killed: stopping job %s", self._ref.name)
            self._runner.stop(self._ref)


def _load(job: DLCJob | dict | str | os.PathLike, op: BaseOperator) -> DLCJob:
    if isinstance(job, (str, os.PathLike)):
        path = Path(job)
        if not path.is_absolute():
            dag = getattr(op, "dag", None)
            base = Path(dag.fileloc).parent if dag is not None and getattr(dag, "fileloc", None) else Path.cwd()
            path = base / path
        return load_job(path)
    return parse_job(job, source=f"job of task {op.task_id}")


def _seconds(value: Any, what: str) -> float | None:
    duration = parse_duration(value, what)
    return duration.total_seconds() if duration is not None else None


def _round(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _get(store: Any, key: str) -> Any:
    if store is None:
        return None
    try:
        return store.get(key)
    except Exception:  # noqa: BLE001 - durable execution is an extra, not a requirement
        return None


def _set(store: Any, key: str, value: Any) -> None:
    if store is None:
        return
    try:
        store.set(key, value)
    except Exception:  # noqa: BLE001
        pass
