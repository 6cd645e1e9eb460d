"""(a) Incremental retraining of a digits classifier, daily, on the local backend.

Each daily run processes the samples that arrived in its data interval: preprocess (2 shards)
-> PyTorch DDP training (2 workers, gloo, CPU) resuming from the previous interval's
checkpoint -> batch inference (2 shards) with the promoted model. `make demo` runs three
intervals of it. Backfill: `airflow backfill create --dag-id retraining_digits
--from-date 2026-01-01 --to-date 2026-01-04 --reprocess-behavior failed` (Airflow
asks for a reprocess behaviour when tasks depend on the past).
"""

import os
import sys
from datetime import timedelta

# retraining/ (the job specs and code) sits beside this file; Airflow puts the dags folder on
# sys.path, a DagBag over another folder does not.
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from retraining import START, digits_jobs, storage_root

from dlc_airflow.pipelines import Gate, retraining_dag

ROOT = storage_root()

dag = retraining_dag(
    "retraining_digits",
    cadence="@daily",
    start_date=START,
    storage_root=ROOT,
    **digits_jobs(ROOT),
    gate=Gate(metric="accuracy", threshold=0.8),
    backend="local",
    operator_kwargs={"timeout": timedelta(minutes=20)},
    default_args={"retries": 0},
)
