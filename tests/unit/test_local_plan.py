"""The local backend's pure halves: the plan of a job's replicas and the restart policy."""

from __future__ import annotations

import json
import os
import sys

import pytest

from dlc_airflow import reasons, wiring
from dlc_airflow.local import policy
from dlc_airflow.local.plan import SequentialPorts, interpreter_path, plan_replicas
from dlc_airflow.local.policy import Action
from dlc_airflow.spec import MPI_HOSTFILE, DLCJob, FaultTolerance, hostfile_spec

try:  # the batch/v1 pieces native and JobSet share
    from dlc_airflow.k8s.backends.batchjob import pod_failure_rules
except ImportError:  # pragma: no cover - before the move
    from dlc_airflow.k8s.backends.native import pod_failure_rules  # type: ignore[no-redef]

CMD = ["python", "train.py"]


def job(**fields) -> DLCJob:
    return DLCJob(image="local", command=fields.pop("command", CMD), **fields)


def by_key(plan) -> dict:
    return {r.key: r for r in plan.replicas}


# -- plan ---------------------------------------------------------------------------------


def test_plan_touches_nothing(tmp_path):
    jobdir = tmp_path / "jobs" / "j"
    spec = job(type="mpi", roles={"launcher": 1, "worker": 2},
               storage=[{"type": "pvc", "claim_name": "data", "mount_path": "/data"},
                        {"type": "empty_dir", "mount_path": "/scratch"}],
               working_dir="/scratch/run", code={"repo": "https://git.example/x.git", "mount_path": "/code"})
    plan = plan_replicas(spec, "j", jobdir)
    assert not (tmp_path / "jobs").exists()  # no folder, no hostfile: the supervisor writes them
    assert plan.cwd == jobdir / "volumes" / "empty_dir-1" / "run"
    assert plan.hostfile_path == jobdir / "hostfile" and plan.hostfile is not None


def test_plan_env_is_the_wiring_on_127_0_0_1(tmp_path):
    jobdir = tmp_path / "j"
    spec = job(type="pytorch", roles={"master": 1, "worker": 2}, env={"USER_VAR": "x"})
    environ = {"KEEP_ME": "1", "RANK": "5", "MASTER_ADDR": "parent", "DLC_ROLE": "parent",
               "PET_NNODES": "9", "PATH": "/usr/bin:/bin"}
    plan = plan_replicas(spec, "j", jobdir, SequentialPorts(31000), environ=environ)
    assert [r.key for r in plan.replicas] == ["master-0", "worker-0", "worker-1"]
    assert plan.roles == {"master": 1, "worker": 2} and plan.hostfile is None
    for rank, replica in enumerate(plan.replicas):
        env = replica.env
        assert env["RANK"] == env["PET_NODE_RANK"] == str(rank)
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == "31000"
        assert env["WORLD_SIZE"] == "3" and env["PET_NNODES"] == "3"
        assert env["JOB_COMPLETION_INDEX"] == str(replica.index)
        assert env["DLC_OUTPUT_FILE"] == str(jobdir / "outputs" / f"{replica.key}.json")
        assert env["DLC_ROLE"] == replica.role and env["USER_VAR"] == "x" and env["KEEP_ME"] == "1"
        assert env["PATH"] == interpreter_path("/usr/bin:/bin")
        assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
        assert replica.argv == CMD and replica.cwd == jobdir
        assert replica.log == jobdir / "logs" / f"{replica.key}.log"
    # every variable the wiring owns comes from the wiring, never from the parent
    inherited = {k for k in environ if wiring.is_wired(k)}
    for replica in plan.replicas:
        wired = wiring.replica_env(spec, "j", replica.role, replica.index,
                                   wiring.Addressing(lambda r, i: "127.0.0.1", SequentialPorts(31000)))
        for name in inherited:
            assert replica.env.get(name) == wired.get(name)


def test_plan_default_environ_is_only_the_wiring(tmp_path):
    plan = plan_replicas(job(type="batch", roles={"worker": 2}), "j", tmp_path)
    env = plan.replicas[1].env
    assert env["SHARD_INDEX"] == "1" and env["SHARD_COUNT"] == "2"
    assert "HOME" not in env and "PATH" in env


def test_plan_tensorflow_ports_come_from_the_allocator(tmp_path):
    asked = []

    def port(role: str, index: int) -> int:
        asked.append((role, index))
        return 40000 + 10 * ["chief", "ps", "worker"].index(role) + index

    spec = job(type="tensorflow", roles={"chief": 1, "ps": 1, "worker": 2, "evaluator": 1})
    plan = plan_replicas(spec, "j", tmp_path, port)
    configs = {r.key: json.loads(r.env["TF_CONFIG"]) for r in plan.replicas}
    assert configs["chief-0"]["cluster"] == {"chief": ["127.0.0.1:40000"], "ps": ["127.0.0.1:40010"],
                                             "worker": ["127.0.0.1:40020", "127.0.0.1:40021"]}
    assert configs["evaluator-0"]["task"] == {"type": "evaluator", "index": 0}
    assert ("evaluator", 0) not in asked  # not part of the cluster spec


