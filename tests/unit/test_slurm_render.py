"""The slurm backend's pure half (dlc_airflow.slurm.backend): what it refuses (one line naming
the field), what a DLCJob becomes (the batch job, resources, placement, identity) and how a
Slurm job's state reads as a JobStatus."""

from __future__ import annotations

import json
import subprocess

import pytest

from dlc_airflow import naming, reasons, registry
from dlc_airflow.errors import BackendError
from dlc_airflow.registry import pure_backend
from dlc_airflow.slurm.api import JobRecord
from dlc_airflow.slurm.backend import (
    ENV_SECRETS,
    ENV_SPEC,
    SECRETS_FILE,
    SECRETS_PLACEHOLDER,
    Folder,
    SlurmBackend,
    Target,
    batch_script,
    job_status,
    memory_mib,
    parse_comment,
    quantity,
    script_exports,
    with_try,
)
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

NAME = "train-0123456789-1"
IDENTITY = naming.TaskIdentity("retrain", "train", "scheduled__2026-01-01T00:00:00+00:00", map_index=2, try_number=3)
TARGET = Target(job_root="/shared/jobs", python="/opt/venv/bin/python", partition="cpu", account="team",
                qos="normal", spot_partition="spot", spot_qos="preemptible")


def job(**kw) -> DLCJob:
    kw.setdefault("type", "pytorch")
    kw.setdefault("roles", {"master": 1, "worker": 2})
    return DLCJob(image="unused", command=["python", "train.py"], **kw)


def render(j: DLCJob, target: Target = TARGET):
    return SlurmBackend().render(j, NAME, IDENTITY, 1, target)


def test_registered_with_the_types_it_runs():
    backend = pure_backend("slurm")
    assert {t.value for t in backend.job_types} == {"pytorch", "deepspeed", "megatron", "mpi", "xgboost", "batch",
                                                    "custom", "slurm"}
    for other in ("native", "local"):  # the slurm type is refused elsewhere, naming the backend that runs it
        with pytest.raises(BackendError, match=r"job type 'slurm' cannot run on the \w+ backend.*backend=.*'slurm'"):
            registry.check(other, DLCJob(type="slurm", image="x", shell="srun hostname"))


@pytest.mark.parametrize("spec, field", [
    (dict(type="tensorflow", roles={"worker": 2}), "job type 'tensorflow' cannot run on the slurm backend"),
    (dict(type="ray", roles={"head": 1}), "job type 'ray' cannot run on the slurm backend"),
    (dict(roles={"master": {"replicas": 1, "image": "other:1"}, "worker": 1}), "roles.master.image"),
    (dict(roles={"master": {"replicas": 1, "resources": {"cpu": 1}}, "worker": 1}), "roles.master.resources"),
    (dict(resources={"rdma": 1}), "resources.rdma"),
    (dict(resources={"ephemeral_storage": "10Gi"}), "resources.ephemeral_storage"),
    (dict(storage=[{"type": "pvc", "claim_name": "data", "mount_path": "/data"}]), r"storage\[0\] \(pvc\)"),
    (dict(storage=[{"type": "host_path", "path": "/shared/data", "mount_path": "/data"}]), r"storage\[0\].mount_path"),
    (dict(storage=[{"type": "host_path", "path": "/shared", "mount_path": "/shared", "sub_path": "x"}]),
     r"storage\[0\].sub_path"),
    (dict(code={"repo": "https://example.com/x.git"}), "code: the slurm backend does not clone"),
    (dict(scheduling={"node_selector": {"gpu": "a100"}}), "scheduling.node_selector"),
    (dict(scheduling={"tolerations": [{"key": "k", "operator": "Exists"}]}), "scheduling.tolerations"),
    (dict(scheduling={"service_account": "trainer"}), "scheduling.service_account"),
    (dict(scheduling={"queue": "gpu", "queue_priority": "production"}), "scheduling.queue_priority"),
    (dict(scheduling={"queue": "gpu", "topology": {"required": "cloud.provider.com/topology-rack"}}), "scheduling.topology"),
    (dict(env={"PW": {"secret": "db", "key": "password"}}), "env.PW: a Kubernetes Secret cannot be read on Slurm"),
])
def test_what_slurm_cannot_run_is_refused_naming_the_field(spec, field):
    with pytest.raises(BackendError, match=field) as err:
        SlurmBackend().check(job(**spec))
    assert "\n" not in str(err.value)


