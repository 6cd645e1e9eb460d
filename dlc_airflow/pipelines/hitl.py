"""The approve task of a pipeline with an approval (dlc_airflow.pipelines.approval): Airflow's
HITL ApprovalOperator (the standard provider's), asked only when the metric gate would promote.

Imported only when a DAG asks for an approval: `approval_operator()` says at DAG parse time,
in one line, when the installed standard provider cannot do it (no HITL before Airflow 3.1,
or a provider without `response_timeout` / `assigned_users` / `notifiers`).
"""

from __future__ import annotations

import inspect
from typing import Any

from dlc_airflow.airflow.compat import AirflowSkipException
from dlc_airflow.pipelines.approval import ON_TIMEOUT, Approval, body_template, subject_template

__all__ = ["NEEDS", "approval_operator", "check_support"]

# what the approve task passes to HITLOperator; each came in some release of the standard provider
NEEDS = ("response_timeout", "assigned_users", "notifiers", "defaults")
_UPGRADE = "upgrade it: pip install -U apache-airflow-providers-standard (needs Airflow 3.1+)"


def check_support(hitl_module: Any = None) -> Any:
    """The provider's ApprovalOperator, or ValueError naming what is missing."""
    if hitl_module is None:
        try:
            import airflow.providers.standard.operators.hitl as hitl_module
        except Exception as exc:  # noqa: BLE001 - ImportError, or the provider's "needs Airflow 3.1+"
            raise ValueError(f"approval= needs Airflow's human-in-the-loop operators "
                             f"(airflow.providers.standard.operators.hitl), which do not load here ({exc}): "
                             f"{_UPGRADE}") from None
    base = getattr(hitl_module, "HITLOperator", None)
    operator = getattr(hitl_module, "ApprovalOperator", None)
    if base is None or operator is None:
        raise ValueError(f"approval= needs the standard provider's ApprovalOperator, which this one lacks: {_UPGRADE}")
    accepted = inspect.signature(base.__init__).parameters
    missing = [name for name in NEEDS if name not in accepted]
    if missing:
        raise ValueError(f"approval= needs HITLOperator's {', '.join(missing)}, which the installed standard "
                         f"provider lacks: {_UPGRADE}")
    return operator


def approval_operator(approval: Approval, *, task_id: str, gate_task_id: str, **kwargs: Any) -> Any:
    """The approve task: a person approves or rejects what `gate_task_id` would promote."""
    base = check_support()

    class PromotionApproval(base):  # type: ignore[misc, valid-type]
        """Asks only when the gate would promote; says in its log what was decided."""

        ui_color = "#fde9c8"

        def execute(self, context: Any) -> Any:
            verdict = context["ti"].xcom_pull(task_ids=gate_task_id) or {}
            if not verdict.get("promotes"):
                raise AirflowSkipException(f"interval {verdict.get('interval')}: nothing to approve "
                                           f"({verdict.get('reason')}); promote decides without an approval")
            return super().execute(context)

        def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
            verdict = context["ti"].xcom_pull(task_ids=gate_task_id) or {}
            chosen = (event.get("chosen_options") or [None])[0]
            user = event.get("responded_by_user") or {}
            done = {base.APPROVE: "approved", base.REJECT: "rejected"}.get(chosen, str(chosen))
            who = (f"no answer within {approval.timeout}: {done} by default (on_timeout={approval.on_timeout!r})"
                   if event.get("timedout") or not user else f"{done} by {user.get('name') or user.get('id')}")
            outcome = ("promote runs" if chosen == base.APPROVE
                       else "not promoted: promote and inference are skipped, the serving model stays")
            if "error" not in event:
                self.log.info("interval %s: %s; %s", verdict.get("interval"), who, outcome)
            return super().execute_complete(context, event)

    PromotionApproval.__name__ = PromotionApproval.__qualname__ = "PromotionApproval"
    return PromotionApproval(
        task_id=task_id,
        subject=subject_template(gate_task_id),
        body=body_template(gate_task_id, approval),
        defaults=[ON_TIMEOUT[approval.on_timeout]],
        response_timeout=approval.timeout,
        assigned_users=approval.users() or None,
        notifiers=approval.notifiers(),
        **kwargs,
    )
