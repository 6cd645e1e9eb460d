"""Tasks that start in the triggerer (start_from_trigger), through the real scheduler, triggerer,
dag-processor and api-server: the trigger submits the job, waits and ends the task - no
worker ever runs it (the task instance is never queued for one) - and publishes the job's
XComs (result, where it is, the extra links) when it ends; a templated spec keeps the worker
path; a submit the admin's policy refuses fails the task at once, without retries."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

import pytest

from dlc_airflow.airflow.compat import DEGRADED, OFFERS
from tests.airflow.test_ui_browser import get
from tests.support.airflow_stack import AirflowStack
from tests.support.browser import token

pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

DAG = '''
import sys
from datetime import datetime, timezone
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator


def pull(ti):
    """What a downstream task gets from xcom_pull, as it got it (a str would stay a str)."""
    import json

    got = {{t: ti.xcom_pull(task_ids=t) for t in ("plain", "templated")}}
    got["plain.dlc_job"] = ti.xcom_pull(task_ids="plain", key="dlc_job")
    json.dump(got, open({pulled!r}, "w"))


JOB = {{"type": "batch", "image": "local", "roles": {{"worker": 2}},
       "command": [sys.executable, "-c", "import os; print('shard', os.environ['SHARD_INDEX'])"]}}
with DAG("sft", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 2}}) as dag:
    DLCJobOperator(task_id="plain", backend="local", local_root={root!r}, deferrable=True, job=JOB)
    DLCJobOperator(task_id="templated", backend="local", local_root={root!r}, deferrable=True,
                   job={{**JOB, "env": {{"RUN": "{{{{ run_id }}}}"}}}})
    DLCJobOperator(task_id="refused", backend="local", local_root={root!r}, deferrable=True,
                   job={{**JOB, "env": {{"HF_TOKEN": {{"airflow_variable": "sft_no_such_variable"}}}}}})
    [dag.task_dict["plain"], dag.task_dict["templated"]] >> PythonOperator(task_id="pull", python_callable=pull)
'''


def decoded(value):
    """An XCom value as the SQLite column holds it (JSON, of a JSON string for some writers)."""
    while isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return value


@pytest.mark.parametrize(("kwargs", "starts_in_triggerer"), [
    ({"deferrable": True}, True),
    ({"deferrable": True, "start_in_triggerer": False}, False),  # e.g. hundreds of them in one DAG
    ({"deferrable": True, "job": {"env": {"RUN": "{{ run_id }}"}}}, False),  # templated: a worker renders
    ({"deferrable": False}, False),
])
def test_which_tasks_start_in_the_triggerer(kwargs, starts_in_triggerer):
    from dlc_airflow.operators import DLCJobOperator

    job = {"type": "batch", "image": "local", "command": ["true"], **kwargs.pop("job", {})}
    op = DLCJobOperator(task_id="t", backend="local", job=job, **kwargs)
    assert op._would_start_in_triggerer is starts_in_triggerer
    assert bool(op.start_from_trigger) is (starts_in_triggerer and OFFERS.start_from_trigger)  # Airflow 3.3+


def test_a_plain_deferrable_task_never_reaches_a_worker_where_airflow_can(tmp_path):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sft.py").write_text(DAG.format(root=str(tmp_path / "jobs"), pulled=str(tmp_path / "pulled.json")))
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with AirflowStack(tmp_path / "home", dags, env={"PYTHONPATH": pythonpath},
                      components=("api-server", "scheduler", "dag-processor", "triggerer")) as stack:
        stack.wait_for_dag("sft")
        stack.airflow("dags", "unpause", "sft")
        stack.airflow("dags", "trigger", "sft")
        (run,) = stack.wait_for_runs("sft", 1, states={"success", "failed"}, timeout=600)
        tis = {r["task_id"]: r for r in stack.query(
            "SELECT task_id, state, try_number, queued_dttm, hostname FROM task_instance WHERE dag_id = 'sft'")}
        xcoms = {(r["task_id"], r["key"]): decoded(r["value"]) for r in stack.query(
            "SELECT task_id, key, value FROM xcom WHERE dag_id = 'sft'")}
        plain_log = stack.task_log("sft", run["run_id"], "plain")
        refused_log = stack.task_log("sft", run["run_id"], "refused")
        # the provider's UI plugin loaded once, cleanly, in this Airflow's api-server, and serves its pages
        base = f"http://127.0.0.1:{stack.port}"
        jwt = token(base, "admin", "any")  # SIMPLE_AUTH_MANAGER_ALL_ADMINS
        code, body = get(base, "/api/v2/plugins/importErrors", jwt)
        assert code == 200 and json.loads(body)["total_entries"] == 0, body
        plugins = json.loads(get(base, "/api/v2/plugins", jwt)[1])["plugins"]
        assert [p["name"] for p in plugins].count("dlc_airflow") == 1, plugins
        code, page = get(base, f"/dlc/runs/sft/{quote(run['run_id'], safe='')}", jwt)
        assert code == 200 and "plain" in page, page[-2000:]
    assert tis["plain"]["state"] == "success" and tis["templated"]["queued_dttm"] is not None
    assert tis["templated"]["state"] == "success"
    if OFFERS.start_from_trigger:  # started in the triggerer: never queued for a worker; the templated one was
        assert tis["plain"]["queued_dttm"] is None, tis["plain"]
        assert "started in the triggerer: no worker slot" in plain_log, plain_log[-3000:]
    else:  # Airflow 3.1, 3.2: on a worker, then deferred, and the log says so once
        assert tis["plain"]["queued_dttm"] is not None, tis["plain"]
        assert plain_log.count(DEGRADED["start_from_trigger"]) == 1, plain_log[-3000:]
    result = xcoms[("plain", "return_value")]
    assert result["state"] == "SUCCEEDED" and result["roles"]["worker"]["succeeded"] == 2
    where = xcoms[("plain", "dlc_job")]
    assert where["name"] == result["job_name"] and where["backend"] == "local" and where["try_number"] == 1
    assert xcoms[("plain", "_link_DLCJobReportLink")].endswith("/dlc/jobs/sft/" + run["run_id"].replace(":", "%3A")
                                                                .replace("+", "%2B") + "/plain")
    assert xcoms[("plain", "_link_DLCJobFolderLink")] == f"file://{tmp_path / 'jobs'}/{result['job_name']}"
    # a downstream task pulls the results of tasks the trigger ended as dicts, as from a worker
    assert tis["pull"]["state"] == "success", tis["pull"]
    pulled = json.loads((tmp_path / "pulled.json").read_text())
    assert pulled["plain"] == result and pulled["templated"]["state"] == "SUCCEEDED", pulled
    assert pulled["plain.dlc_job"] == where, pulled
    # a secret env value from a Variable that does not exist, found when the job starts: failed
    # at once, no retry (retries=2: no retry creates a Variable), nothing submitted
    assert (tis["refused"]["state"], tis["refused"]["try_number"]) == ("failed", 1), tis["refused"]
    assert "HF_TOKEN" in refused_log and "sft_no_such_variable" in refused_log, refused_log[-3000:]
    assert not [p for p in (tmp_path / "jobs").iterdir() if p.name.startswith("refused")]


BIG_DAGS = '''
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

JOB = {{"type": "batch", "image": "local", "command": ["true"]}}
for dag_id, tasks in (("sft_big", {big}), ("sft_small", 5)):
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
        for i in range(tasks):
            DLCJobOperator(task_id=f"t{{i}}", backend="local", local_root={root!r}, deferrable=True, job=JOB)
'''


def serialized_start_flags(stack: AirflowStack, dag_id: str) -> set[bool]:
    (row,) = stack.query("SELECT data FROM serialized_dag WHERE dag_id = ?", dag_id)
    tasks = decoded(row["data"])["dag"]["tasks"]
    return {bool(task["__var"].get("start_from_trigger", False)) for task in tasks}


def test_a_dag_too_big_for_the_triggerers_start_is_serialized_for_the_worker_path(tmp_path):
    """The big-DAG guard where Airflow decides: the dag-processor serializes a DAG of 250 plain
    deferrable tasks (250 x 250 > dlc_airflow.airflow.big_dags.BUDGET) with start_from_trigger
    off for every task, and says so in the DAG file's processing log; a DAG of 5 keeps it."""
    from dlc_airflow.airflow.big_dags import BUDGET, over_budget

    assert over_budget(250, 250) and not over_budget(5, 5), BUDGET
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "sft_big.py").write_text(BIG_DAGS.format(big=250, root=str(tmp_path / "jobs")))
    with AirflowStack(tmp_path / "home", dags, components=("dag-processor",)) as stack:
        stack.wait_for_dag("sft_big")
        stack.wait_for_dag("sft_small")
        assert serialized_start_flags(stack, "sft_big") == {False}
        assert serialized_start_flags(stack, "sft_small") == {OFFERS.start_from_trigger}
        said = "\n".join(path.read_text(errors="replace") for path in (stack.home / "logs").rglob("*.log"))
        said += stack.log("dag-processor")
    if OFFERS.start_from_trigger:
        assert "DAG sft_big has more tasks that would start in the triggerer" in said, said[-3000:]
    assert "DAG sft_small has" not in said
