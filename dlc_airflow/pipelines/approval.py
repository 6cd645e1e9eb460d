"""A person approves a model before it becomes the serving one: the `approval=` of
retraining_dag / training_pipeline (pure: the settings and the text the approver reads).

    retraining_dag(..., gate=Gate("accuracy", 0.9),
                   approval=Approval(timeout=timedelta(hours=24), assigned_users=["alice"]))

With an approval the pipeline's gate is three tasks:

    commit ──> gate ──> approve ──> promote ──> inference

`gate` compares the interval's metric with the threshold and the serving model and moves
nothing; `approve` (dlc_airflow.pipelines.hitl, Airflow's HITL ApprovalOperator) asks a
person when the gate would promote (it skips itself when there is nothing to approve, and
promote then does what it does without an approval); `promote` moves the pointer and emits
the model Asset event. Reject - or no answer within `timeout` - skips promote and inference
(the run succeeds; the approve task's log says who rejected, or that the time ran out), unless
on_timeout="approve".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

__all__ = ["ON_TIMEOUT", "Approval", "body_template", "subject_template"]

#: what no answer within the timeout means: the HITL request's default option
ON_TIMEOUT = {"reject": "Reject", "approve": "Approve"}


@dataclass(frozen=True)
class Approval:
    """How the promotion is approved.

    :param timeout: how long the request waits for an answer (None: forever).
    :param on_timeout: "reject" (default: the model is not promoted) or "approve".
    :param assigned_users: user ids (or {"id", "name"} dicts) who may answer; empty: anyone
        who may edit the DAG's HITL details (the auth manager decides).
    :param notify: Airflow notifiers told when the request is made (e.g. a Slack notifier
        with a link to the "Required Actions" page).
    """

    timeout: timedelta | None = timedelta(hours=24)
    on_timeout: str = "reject"
    assigned_users: Sequence[str | dict[str, str]] = ()
    notify: Any = field(default=None)

    def __post_init__(self) -> None:
        if self.timeout is not None and (not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)):
            raise ValueError(f"Approval.timeout must be a positive timedelta (e.g. timedelta(hours=24)) or None, "
                             f"not {self.timeout!r}")
        if self.on_timeout not in ON_TIMEOUT:
            raise ValueError(f"Approval.on_timeout must be 'reject' or 'approve', not {self.on_timeout!r}")
        if isinstance(self.assigned_users, (str, dict)) or not isinstance(self.assigned_users, Sequence):
            raise ValueError(f"Approval.assigned_users must be a list of user ids, not {self.assigned_users!r}")
        for user in self.assigned_users:
            if not (isinstance(user, str) and user.strip()) and not (
                    isinstance(user, dict) and isinstance(user.get("id"), str) and user["id"].strip()):
                raise ValueError(f"Approval.assigned_users: {user!r} is not a user id (a non-empty string, "
                                 "or {'id': ..., 'name': ...})")
        object.__setattr__(self, "assigned_users", tuple(self.assigned_users))
        self.notifiers()  # validates

    def users(self) -> list[dict[str, str]]:
        """The HITL request's assigned users ({"id", "name"})."""
        return [{"id": u, "name": u} if isinstance(u, str) else {"id": u["id"], "name": u.get("name") or u["id"]}
                for u in self.assigned_users]

    def notifiers(self) -> list[Any]:
        if self.notify is None:
            return []
        notifiers = list(self.notify) if isinstance(self.notify, (list, tuple)) else [self.notify]
        from airflow.sdk.bases.notifier import BaseNotifier

        for notifier in notifiers:
            if not isinstance(notifier, BaseNotifier):
                raise ValueError(f"Approval.notify must be Airflow notifiers (BaseNotifier), not {notifier!r}")
        return notifiers


def _gate(gate_task_id: str) -> str:
    return "{% set g = ti.xcom_pull(task_ids='" + gate_task_id + "') %}"


def subject_template(gate_task_id: str) -> str:
    """The request's headline, rendered from the gate task's XCom."""
    return (_gate(gate_task_id) + "Promote the {{ g.lineage }} model of {{ g.interval }}? "
            "({{ g.metric }}={{ g.value }}{% if g.serving %}, serving: {{ g.serving.value }}{% endif %})")


def body_template(gate_task_id: str, approval: Approval) -> str:
    """The request's Markdown body: the interval's metrics, the gate's verdict and the model
    it would replace - what the metric gate compared."""
    if approval.timeout is None:
        wait = "The request waits until someone answers."
    else:
        wait = (f"With no answer within {approval.timeout} the model is "
                f"{'promoted' if approval.on_timeout == 'approve' else 'not promoted'}.")
    return _gate(gate_task_id) + """\
**Lineage** `{{ g.lineage }}`, interval `{{ g.interval }}`, trained by job `{{ g.job }}`.

| metric | value |
|---|---|
{% for name, value in g.metrics | dictsort %}| {{ name }} | {{ value }} |
{% endfor %}
**Metric gate:** {{ g.reason }}.

**Serving model:** {% if g.serving %}interval `{{ g.serving.interval }}`, {{ g.serving.metric }}={{ g.serving.value }} \
(checkpoint `{{ g.serving.checkpoint }}`){% else %}none yet (this would be the first){% endif %}.

**Candidate:** checkpoint `{{ g.checkpoint }}`.

Approve: the candidate becomes the serving model (the model Asset event follows). \
Reject: nothing is promoted; this run's promote and inference are skipped. """ + wait
