"""Every job type the slurm backend runs, on the real local Slurm, to COMPLETED, with the env
of every task checked: the wired names are the local backend's (the same wiring source),
the values are derived from SLURM_* (ranks from SLURM_PROCID, hosts from the nodes)."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

from dlc_airflow import wiring
from dlc_airflow.local.plan import plan_replicas
from dlc_airflow.naming import TaskIdentity, job_name
from dlc_airflow.slurm.prelude import PORT_BASE, PORT_SPAN, replicas
from dlc_airflow.spec import DLCJob, hostfile_spec
from dlc_airflow.status import JobState
from tests.slurm.support import ENV_DUMP, envs, wait_all
from tests.support.slurm import wait_for

CASES = {
    "pytorch": {"type": "pytorch", "roles": {"master": 1, "worker": 2}, "nproc_per_node": 2},
    "deepspeed": {"type": "deepspeed", "roles": {"worker": 2}, "launcher": "mpi", "nproc_per_node": 2},
    "megatron": {"type": "megatron", "roles": {"worker": 2}, "port": 29777},
    "mpi": {"type": "mpi", "roles": {"launcher": 1, "worker": 2}, "slots_per_worker": 2},
    "xgboost": {"type": "xgboost", "roles": {"master": 1, "worker": 2}},
    "batch": {"type": "batch", "roles": {"worker": 4}},
    "custom": {"type": "custom", "roles": {"trainer": 2}},
}


def job_of(case: str) -> DLCJob:
    return DLCJob(image="not-used-on-slurm", command=[sys.executable, "-c", ENV_DUMP], env={"FROM_SPEC": "job"},
                  **CASES[case])


@pytest.fixture(scope="module")
def finished(slurm, job_root):
    """Submit one job of each type at once, then wait for all of them (one shared poller)."""
    from dlc_airflow.slurm.runner import SlurmRunner

    runner = SlurmRunner(slurm.settings(job_root))
    identity = TaskIdentity("slurm_types", "all", f"run-{uuid.uuid4().hex[:6]}")
    refs = {}
    for case in CASES:
        name = job_name(case, identity, 1)
        refs[case], created = runner.submit(job_of(case), name, identity, 1)
        assert created
    statuses = wait_all(runner, list(refs.values()), timeout=150)
    return runner, refs, statuses


@pytest.mark.parametrize("case", list(CASES))
def test_type_runs_to_completed_with_its_env_on_every_task(case, finished, job_root):
    runner, refs, statuses = finished
    ref, status = refs[case], statuses[refs[case].name]
    job = job_of(case)
    assert status.state is JobState.SUCCEEDED, status.summary()
    assert runner.rest.job(ref.uid).state == "COMPLETED"
    for role, n in ((r, job.roles[r].replicas) for r in job.roles):
        assert status.roles[role].succeeded == n and status.roles[role].failed == 0
    jobdir = Path(job_root) / ref.name
    seen = envs(jobdir)
    order = replicas(job)
    assert sorted(seen) == sorted(f"{r}-{i}" for r, i in order)

    local = plan_replicas(job, ref.name, Path("/nowhere") / ref.name)
    local_names = {f"{p.role}-{p.index}": {n for n in p.env if wiring.is_wired(n)} for p in local.replicas}
    port = job.port or PORT_BASE + int(ref.uid) % PORT_SPAN
    nodes = set()
    for procid, (role, index) in enumerate(order):
        env = seen[f"{role}-{index}"]
        key = f"{role}-{index}"
        # the same wired names as the local backend's replica: one wiring source
        assert {n for n in env if wiring.is_wired(n)} == local_names[key], key
        # replica k is task k, on a node of its own
        assert env["SLURM_PROCID"] == str(procid) and env["SLURM_JOB_ID"] == ref.uid
        nodes.add(env["SLURMD_NODENAME"])
        assert env["DLC_JOB_NAME"] == ref.name and env["DLC_ROLE"] == role and env["DLC_ROLE_INDEX"] == str(index)
        assert env["JOB_COMPLETION_INDEX"] == str(index)
        assert env["DLC_OUTPUT_FILE"] == f"{jobdir}/outputs/{key}.json"
        assert env["FROM_SPEC"] == "job"
        assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)  # the venv's python first
        assert not any(k.startswith("DLC_SLURM_") for k in env)  # the prelude's inputs stay its own
        if job.type_info.torch:
            ranked = [k for k in order if k[0] in ("master", "worker")]
            assert env["RANK"] == env["PET_NODE_RANK"] == str(ranked.index((role, index)))
            assert env["WORLD_SIZE"] == str(len(ranked) * job.nproc_per_node)
            assert env["PET_NNODES"] == str(len(ranked)) and env["PET_NPROC_PER_NODE"] == str(job.nproc_per_node)
            # the local Slurm's node names do not resolve: their NodeAddr is used
            assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
            assert env["MASTER_PORT"] == env["PET_MASTER_PORT"] == str(port)
        if case == "xgboost":
            assert env["RANK"] == str(procid) and env["WORLD_SIZE"] == "3"
            assert env["MASTER_ADDR"] == "127.0.0.1" and env["WORKER_ADDRS"] == "127.0.0.1,127.0.0.1"
        if case == "batch":
            assert env["SHARD_INDEX"] == str(index) and env["SHARD_COUNT"] == "4"
        if hostfile_spec(job) is not None:
            assert env["DLC_HOSTFILE"] == f"{jobdir}/hostfile"
    assert len(nodes) == len(order)
    spec = hostfile_spec(job)
    if spec is not None:
        assert (jobdir / "hostfile").read_text() == f"127.0.0.1 slots={spec.slots}\n" * job.roles["worker"].replicas
        if case == "mpi":
            env = seen["launcher-0"]
            assert env["OMPI_MCA_orte_default_hostfile"] == f"{jobdir}/hostfile" and env["WORLD_SIZE"] == "4"


def test_slurm_batch_script_runs_as_it_is(runner, job_root):
    """Job type slurm: the script is the job's batch script, run on the first of its nodes; it
    starts its own srun step, and sees the DLC_* env and the spec's env (no framework wiring)."""
    script = "\n".join([
        "#!/bin/bash",
        "echo \"script on $SLURM_JOB_NUM_NODES nodes: $SLURM_JOB_NODELIST\"",
        "srun --ntasks=2 --ntasks-per-node=1 bash -c 'env > env-task-$SLURM_PROCID.txt'",
        "echo \"DLC_ROLE=$DLC_ROLE GREETING=$GREETING\"",
    ])
    job = DLCJob(type="slurm", image="unused", roles={"worker": 2}, shell=script, env={"GREETING": "hello"})
    identity = TaskIdentity("slurm_types", "script", f"run-{uuid.uuid4().hex[:6]}")
    ref, _ = runner.submit(job, job_name("script", identity, 1), identity, 1)
    status = wait_all(runner, [ref], timeout=60)[ref.name]
    assert status.state is JobState.SUCCEEDED, status.summary()
    jobdir = Path(job_root) / ref.name
    tasks = [dict(line.split("=", 1) for line in (jobdir / f"env-task-{i}.txt").read_text().splitlines() if "=" in line)
             for i in range(2)]
    assert {t["SLURMD_NODENAME"] for t in tasks} and len({t["SLURMD_NODENAME"] for t in tasks}) == 2
    for env in tasks:
        assert env["DLC_JOB_TYPE"] == "slurm" and env["DLC_JOB_NAME"] == ref.name and env["GREETING"] == "hello"
        assert "MASTER_ADDR" not in env and "RANK" not in env  # a batch script gets no framework wiring
    lines = [line for _, line in runner.logs(ref)[0]]
    assert any(line.startswith("script on 2 nodes: ") for line in lines), lines
    assert "DLC_ROLE=worker GREETING=hello" in lines
    assert (jobdir / "job.sh").read_text().startswith("#!/bin/bash\necho")  # the script as it was given