def test_plan_mpi_hostfile_and_its_env(tmp_path):
    spec = job(type="mpi", roles={"launcher": 1, "worker": 2}, slots_per_worker=4)
    plan = plan_replicas(spec, "j", tmp_path)
    assert plan.hostfile == "127.0.0.1 slots=4\n127.0.0.1 slots=4\n" and plan.slots == 4
    launcher = by_key(plan)["launcher-0"].env
    for name in ("OMPI_MCA_orte_default_hostfile", "I_MPI_HYDRA_HOST_FILE", "DLC_HOSTFILE"):
        assert launcher[name] == str(tmp_path / "hostfile")
    assert MPI_HOSTFILE not in {v for r in plan.replicas for v in r.env.values()}


@pytest.mark.parametrize("job_type", ["deepspeed", "megatron"])
def test_plan_mpi_launcher_slots_are_nproc_per_node_as_on_native(tmp_path, job_type):
    """The bug: locally slots=1 (slots_per_worker's default), on native nproc_per_node."""
    spec = job(type=job_type, roles={"worker": 2}, launcher="mpi", nproc_per_node=8)
    plan = plan_replicas(spec, "j", tmp_path)
    assert plan.hostfile == "127.0.0.1 slots=8\n127.0.0.1 slots=8\n"
    assert plan.slots == hostfile_spec(spec).slots == 8
    assert by_key(plan)["worker-0"].env["DLC_HOSTFILE"] == str(tmp_path / "hostfile")

    given = job(type=job_type, roles={"worker": 2}, launcher="mpi", nproc_per_node=8, slots_per_worker=2)
    assert plan_replicas(given, "j", tmp_path).hostfile == "127.0.0.1 slots=2\n127.0.0.1 slots=2\n"


def test_plan_torchrun_launcher_has_no_hostfile(tmp_path):
    plan = plan_replicas(job(type="deepspeed", roles={"worker": 2}, nproc_per_node=8), "j", tmp_path)
    assert plan.hostfile is None and plan.hostfile_path is None
    assert "DLC_HOSTFILE" not in plan.replicas[0].env


def test_plan_ray_runs_only_the_head(tmp_path):
    plan = plan_replicas(job(type="ray", roles={"head": 1, "worker": 3}), "j", tmp_path)
    assert [r.key for r in plan.replicas] == ["head-0"] and plan.roles == {"head": 1}


def test_plan_rewrites_mount_paths_but_not_a_file_checkpoint(tmp_path):
    root = tmp_path / "jobs"
    jobdir = root / "j"
    ckpt = tmp_path / "ckpt"
    spec = job(storage=[{"type": "pvc", "claim_name": "datasets", "mount_path": "/data"}],
               command=["python", "/data/train.py", "--out=/data/out"],
               health_check={"command": ["test", "-d", "/data"]},
               env={"INPUT": "/data/x", "OTHER": "/database"},
               checkpoint={"uri": f"file://{ckpt}"})
    plan = plan_replicas(spec, "j", jobdir)
    data = root / "volumes" / "pvc-datasets"
    replica = plan.replicas[0]
    assert replica.argv == ["python", f"{data}/train.py", f"--out={data}/out"]
    assert replica.health_argv == ["test", "-d", str(data)]
    assert replica.env["INPUT"] == f"{data}/x" and replica.env["OTHER"] == "/database"
    assert replica.env["DLC_CHECKPOINT_URI"] == f"file://{ckpt}"
    assert replica.env["DLC_CHECKPOINT_DIR"] == str(ckpt)


def test_plan_working_dir_only_in_the_image_is_the_job_folder(tmp_path):
    assert plan_replicas(job(working_dir="/no/such/dir"), "j", tmp_path).cwd == tmp_path
    assert plan_replicas(job(working_dir=str(tmp_path)), "j", tmp_path / "j").cwd == tmp_path


def test_sequential_ports_one_per_replica():
    ports = SequentialPorts(100)
    assert [ports("a", 0), ports("b", 0), ports("a", 0), ports("a", 1)] == [100, 101, 100, 102]


# -- policy -------------------------------------------------------------------------------


def test_exit_zero_succeeds():
    assert policy.after_exit(FaultTolerance(), 0, 0).action is Action.SUCCEED


