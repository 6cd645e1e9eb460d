"""The `pai` backend: the managed DLC service (PAI-DLC) through its official SDK.

    backend.py  pure: check(job), render(job, name, identity, attempt) -> CreateJob fields,
                status(job) -> JobStatus, pods(job), tags
    client.py   the SDK's I/O (alibabacloud-pai-dlc20201203, the `pai` extra, imported lazily)
    hook.py     the `dlc_pai` Airflow connection: credentials, region, workspace, endpoint
    poller.py   one shared ListJobs poller per workspace per process
    runner.py   PaiRunner (dlc_airflow.runner.JobRunner) and make_runner

Nothing here imports the SDK or Airflow at import time: a DAG file naming backend="pai"
loads only backend.py while it is parsed.
"""
