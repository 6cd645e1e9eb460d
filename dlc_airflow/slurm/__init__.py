"""The slurm backend: a DLCJob as one Slurm batch job, submitted and followed through slurmrestd.

    backend.py   pure: what Slurm can run (check), the submission (render), JobStatus (status)
    api.py       pure: the slurmrestd OpenAPI versions and every difference between them
    settings.py  the connection's settings (URL, user, JWT, partition, job root...)
    client.py    the HTTP I/O with slurmrestd (the only module that talks to it)
    poller.py    one shared poller per cluster per process: one job list per interval
    runner.py    SlurmRunner (dlc_airflow.runner.JobRunner) and make_runner
    prelude.py   run by srun in every task: the framework env from SLURM_* (dlc_airflow.wiring)
    hook.py      the `slurm` Airflow connection type
"""