def test_shared_folders_are_host_paths_at_their_own_path():
    SlurmBackend().check(job(storage=[{"type": "host_path", "path": "/shared/data", "mount_path": "/shared/data/"}]))


def test_resources_and_placement():
    request = render(job(resources={"cpu": "2500m", "memory": "16Gi", "gpu": 2, "gpu_type": "a100"},
                         max_running_time="90m", scheduling={"include_nodes": ["n1"], "exclude_nodes": ["n9"]},
                         fault_tolerance={"restart_on_preemption": False}))
    assert (request.nodes, request.tasks, request.tasks_per_node) == (3, 3, 1)
    assert request.cpus_per_task == 3 and request.memory_per_node_mb == 16384
    assert (request.gpus_per_node, request.gpu_type) == (2, "a100")
    assert request.time_limit_minutes == 90
    assert (request.partition, request.qos, request.account) == ("cpu", "normal", "team")
    assert request.required_nodes == ("n1",) and request.excluded_nodes == ("n9",) and request.requeue is False
    assert request.working_directory == "/shared/jobs" and request.name == NAME
    assert render(job(max_running_time=61)).time_limit_minutes == 2  # whole minutes, rounded up
    assert render(job(nproc_per_node=4)).cpus_per_task == 4  # one CPU per process by default
    assert render(job()).cpus_per_task is None and render(job()).memory_per_node_mb is None


@pytest.mark.parametrize("scheduling, partition, qos", [
    ({"queue": "gpu", "priority_class": "high"}, "gpu", "high"),
    ({"spot": "prefer"}, "spot", "preemptible"),
    ({"spot": "require", "queue": "gpu"}, "gpu", "preemptible"),
    ({}, "cpu", "normal"),
])
def test_partition_and_qos(scheduling, partition, qos):
    request = render(job(scheduling=scheduling))
    assert (request.partition, request.qos) == (partition, qos)


def test_spot_require_needs_a_preemptible_partition_or_qos():
    with pytest.raises(BackendError, match="scheduling.spot='require'.*spot_partition or spot_qos"):
        render(job(scheduling={"spot": "require"}), Target(job_root="/j"))
    assert render(job(scheduling={"spot": "prefer"}), Target(job_root="/j")).partition is None


def test_quantities():
    assert quantity("500m") == 0.5 and quantity("1e3") == 1000 and quantity("2Ki") == 2048
    assert memory_mib("1G") == 954 and memory_mib("512Mi") == 512 and memory_mib(None) is None


def test_identity_is_the_comment():
    request = render(job())
    data = parse_comment(request.comment)
    assert data["task-key"] == IDENTITY.key and data["try"] == "3" and data["attempt"] == "1"
    assert data["job-name"] == NAME and data["roles"] == {"master": 1, "worker": 2}
    assert parse_comment(with_try(request.comment, 4))["try"] == "4"
    assert parse_comment("something else") is None and parse_comment("dlc-airflow:{nope") is None


def test_environment_carries_the_spec_for_the_prelude_and_no_secret():
    j = job(env={"API_TOKEN": "s3cr3t-literal", "PLAIN": "p", "FROM_VAR": {"airflow_variable": "hf"}})
    request = render(j)
    env = request.environment
    assert env["PATH"] == "/opt/venv/bin:/usr/local/bin:/usr/bin:/bin"  # the nodes' interpreter first
    assert env["DLC_SLURM_NAME"] == NAME and env["DLC_SLURM_JOBDIR"] == f"/shared/jobs/{NAME}"
    spec = json.loads(env[ENV_SPEC])
    assert spec["env"]["PLAIN"] == "p" and spec["env"]["FROM_VAR"] == {"airflow_variable": "hf"}
    assert "s3cr3t-literal" not in json.dumps(request.__dict__)  # rendered output never holds a value
    # the prelude reads the values from the job's secrets file, removed when the batch script ends
    assert env[ENV_SECRETS] == f"/shared/jobs/{NAME}/{SECRETS_FILE}"
    assert f'rm -f "$jobdir/{SECRETS_FILE}"' in request.script
    assert ENV_SECRETS not in render(job()).environment and SECRETS_FILE not in render(job()).script


