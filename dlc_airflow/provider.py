"""Provider registration (entry point `apache_airflow_provider`)."""

from __future__ import annotations

from dlc_airflow import __version__
from dlc_airflow.jsonvalue import JSONObject


def get_provider_info() -> JSONObject:
    return {
        "package-name": "dlc-airflow",
        "name": "DLC jobs on Kubernetes",
        "description": "Run DLC-style distributed training, preprocessing and inference jobs "
        "(PyTorch, DeepSpeed, Megatron, TensorFlow, MPI, XGBoost, Ray) on Kubernetes from Airflow.",
        "versions": [__version__],
        "connection-types": [
            {
                "hook-class-name": "dlc_airflow.airflow.hook.DLCHook",
                "connection-type": "dlc_kubernetes",
            },
            {
                "hook-class-name": "dlc_airflow.pai.hook.PaiHook",
                "connection-type": "dlc_pai",
            },
            {
                "hook-class-name": "dlc_airflow.slurm.hook.SlurmHook",
                "connection-type": "slurm",
            },
        ],
        "hooks": [
            {"integration-name": "DLC jobs", "python-modules": ["dlc_airflow.airflow.hook", "dlc_airflow.pai.hook"]},
            {"integration-name": "DLC jobs", "python-modules": ["dlc_airflow.slurm.hook"]},
        ],
        "triggers": [
            {"integration-name": "DLC jobs", "python-modules": ["dlc_airflow.airflow.trigger"]},
        ],
        "operators": [
            {"integration-name": "DLC jobs", "python-modules": ["dlc_airflow.operators.job"]},
        ],
        "sensors": [
            {"integration-name": "DLC jobs", "python-modules": ["dlc_airflow.sensors.job"]},
        ],
        "integrations": [
            {
                "integration-name": "DLC jobs",
                "external-doc-url": "https://github.com/dlc-airflow/dlc-airflow",
                "tags": ["software"],
            }
        ],
    }
