"""DLCJobOperator: submit a DLC job (or adopt the one this task already made) and wait on it.

The Airflow concerns only: the arguments (checked at parse time), where the task runs (a
worker, a deferral, or the triggerer from the start), the XComs, the task state store, asset
events, OpenLineage and on_kill. The job's life is dlc_airflow.airflow.lifecycle's (start,
publication), the wait's (dlc_airflow.airflow.waiting, the trigger) and finish's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowException

from dlc_airflow.airflow.big_dags import StartFromTrigger
from dlc_airflow.airflow.compat import AirflowFailException, AirflowTaskTimeout
from dlc_airflow.airflow.keys import DEFAULT_CONN_ID, XCOM_REF
from dlc_airflow.airflow.links import LINKS
from dlc_airflow.airflow.retry import JobDidNotSucceed  # (raised by the operator: its home is the policy's)
from dlc_airflow.finish import OnFinish
from dlc_airflow.jobref import JobRef
from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.retrying import FAILS_FOR_GOOD
from dlc_airflow.spec import DLCJob, SpecError, parse_job

if TYPE_CHECKING:
    from airflow.sdk import Context

    from dlc_airflow.airflow.notify import Notifications
    from dlc_airflow.finish import Outcome
    from dlc_airflow.progress import Verdict
    from dlc_airflow.runner import JobRunner, Replica
    from dlc_airflow.status import JobStatus


def default_retry_policy() -> Any:
    """The retry policy of a task that gives none: DLCRetryPolicy where Airflow has retry
    policies (3.3), else none (every failure uses the task's retries)."""
    from dlc_airflow.airflow.compat import OFFERS

    if not OFFERS.retry_policy:
        return None
    from dlc_airflow.airflow.retry import DLCRetryPolicy

    return DLCRetryPolicy()


class DLCJobOperator(BaseOperator):
    """Run a DLC-style distributed job and wait for it.

    :param job: a DLCJob, a dict of its fields, or the path of a YAML/JSON spec (relative
        paths are looked up next to the DAG file). String fields may be Jinja templates.
    :param backend: native (default with a cluster), kubeflow, trainer, jobset, ray, slurm,
        pai, or local (the default when no cluster is configured).
    :param namespace: Kubernetes namespace (default: the connection's, else the kubeconfig's);
        the Slurm partition, the DLC workspace on those backends.
    :param conn_id: the connection (default: kubernetes_default when it exists). A conn_id
        that does not exist fails the task; without backend= and without any cluster
        configured, jobs run on the local backend (the task log says why).
    :param wait_for_completion: wait for the job to finish (else return once it is submitted).
    :param deferrable: wait in the triggerer, holding no worker slot (default: True, unless the
        admin sets [dlc_airflow] default_deferrable = false); False waits on a worker.
    :param stream_logs: copy the job's logs and events into the task log.
    :param queue_timeout: fail (and stop the job) if it is not running after this long
        (seconds, timedelta or '30m'), with the scheduler's reason.
    :param timeout: fail (and stop the job) if it has not finished after this long.
    :param on_finish: keep (default) or delete the job once the task has its result (also
        after `timeout` stopped it).
    :param reuse_succeeded: on a retry, take the result of this task's succeeded job instead
        of running it again (a cleared task always runs anew).
    :param notify: Airflow notifiers (BaseNotifier) told when the job starts running, restarts,
        succeeds or fails (dlc_airflow.airflow.notify: their context).
    """

    template_fields: Sequence[str] = ("job", "namespace")
    operator_extra_links = LINKS
    template_fields_renderers = {"job": "json"}
    ui_color = "#dbe9f6"

    def __init__(self, *, job: DLCJob | JSONObject | str, backend: str | None = None, namespace: str | None = None,
                 conn_id: str | None = None, wait_for_completion: bool = True,
                 deferrable: bool | None = None, stream_logs: bool = True,
                 queue_timeout: int | float | timedelta | str | None = None,
                 timeout: int | float | timedelta | str | None = None, on_finish: str | OnFinish = OnFinish.KEEP,
                 reuse_succeeded: bool = True, local_root: str | None = None,
                 notify: Sequence[Any] | None = None, start_in_triggerer: bool = True, **kwargs: Any) -> None:
        from dlc_airflow import arguments as arg
        from dlc_airflow.airflow.notify import carry_all
        from dlc_airflow.airflow.policy_source import check_at_parse_time
        from dlc_airflow.airflow.settings import default_deferrable
        from dlc_airflow.registry import check
        from dlc_airflow.spec.load import job_from

        if "retry_policy" not in kwargs and (policy := default_retry_policy()) is not None:
            kwargs["retry_policy"] = policy  # (retry_policy=None: Airflow's retries alone)
        super().__init__(**kwargs)
        # every argument is checked here, at DAG parse time: one line naming it, nothing submitted
        tid = self.task_id
        self.backend = arg.backend(backend, tid)
        self.namespace = arg.namespace(namespace, tid)
        self.conn_id = arg.conn_id(conn_id, tid)
        self.wait_for_completion = arg.flag(wait_for_completion, "wait_for_completion", tid)
        explicit_deferrable = arg.optional_flag(deferrable, "deferrable", tid)
        self.deferrable = default_deferrable() if explicit_deferrable is None else explicit_deferrable
        self.stream_logs = arg.flag(stream_logs, "stream_logs", tid)
        self.queue_timeout = arg.seconds(queue_timeout, "queue_timeout", tid)
        self.timeout = arg.seconds(timeout, "timeout", tid)
        self.on_finish = OnFinish.parse(on_finish, tid).value  # a plain str: it is serialized
        self.reuse_succeeded = arg.flag(reuse_succeeded, "reuse_succeeded", tid)
        self.local_root = arg.local_root(local_root, tid)
        self.notify = carry_all(notify, tid)
        self.start_in_triggerer = arg.flag(start_in_triggerer, "start_in_triggerer", tid)
        arg.consistent(tid, wait_for_completion=self.wait_for_completion, deferrable=explicit_deferrable,
                       on_finish_delete=self.on_finish == OnFinish.DELETE.value, timeout=self.timeout,
                       queue_timeout=self.queue_timeout)
        dag_file = self.dag.fileloc if self.has_dag() and isinstance(job, (str, os.PathLike)) else None
        spec = job_from(job, Path(dag_file).parent if dag_file else Path.cwd(), f"job of task {tid}")
        self.job = spec.to_dict()
        if self.backend is not None:
            check(self.backend, spec)  # BackendError names the backend or the type, and what to use instead
            check_at_parse_time(self.backend, spec)  # the local backend's policy (replicas of this host)
        self._start_in_triggerer_if_it_can(spec)
        # set by execute: the job, its runner, the try, what the trigger masks (references only)
        self._ref: JobRef | None = None
        self._runner: JobRunner | None = None
        self._try = 0
        self._ti: Any = None  # the running try's task instance (on_kill asks Airflow about it)
        self._conn = conn_id or DEFAULT_CONN_ID
        self._extras: JSONObject | None = None
        self._trigger_secrets: JSONObject | None = None
        self._notifications: Notifications | None = None
        # the finished job's result, kept for OpenLineage (its listener reads no XCom: it may run
        # in a forked process, where the task's channel to Airflow is not to be used)
        self._result: JSONObject | None = None

    start_from_trigger = StartFromTrigger()  # the big-DAG guard reads and writes Airflow's flag

    def _start_in_triggerer_if_it_can(self, spec: DLCJob) -> None:
        """A task that needs nothing only a worker can do starts in the triggerer: the trigger
        submits (or adopts) the job, waits, and ends the task; no worker slot at all. That is a
        deferrable task that waits for its job, whose spec has no Jinja template (the triggerer
        renders with a plain Jinja, without the DAG's macros), no outlets and no OpenLineage
        (Airflow emits both only on workers). Mapped tasks never do (Airflow sets it per class
        for them), nor a task with start_in_triggerer=False (Airflow 3.3 sends the whole
        serialized DAG with each such trigger: hundreds in one DAG swamp the triggerer), nor
        any task on Airflow 3.1 and 3.2 (dlc_airflow.airflow.compat).
        dag.test ignores it: it runs `execute`."""
        from airflow.triggers.base import StartTriggerArgs

        from dlc_airflow.airflow.compat import OFFERS
        from dlc_airflow.airflow.lineage import lineage_listener_on
        from dlc_airflow.airflow.start import backstop
        from dlc_airflow.spec.fields import templated_anywhere

        # Airflow 3.1 and 3.2 never start a task in the triggerer: it starts on a worker, then
        # defers; execute says so (self._would_start_in_triggerer)
        self._would_start_in_triggerer = False
        if not (self.deferrable and self.wait_for_completion and self.start_in_triggerer) or self.outlets \
                or lineage_listener_on() or templated_anywhere(self.job) or templated_anywhere(self.namespace):
            return
        self._would_start_in_triggerer = True
        if not OFFERS.start_from_trigger:
            return
        self.start_from_trigger = True
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls="dlc_airflow.airflow.trigger.DLCJobTrigger", next_method="execute_complete",
            timeout=backstop(self.timeout), trigger_kwargs={
                "conn_id": self.conn_id or DEFAULT_CONN_ID, "namespace": self.namespace,
                "local_root": self.local_root, "queue_timeout": self.queue_timeout, "timeout": self.timeout,
                "stream_logs": self.stream_logs, "on_finish": self.on_finish, "end_from_trigger": True,
                "notify": {"specs": self.notify, "where": {}} if self.notify else None,
                "fail_on_worker": bool(getattr(self, "retry_policy", None)),
                "start": {"job": self.job, "backend": self.backend, "conn_id": self.conn_id,
                          "base_name": spec.name or self.task_id, "reuse_succeeded": self.reuse_succeeded}})

    # -- run -----------------------------------------------------------------------------
    def execute(self, context: Context) -> Any:
        from dlc_airflow.airflow.compat import OFFERS, say_degraded
        from dlc_airflow.airflow.lifecycle import (
            StartRequest,
            TaskState,
            base_url,
            failing_for_good,
            identity_of,
            publication,
            start,
        )
        from dlc_airflow.airflow.notify import Notifications
        from dlc_airflow.airflow.runners import make_runner
        from dlc_airflow.submission import Action

        try:
            job = parse_job(self.job, source=f"job of task {self.task_id}")
        except SpecError as exc:  # a template rendered into something invalid: no retry helps
            raise AirflowFailException(str(exc)) from None
        say_degraded(self.log, "task_state_store")  # what this Airflow lacks, and the path taken instead
        if self._would_start_in_triggerer and not self.start_from_trigger:
            if OFFERS.start_from_trigger:  # the big-DAG guard chose the worker path
                self.log.info("starting on a worker, not in the triggerer: DAG %s has too many tasks that would "
                              "start there (dlc_airflow.airflow.big_dags; the DAG processor's log says so)",
                              self.dag_id)
            else:
                say_degraded(self.log, "start_from_trigger")
        ti, state = context["ti"], TaskState(context.get("task_state_store"))
        identity = identity_of(ti, context.get("dag_run"))
        self._try, self._ti = identity.try_number, ti
        request = StartRequest(job=job, identity=identity, backend=self.backend, conn_id=self.conn_id,
                               namespace=self.namespace, local_root=self.local_root,
                               base_name=job.name or self.task_id, reuse_succeeded=self.reuse_succeeded,
                               recorded=state.recorded())
        with failing_for_good():
            started = start(request, self.log, make=make_runner)
        self._runner = runner = started.runner
        self._conn, self._extras, self._trigger_secrets = started.conn_id, started.extras, started.secrets
        submission = started.submission
        if submission.action is Action.RECORDED:
            return submission.recorded_result
        ref, status = submission.ref, submission.status
        assert ref is not None and status is not None
        self._ref = ref
        state.record({**ref.to_dict(), "state": "SUBMITTED"})
        try:
            # where the job is (for sensors, the UI and other tasks) and the extra links' URLs, at once
            published = publication(ref, identity, self._conn, self.local_root, self._extras, base_url())
            for key, value in published.xcoms.items():
                ti.xcom_push(key=key, value=value)
            self._notifications = Notifications(self.notify, published.where) if self.notify else None
            return self._wait(context, runner, ref, status)
        except JobDidNotSucceed:
            raise
        except (Exception, AirflowTaskTimeout):
            # Anything that goes wrong past the submit: the job must not run on unattended.
            self._stop_after_error(runner, ref)
            raise

    def _wait(self, context: Context, runner: JobRunner, ref: JobRef, status: JobStatus) -> Any:
        from dlc_airflow.airflow.lifecycle import failing_for_good
        from dlc_airflow.airflow.waiting import wait_sync
        from dlc_airflow.finish import job_result
        from dlc_airflow.progress import terminal_verdict

        if status.terminal:  # adopted a finished job, or a very fast one: no wait, no deferral
            return self._finish(context, runner, ref, terminal_verdict(ref.name, status), [])
        if not self.wait_for_completion:
            self.log.info("not waiting for job %s (wait_for_completion=False)", ref.name)
            return job_result(ref, status, None)
        if self.deferrable:
            self._defer(ref)
        with failing_for_good():
            verdict, replicas = wait_sync(runner, ref, self.log, queue_timeout=self.queue_timeout,
                                          timeout=self.timeout, stream_logs=self.stream_logs,
                                          on_change=self._notifications.on_change if self._notifications else None)
        return self._finish(context, runner, ref, verdict, replicas)

    def _defer(self, ref: JobRef) -> None:
        from dlc_airflow.airflow.lineage import lineage_listener_on
        from dlc_airflow.airflow.start import backstop
        from dlc_airflow.airflow.trigger import DLCJobTrigger

        now = time.time()
        trigger = DLCJobTrigger(
            ref=ref.to_dict(), conn_id=self._conn, namespace=self.namespace, local_root=self.local_root,
            deadline=now + self.timeout if self.timeout else None, queue_timeout=self.queue_timeout,
            queued_since=now, stream_logs=self.stream_logs, on_finish=self.on_finish,
            # the trigger ends the task itself, unless the task has a last step on a worker (asset
            # events, the lineage listener: Airflow runs both only there)
            end_from_trigger=not self.outlets and not lineage_listener_on(), try_number=self._try,
            secrets=self._trigger_secrets, notify=self._notifications.to_dict() if self._notifications else None,
            fail_on_worker=bool(getattr(self, "retry_policy", None)),
        )
        self.defer(trigger=trigger, method_name="execute_complete", timeout=backstop(self.timeout))

    def _finish(self, context: Context, runner: JobRunner, ref: JobRef, verdict: Verdict,
                replicas: Sequence[Replica]) -> Any:
        from dlc_airflow.airflow.lifecycle import TaskState
        from dlc_airflow.finish import finish

        outcome = finish(runner, ref, verdict, replicas, on_finish=OnFinish(self.on_finish), log=self.log,
                         record=TaskState(context.get("task_state_store")).record, owner_try=self._try)
        if self._notifications is not None:
            self._notifications.final(outcome.ok, verdict.status, outcome.error)
        return self._ended(context, outcome)

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        """Back from the trigger (dag.test, and triggers that do not end the task themselves)."""
        from dlc_airflow.airflow.event import XCOMS, JobEvent
        from dlc_airflow.airflow.lifecycle import TaskState
        from dlc_airflow.airflow.runners import runner_of
        from dlc_airflow.finish import Outcome

        if isinstance(event, dict) and "dlc_start_error" in event:  # a start in the triggerer failed
            error = f"{self.task_id}: {event['dlc_start_error']}"
            if event.get("permanent"):
                raise AirflowFailException(error)
            if event.get("reason"):  # the retry policy reads it (a quota refusal)
                from dlc_airflow.errors import SubmitError

                raise SubmitError(error, reason=str(event["reason"]))
            raise AirflowException(error)
        if JobEvent.is_payload(event):
            job_event = JobEvent.from_dict(event)
            for key, value in (event.get(XCOMS) or {}).items():  # a task started in the triggerer
                context["ti"].xcom_push(key=key, value=value)
        else:  # dag.test resumes with the end event's state only: read the job itself
            ti = context["ti"]
            data = ti.xcom_pull(task_ids=self.task_id, key=XCOM_REF, map_indexes=ti.map_index)
            if not data:
                raise AirflowException(f"{self.task_id}: resumed without the job's reference")
            runner, ref = runner_of(data, conn_id=self.conn_id, namespace=self.namespace, local_root=self.local_root)
            job_event = JobEvent.from_task_end(event, ref, runner, OnFinish(self.on_finish))
        TaskState(context.get("task_state_store")).record(
            {**job_event.ref.to_dict(), "state": job_event.result.get("state"), "result": job_event.result})
        return self._ended(context, Outcome(job_event.ok, job_event.result, job_event.error))

    def _ended(self, context: Context, outcome: Outcome) -> JSONObject:
        """The task's end: its result (XCom return_value), the asset events of its outlets on
        success, and JobDidNotSucceed otherwise."""
        from dlc_airflow.pipelines.assets import announce_job

        self._result = outcome.result
        if not outcome.ok:
            error = outcome.error or f"job {outcome.result.get('job_name')} did not succeed"
            reason = str(outcome.result.get("reason") or "")
            if reason in FAILS_FOR_GOOD:  # (Airflow 3.1 and 3.2 have no retry policy to say so)
                raise AirflowFailException(error)
            raise JobDidNotSucceed(error, reason=reason,
                                   oom_retry_memory=(self.job.get("fault_tolerance") or {}).get("oom_retry_memory"))
        events = context.get("outlet_events")
        if events is not None:
            announce_job(list(self.outlets), events, outcome.result,
                         (context.get("data_interval_start"), context.get("data_interval_end")))
        return outcome.result

    # -- OpenLineage (used only when its provider is installed: dlc_airflow.airflow.lineage) --
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        from dlc_airflow.airflow.lineage import operator_lineage

        return operator_lineage(self.job, self._result)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        from dlc_airflow.airflow.lineage import operator_lineage

        return operator_lineage(self.job, None)

    # -- kill ----------------------------------------------------------------------------
    def on_kill(self) -> None:
        """The task was killed: stop its job, unless Airflow runs the task again (a restarted
        scheduler declared this try lost and queued the next, which adopts the job) or a newer
        try has adopted it already. A task marked failed or cleared, or timed out, stops it."""
        from dlc_airflow.airflow.lifecycle import current_state, runs_again
        from dlc_airflow.submission import stop_if_owner

        if self._ref is not None and self._runner is not None:
            state = current_state(self._ti) if self._ti is not None else None
            if runs_again(state):
                self.log.info("task killed; Airflow runs it again (its state is %s): job %s is left to the next "
                              "try, which adopts it", state, self._ref.name)
                return
            self.log.info("task killed (%s)", f"its state is {state}" if state else "Airflow did not say its state")
            stop_if_owner(self._runner, self._ref, self._try, self.log)

    def _stop_after_error(self, runner: JobRunner, ref: JobRef) -> None:
        from dlc_airflow.submission import stop_if_owner

        try:
            if not runner.status(ref).terminal:
                self.log.error("the task failed while job %s runs: stopping the job", ref.name)
                stop_if_owner(runner, ref, self._try, self.log)
        except Exception as exc:  # noqa: BLE001 - the task's own error is the one to report
            self.log.warning("could not stop job %s: %s", ref.name, exc)