def test_a_slurm_job_is_its_script():
    j = DLCJob(type="slurm", image="unused", roles={"worker": 3}, shell="#!/bin/bash\nsrun hostname\n",
               env={"GREETING": "hi", "DB_PASSWORD": "pw-literal"})
    request = render(j)
    assert request.nodes == 3 and request.tasks == 3 and ENV_SPEC not in request.environment
    assert "#!/bin/bash\nsrun hostname\n" in request.script and "dlc_airflow.slurm.prelude redact" in request.script
    env = request.environment
    assert env["GREETING"] == "hi" and env["DLC_JOB_TYPE"] == "slurm" and env["DB_PASSWORD"] == SECRETS_PLACEHOLDER
    assert "MASTER_ADDR" not in env and "pw-literal" not in request.script + json.dumps(env)
    # the script exports the values from the secrets file before the user's script runs
    assert "dlc_airflow.slurm.prelude export" in request.script and env[ENV_SECRETS].endswith(SECRETS_FILE)
    assert script_exports({"env": {"DB_PASSWORD": "pw 'literal"}}) == "export DB_PASSWORD='pw '\"'\"'literal'\n"
    command = render(DLCJob(type="slurm", image="u", command=["python", "run.py", "a b"]))
    assert "exec python run.py 'a b'" in command.script


def test_the_batch_script_is_valid_bash_with_the_restart_rule():
    request = render(job(fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [1, 137]}, nproc_per_node=2))
    script = request.script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --distribution=block --kill-on-bad-exit=1" in script
    assert "--cpus-per-task=2" in script and "/opt/venv/bin/python -m dlc_airflow.slurm.prelude" in script
    assert '[ "$restarts" -lt 2 ]' in script and 'case "$code" in 1|137) true' in script
    assert "result.json" in script
    assert '[ "$restarts" -lt 0 ] && true' in render(job()).script  # no restarts by default


