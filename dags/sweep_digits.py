"""(b) A hyperparameter sweep with dynamic task mapping: one DDP training job per learning
rate (DLCJobOperator.partial(...).expand(job=...)), then the best by test accuracy.

The data is preprocessed once (the arrivals of the first three days); every mapped job
trains from scratch into a checkpoint folder of its own.
"""

import os
import sys
from datetime import UTC, datetime

# retraining/ (the job specs and code) sits beside this file; Airflow puts the dags folder on
# sys.path, a DagBag over another folder does not.
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from airflow.sdk import DAG, task
from dlc_airflow.operators import DLCJobOperator
from retraining import digits_jobs, storage_root

ROOT = storage_root() + "/sweep"
LEARNING_RATES = [0.01, 0.05, 0.2]
WINDOW = {"DLC_INTERVAL_START": "2026-01-01T00:00:00+00:00", "DLC_INTERVAL_END": "2026-01-04T00:00:00+00:00",
          "DLC_INTERVAL_KEY": "sweep"}
DATA = f"{ROOT}/data"


def trial(lr: float) -> dict:
    job = digits_jobs(ROOT, lr=lr)["train"].to_dict()
    job["env"].update(WINDOW, DLC_DATA_URI=DATA)
    job["checkpoint"] = {"uri": f"{ROOT}/checkpoints/lr-{lr:g}", "keep_last": 1}
    return job


with DAG("sweep_digits", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC),
         tags=["dlc-airflow", "sweep"], default_args={"retries": 0}) as dag:
    pre = digits_jobs(ROOT)["preprocess"].to_dict()
    pre["env"] = {**pre.get("env", {}), **WINDOW, "DLC_OUTPUT_URI": DATA}
    preprocess = DLCJobOperator(task_id="preprocess", job=pre, backend="local")
    trials = DLCJobOperator.partial(task_id="train", backend="local").expand(
        job=[trial(lr) for lr in LEARNING_RATES])

    @task
    def best(results: list[dict]) -> dict:
        scored = sorted(results, key=lambda r: r["metrics"].get("accuracy", 0.0), reverse=True)
        for r in scored:
            print(f"{r['job_name']}: accuracy {r['metrics'].get('accuracy')}, checkpoint {r['outputs'].get('checkpoint')}")
        top = scored[0]
        return {"job_name": top["job_name"], "accuracy": top["metrics"].get("accuracy"),
                "checkpoint": top["outputs"].get("checkpoint")}

    preprocess >> trials
    best(trials.output)