FLAKY = ("import os, sys; from pathlib import Path; mark = Path('failed-once-' + os.environ['DLC_ROLE_INDEX']); "
         "first = not mark.exists(); mark.touch(); print('first run' if first else 'second run', flush=True); "
         "sys.exit(int(os.environ['CODE']) if first and os.environ['DLC_ROLE_INDEX'] == '1' else 0)")


@pytest.mark.parametrize("code, outcome", [(3, JobState.SUCCEEDED), (4, JobState.FAILED)], ids=["retryable", "not"])
def test_fault_tolerance_runs_the_step_again_for_a_retryable_exit_code(runner, code, outcome):
    job = DLCJob(type="pytorch", image="unused", roles={"worker": 2}, command=[sys.executable, "-c", FLAKY],
                 env={"CODE": str(code)}, fault_tolerance={"max_restarts": 1, "retryable_exit_codes": [3]})
    identity = TaskIdentity("slurm_types", "flaky", f"run-{uuid.uuid4().hex[:6]}")
    ref, _ = runner.submit(job, job_name("flaky", identity, 1), identity, 1)
    status = wait_all(runner, [ref], timeout=90)[ref.name]
    assert status.state is outcome, status.summary()
    lines = [line for replica, line in runner.logs(ref)[0] if replica == "worker-1"]
    if outcome is JobState.SUCCEEDED:
        assert status.restarts == 1 and lines == ["first run", "second run"]
    else:
        assert status.restarts == 0 and status.reason == "PodFailurePolicy" and "exit code 4" in status.message
        assert runner.rest.job(ref.uid).exit_code == 4