def test_a_job_that_may_not_restart_refuses_its_requeued_run(tmp_path):
    """22.05's slurmrestd ignores requeue=false: the batch script itself ends a requeued run
    (SLURM_RESTART_COUNT > 0) of a job with restart_on_preemption off, and says why."""
    jobdir = tmp_path / "job"
    script = batch_script(job(fault_tolerance={"restart_on_preemption": False}), NAME, str(jobdir), "/bin/false", None)
    done = subprocess.run(["bash", "-c", script], env={"SLURM_RESTART_COUNT": "1", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True)
    assert done.returncode == 1
    result = json.loads((jobdir / "result.json").read_text())
    assert result == {"exit_code": 1, "restarts": 0, "retryable": False, "requeued": True}
    assert "restart_on_preemption is off: not running again" in (jobdir / "logs" / "batch.log").read_text()
    status = job_status(record("FAILED", exit_code=1), Folder(visible=True, result=result))
    assert (status.state, status.reason) == (JobState.FAILED, reasons.PREEMPTED)
    assert "SLURM_RESTART_COUNT" not in batch_script(job(), NAME, str(jobdir), "/bin/false", None)


def record(state: str, **kw) -> JobRecord:
    base = dict(job_id=12, name=NAME, state=state, submit_time=1_000.0, start_time=1_010.0, end_time=1_050.0,
                comment=render(job()).comment, partition="cpu")
    base.update(kw)
    return JobRecord(**base)


EXITS = Folder(visible=True, exits={"master-0": 143, "worker-0": 0, "worker-1": 3},
               result={"exit_code": 3, "restarts": 0, "retryable": True})


@pytest.mark.parametrize("rec, folder, state, reason, words", [
    (record("PENDING", reason="None", start_time=2_000.0), Folder(), JobState.PENDING, reasons.CREATED,
     "submitted in partition cpu"),
    (record("PENDING", reason="Resources"), Folder(), JobState.QUEUED, reasons.UNSCHEDULABLE,
     "pending in partition cpu: Resources"),
    (record("PENDING", reason="Priority"), Folder(), JobState.QUEUED, "Priority", "pending in partition cpu: Priority"),
    (record("PENDING", reason="BeginTime", restarts=1, flags=("REQUEUED",)), Folder(), JobState.RESTARTING,
     reasons.RESTARTING, "requeued by Slurm (restart 1)"),
    (record("RUNNING"), Folder(), JobState.RUNNING, reasons.RUNNING, ""),
    (record("", flags=("COMPLETING",)), Folder(), JobState.RUNNING, reasons.RUNNING, "completing"),
    (record("SUSPENDED"), Folder(), JobState.QUEUED, reasons.SUSPENDED, "suspended"),
    (record("COMPLETED", exit_code=0), Folder(), JobState.SUCCEEDED, reasons.COMPLETED, ""),
    (record("CANCELLED"), Folder(), JobState.STOPPED, reasons.STOPPED, "cancelled"),
    (record("FAILED", exit_code=3, reason="NonZeroExitCode"), EXITS, JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED,
     "exit code 3; worker-1 exited with code 3, master-0 exited with code 143"),
    (record("FAILED", exit_code=3), Folder(visible=True, result={"exit_code": 3, "retryable": False}),
     JobState.FAILED, reasons.NON_RETRYABLE_EXIT, "exit code 3"),
    (record("FAILED", exit_code=1), Folder(visible=True, batch_tail="srun: error: execve(): python: No such file"),
     JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED, "exit code 1; srun: error: execve(): python: No such file"),
    (record("TIMEOUT", exit_code=0, signal=15), Folder(), JobState.FAILED, reasons.DEADLINE_EXCEEDED,
     "time limit (max_running_time)"),
    (record("OUT_OF_MEMORY"), Folder(), JobState.FAILED, "OOMKilled", "resources.memory"),
    (record("NODE_FAIL", reason="NodeDown"), Folder(), JobState.FAILED, "NodeFail", "a node of the job failed"),
    (record("PREEMPTED"), Folder(), JobState.FAILED, "Preempted", "restart_on_preemption"),
    (record("BOOT_FAIL"), Folder(), JobState.FAILED, reasons.CANNOT_START, "failed to boot"),
    (None, Folder(), JobState.STOPPED, reasons.NOT_FOUND, "no longer knows the job"),
    (None, Folder(visible=True, result={"exit_code": 0, "restarts": 1}), JobState.SUCCEEDED, reasons.COMPLETED, ""),
    (None, EXITS, JobState.FAILED, reasons.RESTART_LIMIT_EXCEEDED, "worker-1 exited with code 3"),
])
def test_status(rec, folder, state, reason, words):
    status = job_status(rec, folder)
    assert (status.state, status.reason) == (state, reason), status.summary()
    assert words in status.message, status.message


def test_status_counts_times_and_restarts():
    running = job_status(record("RUNNING", restarts=1),
                         Folder(visible=True, exits={"worker-1": 0}, restarts=2))
    assert running.roles["worker"].model_dump() == {"replicas": 2, "active": 1, "succeeded": 1, "failed": 0}
    assert running.roles["master"].active == 1 and running.restarts == 3
    assert running.started is not None and running.finished is None
    done = job_status(record("COMPLETED", exit_code=0), Folder())
    assert done.durations() == {"queued_seconds": 10.0, "running_seconds": 40.0}
    pending = job_status(record("PENDING", reason="Resources", start_time=5_000.0), Folder())
    assert pending.started is None  # Slurm's start_time of a pending job is its expected start


def test_a_task_without_backend_does_not_run_a_slurm_script_locally(tmp_path):
    """backend= unset and no cluster: the local backend is chosen at run time, and refuses."""
    from dlc_airflow.errors import SubmitError
    from dlc_airflow.local.runner import LocalRunner

    with pytest.raises(SubmitError, match="job type 'slurm' cannot run on the local backend") as err:
        LocalRunner(str(tmp_path)).submit(DLCJob(type="slurm", image="x", shell="srun hostname"), NAME, IDENTITY, 1)
    assert err.value.permanent and not any(tmp_path.iterdir())
