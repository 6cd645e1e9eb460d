"""DLCJobSensor: wait on a DLC job made elsewhere, by name or by the task that made it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.bases.sensor import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from dlc_airflow.airflow.compat import AirflowFailException
from dlc_airflow.airflow.keys import DEFAULT_CONN_ID, XCOM_REF
from dlc_airflow.arguments import ArgumentError
from dlc_airflow.jobref import JobRef

if TYPE_CHECKING:
    from airflow.sdk import DAG, Context

    from dlc_airflow.runner import JobRunner


class DLCJobSensor(BaseSensorOperator):
    """Succeed when a DLC job has succeeded; fail as soon as it has failed or was stopped.

    Give either `job_name` (with `backend`) or `task_id_of_job`: the DLCJobOperator task
    that made the job (its XCom `dlc_job` says where the job is; mapped tasks: the same
    map index). Modes: poke, reschedule, and deferrable=True (waits in the triggerer on a
    shared watch). The sensor only watches: it never stops or deletes the job. Its XCom is
    the job's result, as the operator's.

    With `task_id_of_job`, the sensor is made downstream of that task of its own DAG,
    whichever of the two is created first: at once when the task is already in the DAG,
    else when the DAG is validated (Airflow does so before it runs or stores a DAG: the
    dag-processor, the worker's parse, `dag.test()`). No dependency can be added when
    `task_id_of_job` is a Jinja template, names no task of the DAG, or the sensor is
    mapped (`.partial().expand()`): then set `job_task >> sensor` yourself.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "task_id_of_job")

    def __init__(self, *, job_name: str | None = None, task_id_of_job: str | None = None,
                 backend: str = "native", namespace: str | None = None,
                 conn_id: str = DEFAULT_CONN_ID, deferrable: bool | None = None,
                 local_root: str | None = None, **kwargs: Any) -> None:
        from dlc_airflow import arguments as arg
        from dlc_airflow.airflow.settings import default_deferrable

        # before BaseSensorOperator reads them: it takes True as 1 second, and its own
        # messages name neither the task nor what to write
        tid = str(kwargs.get("task_id"))
        arg.sensor_timing(kwargs, tid)
        super().__init__(**kwargs)
        tid = self.task_id
        if bool(job_name) == bool(task_id_of_job):
            raise arg.ArgumentError(f"{tid}: give exactly one of job_name or task_id_of_job")
        self.job_name = arg.job_name(job_name, tid)
        self.task_id_of_job = arg.task_id(task_id_of_job, "task_id_of_job", tid)
        self.backend = arg.backend_name(backend, tid)
        self.namespace = arg.namespace(namespace, tid)
        self.conn_id = arg.conn_id(conn_id, tid) or DEFAULT_CONN_ID
        explicit_deferrable = arg.optional_flag(deferrable, "deferrable", tid)
        if explicit_deferrable and self.mode == "reschedule":
            raise arg.ArgumentError(f"{tid}: deferrable=True waits in the triggerer, mode='reschedule' on a worker: "
                                    "choose one of them")
        # mode='reschedule' frees the worker slot between pokes on its own: it never defers unasked
        self.deferrable = explicit_deferrable if explicit_deferrable is not None \
            else self.mode != "reschedule" and default_deferrable()
        self.local_root = arg.local_root(local_root, tid)
        # (not when a mapped sensor is expanded at run time: its DAG was linked when parsed)
        from_mapped = getattr(self, "_BaseOperator__from_mapped", False)
        if self.task_id_of_job and not arg.is_templated(self.task_id_of_job) and self.has_dag() and not from_mapped:
            _depend_on_job_task(self)

    def _link_job_task(self) -> bool:
        """Make this sensor downstream of `task_id_of_job` when that task is in its DAG
        (True); False when it is not there (yet)."""
        job_task = self.dag.task_dict.get(self.task_id_of_job or "")
        if job_task is None:
            return False
        if job_task is self:
            raise ArgumentError(f"{self.task_id}: task_id_of_job names the sensor itself; name the DLCJobOperator "
                                "task that makes the job")
        if job_task.task_id in self.get_flat_relative_ids(upstream=False):
            raise ArgumentError(f"{self.task_id}: task_id_of_job {job_task.task_id!r} is downstream of the sensor, "
                                "so its job cannot exist yet when the sensor runs; put the sensor after it")
        self.set_upstream(job_task)
        return True

    def _runner_and_ref(self, context: Context) -> tuple[JobRunner, JobRef]:
        from dlc_airflow.airflow.runners import make_runner, runner_of

        if self.task_id_of_job:
            ti = context["ti"]
            data = ti.xcom_pull(task_ids=self.task_id_of_job, key=XCOM_REF, map_indexes=ti.map_index)
            if not data:
                raise AirflowException(f"task {self.task_id_of_job!r} has not submitted a job (no XCom {XCOM_REF!r})")
            return runner_of(data, conn_id=self.conn_id, namespace=self.namespace, local_root=self.local_root)
        runner = make_runner(self.backend, self.conn_id, self.namespace, local_root=self.local_root)
        found = runner.lookup(self.job_name or "")
        if found is None:
            raise AirflowException(f"no {self.backend} job {self.job_name!r} in {runner.place} "
                                   "(not submitted yet, or deleted)")
        return runner, found

    def poke(self, context: Context) -> bool | PokeReturnValue:
        from dlc_airflow.finish import OnFinish, finish
        from dlc_airflow.progress import terminal_verdict

        runner, ref = self._runner_and_ref(context)
        status = runner.status(ref)
        self.log.info("job %s: %s", ref.name, status.summary())
        if not status.terminal:
            return False
        outcome = finish(runner, ref, terminal_verdict(ref.name, status), None, on_finish=OnFinish.KEEP,
                         log=self.log, owner_try=None)
        if not outcome.ok:
            raise AirflowFailException(outcome.error)
        return PokeReturnValue(is_done=True, xcom_value=outcome.result)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from dlc_airflow.airflow.start import backstop
        from dlc_airflow.airflow.trigger import DLCJobTrigger

        runner, ref = self._runner_and_ref(context)
        if runner.status(ref).terminal:  # look before deferring
            done = self.poke(context)
            return done.xcom_value if isinstance(done, PokeReturnValue) else None
        now = time.time()
        self.defer(
            trigger=DLCJobTrigger(ref=ref.to_dict(), conn_id=self.conn_id, namespace=self.namespace,
                                  local_root=self.local_root, deadline=now + self.timeout if self.timeout else None,
                                  stream_logs=False, end_from_trigger=False),
            method_name="execute_complete",
            timeout=backstop(self.timeout),
        )

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        from dlc_airflow.airflow.event import JobEvent

        job_event = JobEvent.from_dict(event)
        if not job_event.ok:
            raise AirflowFailException(job_event.error)
        return job_event.result


class _LinkOnValidate:
    """Replaces `validate` on one DAG object: first links the sensors whose job task was not
    in the DAG when they were made, then validates as before. A callable object, not a
    closure, so a deep copy of the DAG (partial_subset) links its own copies of the tasks."""

    def __init__(self, dag: DAG, validate: Any) -> None:
        self.dag = dag
        self.validate = validate
        self.sensors: list[DLCJobSensor] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        waiting, self.sensors = self.sensors, []
        for sensor in waiting:
            if not sensor._link_job_task():
                self.sensors.append(sensor)  # still not there: a later validate may find it
        return self.validate(*args, **kwargs)


def _depend_on_job_task(sensor: DLCJobSensor) -> None:
    """Downstream of its job task now, or when the DAG is validated if the task comes later."""
    if sensor._link_job_task():
        return
    dag = sensor.dag
    hook = vars(dag).get("validate")
    if not isinstance(hook, _LinkOnValidate) or hook.dag is not dag:
        hook = _LinkOnValidate(dag, dag.validate)
        # the DAG class is not slotted: an instance attribute shadows the method for this DAG only
        object.__setattr__(dag, "validate", hook)
    hook.sensors.append(sensor)
