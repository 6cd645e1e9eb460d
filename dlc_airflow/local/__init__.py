"""The local backend: every replica a local process with the env the cluster backends inject.

    from dlc_airflow.local.runner import LocalRunner
    runner = LocalRunner()              # $DLC_LOCAL_ROOT, $AIRFLOW_HOME/dlc-local-jobs, ~/.cache/...
    ref, created = runner.submit(job, "train-1a2b3c-1", identity, 1)
    runner.status(ref)                  # JobStatus

backend.py (the pure half), runner.py (the runner contract) over jobs.py (the job folders and
their supervisors, by name), plan.py / policy.py (pure: the replicas to start, what an exit
means), supervise.py / supervisor.py (the detached process that runs a job), jobdir.py (the
folder's layout), volumes.py, secrets.py, procs.py. The supervisor imports nothing of the
runner: this package's face imports nothing.
"""
