"""DLCJobSensor: wait on a DLC job made elsewhere, by name or by the task that made it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.bases.sensor import BaseSensorOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from dlc_airflow.k8s.runner import JobRef


class DLCJobSensor(BaseSensorOperator):
    """Succeed when a DLC job has succeeded; fail as soon as it has failed or was stopped.

    Give either `job_name` (with `backend`, and `job_type` for the kubeflow backend, whose
    kind depends on it) or `task_id_of_job`: the DLCJobOperator task that made the job (its
    XCom `dlc_job` says where the job is; mapped tasks: the same map index).
    Modes: poke, reschedule, and deferrable=True (waits in the triggerer on a shared watch).
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "task_id_of_job")

    def __init__(self, *, job_name: str | None = None, task_id_of_job: str | None = None,
                 backend: str = "native", job_type: str = "custom", namespace: str | None = None,
                 conn_id: str = "kubernetes_default", deferrable: bool | None = None,
                 local_root: str | None = None, **kwargs: Any) -> None:
        from dlc_airflow.operators.job import _default_deferrable

        super().__init__(**kwargs)
        if bool(job_name) == bool(task_id_of_job):
            raise ValueError(f"{self.task_id}: give exactly one of job_name or task_id_of_job")
        self.job_name = job_name
        self.task_id_of_job = task_id_of_job
        self.backend = backend
        self.job_type = job_type
        self.namespace = namespace
        self.conn_id = conn_id
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.local_root = local_root

    def _runner_and_ref(self, context: Context) -> tuple[Any, JobRef]:
        from dlc_airflow.airflow.runners import LOCAL, make_runner
        from dlc_airflow.k8s.runner import JobRef

        if self.task_id_of_job:
            ti = context["ti"]
            data = ti.xcom_pull(task_ids=self.task_id_of_job, key="dlc_job", map_indexes=ti.map_index)
            if not data:
                raise AirflowException(f"task {self.task_id_of_job!r} has not submitted a job (no XCom 'dlc_job')")
            ref = JobRef.from_dict(data)
            return make_runner(ref.backend, self.conn_id, self.namespace or ref.namespace,
                               local_root=self.local_root), ref
        runner = make_runner(self.backend, self.conn_id, self.namespace, local_root=self.local_root)
        if self.backend == LOCAL:
            return runner, runner.ref(self.job_name)
        from dlc_airflow.spec import DLCJob

        probe = DLCJob(type=self.job_type, image="probe", command=["probe"])
        return runner, runner.ref(probe, self.job_name)

    def poke(self, context: Context) -> bool:
        runner, ref = self._runner_and_ref(context)
        status = runner.status(ref)
        self.log.info("job %s: %s", ref.name, status.summary())
        if not status.terminal:
            return False
        if status.state.value != "SUCCEEDED":
            raise AirflowFailException(f"job {ref.name} {status.state.value.lower()}: {status.reason} {status.message}".strip())
        return True

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from dlc_airflow.airflow.trigger import DLCJobTrigger

        runner, ref = self._runner_and_ref(context)
        status = runner.status(ref)
        if status.terminal:  # look before deferring
            return self.execute_complete(context, {"state": status.state.value, "summary": status.summary()})
        now = time.time()
        self.defer(
            trigger=DLCJobTrigger(ref=ref.to_dict(), conn_id=self.conn_id, namespace=self.namespace,
                                  local_root=self.local_root, deadline=now + self.timeout if self.timeout else None,
                                  stream_logs=False, end_from_trigger=False),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + 300) if self.timeout else None,
        )

    def execute_complete(self, context: Context, event: Any = None) -> Any:
        if isinstance(event, dict) and "result" in event:
            if event.get("error"):
                raise AirflowFailException(event["error"])
            return event["result"]
        if isinstance(event, dict) and event.get("state") == "SUCCEEDED":
            return None
        raise AirflowFailException(f"job did not succeed: {event}")