@pytest.mark.slurm_shapes
def test_a_requeued_job_is_restarting_then_runs_again(runner, slurm):
    """Preemption and node failures requeue a job (restart_on_preemption -> requeue): here an
    admin's `scontrol requeue`, the same transition. The wait follows it through RESTARTING."""
    if slurm.source != "scripts/slurm-local":
        pytest.skip("requeues through the local Slurm's scontrol")
    job = DLCJob(type="custom", image="unused", roles={"main": 1}, shell="echo run; sleep 5")
    identity = TaskIdentity("slurm_types", "requeue", f"run-{uuid.uuid4().hex[:6]}")
    ref, _ = runner.submit(job, job_name("requeue", identity, 1), identity, 1)
    seen = []
    follower = runner.follow(ref)
    follower.start(lambda status, pods: seen.append(status))
    try:
        wait_for(lambda: any(s.state is JobState.RUNNING for s in seen), 60, "the job to run")
        # RUNNING comes with the allocation, before the script prints: requeue after the first run spoke.
        wait_for(lambda: main_lines(runner, ref) == ["run"], 60, "the first run's output")
        slurm.scontrol("requeue", ref.uid)
        wait_for(lambda: seen and seen[-1].terminal, 90, "the requeued job to finish")
    finally:
        follower.close()
    states = [s.state for s in seen]
    assert JobState.RESTARTING in states and states[-1] is JobState.SUCCEEDED, [s.summary() for s in seen]
    assert seen[-1].restarts == 1
    # The first run's shell may report its killed `sleep` ("Terminated"), depending on which
    # process Slurm's SIGTERM reaches first; the runs themselves are what the test checks.
    assert [line for line in main_lines(runner, ref) if line != "Terminated"] == ["run", "run"]


def main_lines(runner, ref):
    return [line for replica, line in runner.logs(ref)[0] if replica == "main-0"]


def test_submit_or_adopt_reuses_a_success_and_retries_a_failure(runner, job_root):
    """The rule every backend shares (submission.py), on Slurm: this task's running job is
    adopted, its succeeded job's result taken, its failed job followed by attempt 2."""
    from dlc_airflow.submission import Action, submit_or_adopt

    def task(try_number: int) -> TaskIdentity:
        return TaskIdentity("slurm_types", "adopt", run, try_number=try_number)

    run = f"run-{uuid.uuid4().hex[:6]}"
    flaky = DLCJob(type="custom", image="unused", roles={"main": 1},
                   shell="sleep 2; test -e ../succeed-" + run + " || exit 5")
    first = submit_or_adopt(runner, flaky, task(1), base_name="adopt")
    assert first.action is Action.SUBMITTED and first.ref.attempt == 1
    again = submit_or_adopt(runner, flaky, task(2), base_name="adopt")  # a retry while it runs
    assert again.action is Action.ADOPTED and again.ref.uid == first.ref.uid
    assert runner.owner_try(first.ref) == 2  # the retry claimed it (the comment says so)
    assert wait_all(runner, [first.ref], 60)[first.ref.name].state is JobState.FAILED
    (Path(job_root) / f"succeed-{run}").touch()
    second = submit_or_adopt(runner, flaky, task(3), base_name="adopt")
    assert second.action is Action.SUBMITTED and second.ref.attempt == 2 and second.ref.name.endswith("-2")
    assert wait_all(runner, [second.ref], 60)[second.ref.name].state is JobState.SUCCEEDED
    reused = submit_or_adopt(runner, flaky, task(4), base_name="adopt")
    assert reused.action is Action.REUSED and reused.ref.uid == second.ref.uid
    assert [r.attempt for r in runner.find(task(4), flaky)] == [1, 2]


@pytest.mark.parametrize("role", [{"resources": {"gpu": 1}}, {"image": "registry.example.com/other:1"}],
                         ids=["resources", "image"])
def test_roles_that_differ_are_refused_before_anything_reaches_slurm(runner, slurm, job_root, role):
    """No heterogeneous jobs (README: roles that differ): a role of its own resources or image
    is one line naming the field, and slurmctld never hears of the job."""
    from dlc_airflow.errors import SubmitError

    job = DLCJob(type="pytorch", image="not-used-on-slurm", command=[sys.executable, "-c", "pass"],
                 roles={"master": 1, "worker": {"replicas": 2, **role}})
    identity = TaskIdentity("slurm_types", "hetero", f"run-{uuid.uuid4().hex[:6]}")
    name = job_name("hetero", identity, 1)
    field = "resources" if "resources" in role else "image"
    with pytest.raises(SubmitError, match=rf"^slurm backend: roles\.worker\.{field}: [^\n]+$"):
        runner.submit(job, name, identity, 1)
    assert slurm.jobs(name=name) == [] and not (Path(job_root) / name).exists()


# Last in the slurm tests on purpose: the job was submitted when the session's first slurm
# test started (conftest.deadline_probe), so Slurm's 60-90 s to a TIMEOUT overlapped the rest.
def test_time_limit_fails_with_deadline_exceeded(deadline_probe, slurm):
    """Slurm's TIMEOUT at max_running_time (the job was started with the session: conftest)."""
    runner, ref, since = deadline_probe
    status = wait_for(lambda: (s := runner.status(ref)).terminal and s, 150, "Slurm's time limit")
    assert status.state is JobState.FAILED and status.reason == "DeadlineExceeded", status.summary()
    assert "max_running_time" in status.message
    assert runner.rest.job(ref.uid).state == "TIMEOUT"
    assert [line for _, line in runner.logs(ref)[0] if line == "started"]