def test_restarts_with_doubling_backoff_then_the_restart_limit():
    ft = FaultTolerance(max_restarts=7)
    delays = []
    for restarts in range(7):
        decision = policy.after_exit(ft, 1, restarts)
        assert decision.action is Action.RESTART and decision.counted
        assert decision.why == f"restart {restarts + 1} of 7"
        delays.append(decision.delay)
    assert delays == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    final = policy.after_exit(ft, 1, 7)
    assert (final.action, final.reason) == (Action.FAIL, reasons.RESTART_LIMIT_EXCEEDED)
    assert final.why == "restarted 7 of max_restarts 7 times"
    never = policy.after_exit(FaultTolerance(), 3, 0)
    assert (never.action, never.reason) == (Action.FAIL, "RestartLimitExceeded")


def test_non_retryable_exit_code_fails_at_once():
    ft = FaultTolerance(max_restarts=5, retryable_exit_codes=[3, 137])
    decision = policy.after_exit(ft, 4, 0)
    assert (decision.action, decision.reason) == (Action.FAIL, reasons.NON_RETRYABLE_EXIT)
    assert decision.why == "exit code 4 is not in retryable_exit_codes [3, 137]"
    assert policy.after_exit(ft, 137, 4).action is Action.RESTART
    assert policy.after_exit(ft, 137, 5).reason == reasons.RESTART_LIMIT_EXCEEDED


def test_preemption_is_replaced_without_counting():
    decision = policy.after_exit(FaultTolerance(max_restarts=0), 137, 0, preempted=True)
    assert decision.action is Action.RESTART and not decision.counted and decision.delay == 0
    off = FaultTolerance(max_restarts=0, restart_on_preemption=False)
    assert policy.after_exit(off, 137, 0, preempted=True).reason == reasons.RESTART_LIMIT_EXCEEDED


@pytest.mark.parametrize("ft", [
    FaultTolerance(),
    FaultTolerance(max_restarts=2),
    FaultTolerance(max_restarts=3, retryable_exit_codes=[1, 137, 143]),
    FaultTolerance(max_restarts=1, retryable_exit_codes=[255], restart_on_preemption=False),
])
def test_policy_mirrors_the_native_pod_failure_policy(ft):
    spec = job(fault_tolerance=ft.model_dump())
    rules = pod_failure_rules(spec, "main")
    ignore = any(r["action"] == "Ignore" for r in rules)
    fail_job = next((r["onExitCodes"] for r in rules if r["action"] == "FailJob"), None)
    preempted = policy.after_exit(ft, 137, 0, preempted=True)
    assert (preempted.action is Action.RESTART and not preempted.counted) is ignore
    for code in range(1, 256):
        native_fails_at_once = fail_job is not None and code not in fail_job["values"]
        first = policy.after_exit(ft, code, 0)
        assert (first.reason == reasons.NON_RETRYABLE_EXIT) is native_fails_at_once, code
        if not native_fails_at_once:  # backoffLimitPerIndex = max_restarts
            assert policy.after_exit(ft, code, ft.max_restarts).reason == reasons.RESTART_LIMIT_EXCEEDED
            if ft.max_restarts:
                assert policy.after_exit(ft, code, ft.max_restarts - 1).action is Action.RESTART


def test_health_check():
    assert policy.after_health_check(0).action is Action.SUCCEED
    failed = policy.after_health_check(2)
    assert (failed.action, failed.reason) == (Action.FAIL, policy.HEALTH_CHECK_FAILED)


def test_tensorflow_succeeds_with_its_chief_or_worker_0():
    tf = job(type="tensorflow", roles={"chief": 1, "ps": 2, "worker": 2, "evaluator": 1})
    every = [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1), ("evaluator", 0)]
    assert policy.success_decider(tf) == ("chief", 0)
    assert policy.job_succeeded(tf, [("chief", 0)], every)
    assert not policy.job_succeeded(tf, [("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)], every)
    no_chief = job(type="tensorflow", roles={"ps": 1, "worker": 3})
    assert policy.success_decider(no_chief) == ("worker", 0)
    assert policy.job_succeeded(no_chief, [("worker", 0)], [("ps", 0), ("worker", 0), ("worker", 1)])
    assert not policy.job_succeeded(no_chief, [("worker", 1), ("worker", 2)], [("worker", 0)])


def test_other_types_succeed_when_every_replica_has():
    torch = job(type="pytorch", roles={"master": 1, "worker": 2})
    every = [("master", 0), ("worker", 0), ("worker", 1)]
    assert policy.success_decider(torch) is None
    assert not policy.job_succeeded(torch, [("master", 0), ("worker", 0)], every)
    assert policy.job_succeeded(torch, every, every)


def test_leftovers_are_the_replicas_that_have_not_ended():
    phases = {("chief", 0): "succeeded", ("ps", 0): "running", ("worker", 0): "backoff",
              ("worker", 1): "succeeded", ("evaluator", 0): "health"}
    assert policy.leftovers(phases) == [("ps", 0), ("worker", 0), ("evaluator", 0)]

