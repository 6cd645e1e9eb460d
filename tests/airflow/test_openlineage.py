"""OpenLineage through real Airflow: with apache-airflow-providers-openlineage configured (its
file transport), a DLCJobOperator task's COMPLETE event names the data it read (the pipeline's
DLC_DATA_URI, the checkpoint it resumed from) and what it wrote (DLC_OUTPUT_URI, its checkpoint
folder, the URIs it reported), sync and deferred (a deferred task then resumes on a worker:
the provider's listener runs only there). In a subprocess: the provider reads its
configuration once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

SCRIPT = textwrap.dedent('''
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("ol_dag", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    run = module.dag.test()
    # one write of a whole line: the OpenLineage listener's process logs to the same pipe
    sys.stdout.write("STATE " + str(run.get_task_instance('train').state) + "\\n")
    sys.stdout.flush()
''')

DAG = '''
import sys
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

REPORT = "from dlc_airflow.runtime import report_output; report_output('model_uri', 's3://models/digits/7')"
with DAG({dag_id!r}, schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)) as dag:
    DLCJobOperator(task_id="train", backend="local", local_root={root!r}, deferrable={deferrable!r}, job={{
        "type": "custom", "image": "local", "roles": {{"main": 1}}, "command": [sys.executable, "-c", REPORT],
        "env": {{"DLC_DATA_URI": "s3://lake/digits/data/20260101", "DLC_OUTPUT_URI": "file:///srv/out/20260101"}},
        "checkpoint": {{"uri": "s3://ckpt/digits/20260101", "path": {ckpt!r},
                        "resume_from": "s3://ckpt/digits/20251231/step-9"}},
    }})
'''


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_the_complete_event_names_inputs_and_outputs(airflow_db, tmp_path, deferrable):
    dag_id = f"ol_{uuid.uuid4().hex[:8]}"
    dag_file = airflow_db / "dags" / f"{dag_id}.py"
    dag_file.write_text(DAG.format(dag_id=dag_id, root=str(tmp_path / "jobs"), deferrable=deferrable,
                                   ckpt=str(tmp_path / "ckpt")))
    events = tmp_path / "events.jsonl"
    env = {**os.environ, "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": str(events), "append": True}), "AIRFLOW__OPENLINEAGE__NAMESPACE": "dlc-test"}
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(dag_file)], env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        dag_file.unlink(missing_ok=True)
    assert "STATE success" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    sent = [json.loads(line) for line in events.read_text().splitlines()]
    complete = [e for e in sent if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".train")]
    assert len(complete) == 1, ([(e["eventType"], e["job"]["name"]) for e in sent], done.stdout[-3000:])
    inputs = {(d["namespace"], d["name"]) for d in complete[0]["inputs"]}
    outputs = {(d["namespace"], d["name"]) for d in complete[0]["outputs"]}
    assert inputs == {("s3://lake", "digits/data/20260101"), ("s3://ckpt", "digits/20251231/step-9")}
    assert outputs == {("file", "/srv/out/20260101"), ("s3://ckpt", "digits/20260101"), ("s3://models", "digits/7")}
