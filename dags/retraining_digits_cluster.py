"""(c) The same retraining pipeline on a Kubernetes cluster, chosen by connection.

Identical to retraining_digits.py but for the backend: the jobs run the runtime image
(dlc-airflow/runtime:dev, docker/runtime.Dockerfile) as batch/v1 Indexed Jobs (`native`)
on the cluster of the Airflow connection `dlc_cluster` (a cncf.kubernetes connection:
kubeconfig path or in-cluster). See retraining/__init__.py for what the nodes must see.
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
    "retraining_digits_cluster",
    cadence="@daily",
    start_date=START,
    storage_root=ROOT,
    lineage="retraining_digits_cluster",
    **digits_jobs(ROOT),
    gate=Gate(metric="accuracy", threshold=0.8),
    backend="native",
    conn_id="dlc_cluster",
    operator_kwargs={"timeout": timedelta(minutes=20)},
    default_args={"retries": 0},
)
