"""Every framework dlc-airflow wires, for real, in the frameworks image on the real node, on
the backends named, through real Airflow (dag.test, deferred): what each job did is checked -
a sum kept on a TensorFlow parameter server by closures the chief scheduled on its workers,
an XGBoost model trained over two workers through the collective and loaded back, a
DeepSpeed ZeRO stage 1 step taken by two ranks over gloo (under torchrun, and from the job's
hostfile), Megatron Core's tensor-parallel layers split across two pods."""

from __future__ import annotations

import json

import pytest

from dlc_airflow.k8s.kinds import POD
from dlc_airflow.naming import MANAGED_BY
from tests.airflow.test_operator_dagtest import xcom
from tests.node.test_ddp import task_log
from tests.node.workloads import create_pvc, create_script, volume_folder
from tests.support.realnode import frameworks_image, on_real_node

SMALL = {"cpu": "200m", "memory": "1536Mi"}


def run(dag_files, conn_id: str, job: dict, backend: str, **kwargs):
    dag = dag_files.operator_dag(conn_id=conn_id, backend=backend, job=job, queue_timeout=300, deferrable=True,
                                 **kwargs)
    return dag.test().get_task_instance("train")


def reported(text: str, marker: str) -> dict:
    """The JSON a workload printed after `marker` (the task log's line goes on after it)."""
    line = next(line for line in text.splitlines() if marker in line)
    result, _ = json.JSONDecoder().raw_decode(line.split(marker, 1)[1])
    return result


def framework_job(script: str, **spec) -> dict:
    spec.setdefault("resources", SMALL)
    storage = [{"type": "config_map", "name": script, "mount_path": "/scripts", "read_only": True},
               *spec.pop("storage", [])]
    return on_real_node(image=frameworks_image(), command=["python3", "/scripts/main.py"], storage=storage,
                        max_running_time="10m", **spec)


# The chief coordinates (ParameterServerStrategy): closures it schedules run on the workers and
# add to a variable that lives on the parameter server. Workers and the ps serve until stopped:
# the job ends when the chief does.
TENSORFLOW = '''
import json, os
import tensorflow as tf
from dlc_airflow.runtime import report_output

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if task["type"] in ("worker", "ps"):
    print(f"{task['type']} {task['index']} serving", flush=True)
    tf.distribute.Server(resolver.cluster_spec(), job_name=task["type"], task_index=task["index"],
                         protocol="grpc", start=True).join()
strategy = tf.distribute.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
with strategy.scope():
    total = tf.Variable(0.0)

@tf.function
def add(value):
    total.assign_add(value)
    return value

for i in range(1, 11):
    coordinator.schedule(add, args=(tf.constant(float(i)),))
coordinator.join()
value = float(total.read_value().numpy())
assert value == 55.0, value
print(f"chief: sum {value:g} over {len(config['cluster']['worker'])} workers and {len(config['cluster']['ps'])} ps",
      flush=True)
report_output("sum", value)
report_output("variable_device", total.device)
'''


@pytest.mark.parametrize("backend", ["native", "jobset", "kubeflow"])
def test_tensorflow_chief_workers_and_ps(kube, admin, controllers, k8s_conn, dag_files, frameworks, capfd, backend):
    script = create_script(admin, kube.namespace, TENSORFLOW)
    job = framework_job(script, type="tensorflow", roles={"chief": 1, "worker": 2, "ps": 1},
                        env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    ti = run(dag_files, k8s_conn, job, backend)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    outputs = xcom(ti)["outputs"]
    assert outputs["sum"] == 55.0 and "/job:ps/" in outputs["variable_device"]
    assert "chief: sum 55 over 2 workers and 1 ps" in text
    # the parameter server and the workers served until the chief was done, then were stopped
    live = [p for p in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]
            if p["status"].get("phase") in ("Pending", "Running") and not p["metadata"].get("deletionTimestamp")]
    assert live == [], [p["metadata"]["name"] for p in live]


# Rank 0 runs the collective's tracker at MASTER_ADDR:MASTER_PORT; both ranks train one booster
# together (the histograms are allreduced), check an allreduce of their own, and rank 0 saves
# the model to the volume and loads it back.
XGBOOST = '''
import os, socket, time
import numpy as np
import xgboost as xgb
from xgboost import collective
from dlc_airflow.runtime import report_output

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
for _ in range(120):
    try:
        address = socket.gethostbyname(master)
        break
    except OSError:
        time.sleep(0.5)
tracker = None
if rank == 0:
    from xgboost.tracker import RabitTracker
    tracker = RabitTracker(host_ip=address, n_workers=world, port=port, sortby="task")
    tracker.start()
with collective.CommunicatorContext(dmlc_communicator="rabit", dmlc_tracker_uri=address,
                                    dmlc_tracker_port=port, dmlc_task_id=str(rank)):
    total = collective.allreduce(np.array([rank + 1.0]), collective.Op.SUM)
    assert total[0] == world * (world + 1) / 2, total
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(400, 4))
    y = (x[:, 0] + 0.1 * rng.normal(size=400) > 0).astype(int)
    booster = xgb.train({"objective": "binary:logistic", "tree_method": "hist", "max_depth": 2},
                        xgb.DMatrix(x, label=y), num_boost_round=8)
    print(f"rank {rank}/{world}: collective world {collective.get_world_size()}, allreduce {total[0]:g}", flush=True)
    if rank == 0:
        booster.save_model("/out/model.json")
if tracker is not None:
    tracker.wait_for()
    # outside the collective: a DMatrix made inside it would wait for the other rank
    loaded = xgb.Booster(model_file="/out/model.json")
    accuracy = float(((loaded.predict(xgb.DMatrix(x)) > 0.5) == y).mean())
    report_output("accuracy", accuracy)
    report_output("trees", len(loaded.get_dump()))
'''


@pytest.mark.parametrize("backend", ["native", "kubeflow"])
def test_xgboost_trains_over_two_workers_and_the_model_loads(kube, admin, controllers, k8s_conn, dag_files, frameworks,
                                                            capfd, backend):
    namespace = kube.namespace
    script, claim = create_script(admin, namespace, XGBOOST), create_pvc(admin, namespace)
    job = framework_job(script, type="xgboost", roles={"worker": 2},
                        storage=[{"type": "pvc", "claim_name": claim, "mount_path": "/out"}])
    ti = run(dag_files, k8s_conn, job, backend)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    outputs = xcom(ti)["outputs"]
    assert outputs["trees"] == 8 and outputs["accuracy"] > 0.9
    assert "rank 0/2: collective world 2, allreduce 3" in text and "rank 1/2: collective world 2, allreduce 3" in text
    model = json.loads((volume_folder(admin, namespace, claim) / "model.json").read_text())
    assert model["learner"]["gradient_booster"]["model"]["gbtree_model_param"]["num_trees"] == "8"


# DeepSpeed on CPU (its cpu accelerator, gloo): ZeRO stage 1 partitions the optimizer state over
# the two ranks torchrun started; every rank checks the parameters agree after the steps.
DEEPSPEED = '''
import os
os.environ.setdefault("DS_ACCELERATOR", "cpu")
import torch
import torch.distributed as dist
import deepspeed
from dlc_airflow.runtime import log_metrics

deepspeed.init_distributed(dist_backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": 1}, "zero_allow_untested_optimizer": True}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                                       config=config)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(rank)
for step in range(5):
    x = torch.randn(4, 8)
    loss = (engine(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
    engine.backward(loss)
    engine.step()
flat = torch.cat([p.detach().flatten() for p in engine.module.parameters()])
gathered = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
assert all(torch.equal(gathered[0], g) for g in gathered), "ranks disagree after ZeRO-1 steps"
print(f"rank {rank}/{world}: zero stage {engine.zero_optimization_stage()}, loss {loss.item():.4f}", flush=True)
log_metrics(step=5, loss=loss.item(), zero_stage=engine.zero_optimization_stage(), world_size=world)
'''


def two_workers(kube, admin, k8s_conn, dag_files, capfd, source: str, memory: str, **spec) -> tuple[dict, str]:
    """A job of 2 workers running `source` on native, under torchrun unless `shell` says how to
    start it; once it succeeded, its metrics and the task log."""
    script = create_script(admin, kube.namespace, source)
    job = framework_job(script, roles={"worker": 2}, env={"OMP_NUM_THREADS": "1"},
                        resources={"cpu": "200m", "memory": memory}, **spec)
    if "shell" in spec:
        del job["command"]
    else:
        job["command"] = ["torchrun", "/scripts/main.py"]
    ti = run(dag_files, k8s_conn, job, "native")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    return xcom(ti)["metrics"], text


def test_deepspeed_zero_stage_1_over_gloo(kube, admin, k8s_conn, dag_files, frameworks, capfd):
    # DeepSpeed's import and engine take ~2 GiB per rank
    metrics, text = two_workers(kube, admin, k8s_conn, dag_files, capfd, DEEPSPEED, "4Gi", type="deepspeed")
    assert metrics["zero_stage"] == 1 and metrics["world_size"] == 2
    assert "rank 0/2: zero stage 1" in text and "rank 1/2: zero stage 1" in text


def test_deepspeed_from_the_hostfile_each_node_launching_its_ranks(kube, admin, k8s_conn, dag_files, frameworks, capfd):
    """launcher: mpi on native: every worker mounts the job's hostfile and runs DeepSpeed's own
    launcher with it and --no_ssh, which starts that node's ranks (its node rank: PET_NODE_RANK)
    and takes the world from the hostfile; no SSH between the pods."""
    shell = ('deepspeed --hostfile "$DLC_HOSTFILE" --no_ssh --node_rank "$PET_NODE_RANK" '
             '--master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT" /scripts/main.py')
    metrics, text = two_workers(kube, admin, k8s_conn, dag_files, capfd, DEEPSPEED, "4Gi", type="deepspeed",
                                launcher="mpi", nproc_per_node=1, shell=shell)
    assert metrics["zero_stage"] == 1 and metrics["world_size"] == 2
    assert "rank 0/2: zero stage 1" in text and "rank 1/2: zero stage 1" in text
    # DeepSpeed read both hosts from the hostfile (its world info names them)
    assert "-worker-0." in text and "-worker-1." in text, task_log(text)


# Megatron Core on CPU: tensor parallelism of 2 across the two pods (gloo). A column-parallel
# then a row-parallel linear layer, each pod holding half of each weight; every rank checks the
# sharded forward against the same layers unsharded (from the gathered shards) and runs backward.
MEGATRON = '''
import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.model_parallel_config import ModelParallelConfig
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from dlc_airflow.runtime import log_metrics

dist.init_process_group("gloo")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
config = ModelParallelConfig(tensor_model_parallel_size=2, use_cpu_initialization=True, params_dtype=torch.float32)
torch.manual_seed(0)
column = ColumnParallelLinear(8, 16, config=config, init_method=torch.nn.init.xavier_normal_, bias=False,
                              gather_output=False)
row = RowParallelLinear(16, 4, config=config, init_method=torch.nn.init.xavier_normal_, bias=False,
                        input_is_parallel=True, skip_bias_add=True)
torch.manual_seed(1)
x = torch.randn(5, 2, 8)  # [sequence, batch, hidden], the same on both ranks
hidden, _ = column(x)
out, _ = row(torch.relu(hidden))
out.sum().backward()

def gathered(weight, dim):
    parts = [torch.zeros_like(weight) for _ in range(2)]
    dist.all_gather(parts, weight.detach().contiguous())
    return torch.cat(parts, dim=dim)

reference = torch.relu(x @ gathered(column.weight, 0).t()) @ gathered(row.weight, 1).t()
error = (reference - out).abs().max().item()
assert error < 1e-5, error
assert column.weight.shape == (8, 8) and column.weight.grad is not None
rank = dist.get_rank()
print(f"rank {rank}: tensor parallel {parallel_state.get_tensor_model_parallel_world_size()}, "
      f"shard {tuple(column.weight.shape)}, error {error:.1e}", flush=True)
log_metrics(tensor_parallel=parallel_state.get_tensor_model_parallel_world_size(), max_error=error)
'''


def test_megatron_core_tensor_parallel_across_two_pods(kube, admin, k8s_conn, dag_files, frameworks, capfd):
    metrics, text = two_workers(kube, admin, k8s_conn, dag_files, capfd, MEGATRON, "2Gi", type="megatron")
    assert metrics["tensor_parallel"] == 2 and metrics["max_error"] < 1e-5
    assert "rank 0: tensor parallel 2, shard (8, 8)" in text and "rank 1: tensor parallel 2, shard (8, 8)" in text


# The entrypoint is a Ray driver on the head (KubeRay's submitter pod ran `ray job submit`):
# it waits for the worker to join, runs tasks pinned to each node, and prints where they ran.
RAY = '''
import json, socket, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
deadline = time.time() + 180
while len([n for n in ray.nodes() if n["Alive"]]) < 2:
    assert time.time() < deadline, ray.nodes()
    time.sleep(1)

@ray.remote(num_cpus=1)
def square(x):
    return socket.gethostname(), x * x

nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
calls = [square.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(i)
         for i, node in enumerate(nodes * 3)]
results = ray.get(calls)
print("ray result " + json.dumps({"driver": socket.gethostname(), "nodes": len(nodes),
                                  "hosts": sorted({host for host, _ in results}),
                                  "sum": sum(value for _, value in results)}), flush=True)
'''


def test_ray_tasks_run_on_the_head_and_the_worker_under_kuberay(kube, admin, controllers, k8s_conn, dag_files,
                                                                frameworks, capfd):
    """A real Ray head and worker under KubeRay; KubeRay reads the job's state from the real
    head's dashboard (through the API server's service proxy)."""
    script = create_script(admin, kube.namespace, RAY)
    job = framework_job(script, type="ray", roles={"head": 1, "worker": 1},
                        resources={"cpu": "400m", "memory": "2Gi"})  # Ray counts it 1 CPU
    ti = run(dag_files, k8s_conn, job, "ray")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    result = reported(text, "ray result ")
    # 6 tasks: squares of 0..5, two nodes, three tasks pinned to each
    assert result["nodes"] == 2 and result["sum"] == 55, result
    # the driver ran on the head pod, the tasks on the head and on the worker pod (hostnames are
    # pod names: KubeRay names them <cluster>-head-<x> and <cluster>-<group>-worker-<x>)
    (worker,) = set(result["hosts"]) - {result["driver"]}
    assert "-head-" in result["driver"] and "-worker-" in worker, result


def test_a_failing_ray_entrypoint_is_retried_on_a_new_cluster_then_fails(kube, admin, controllers, k8s_conn,
                                                                        dag_files, frameworks, capfd):
    """Ray has no exit-code policy: KubeRay runs the entrypoint again on a new cluster up to
    backoffLimit (max_restarts), then the task fails with Ray's own words for the exit."""
    script = create_script(admin, kube.namespace, 'import sys\nprint("entrypoint failing", flush=True)\nsys.exit(3)\n')
    job = framework_job(script, type="ray", roles={"head": 1}, resources={"cpu": "400m", "memory": "2Gi"},
                        fault_tolerance={"max_restarts": 1})
    ti = run(dag_files, k8s_conn, job, "ray")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed", task_log(text)
    assert text.count("entrypoint failing") >= 2, task_log(text)  # ran twice, on two clusters
    assert "exit code 3" in text and "RestartLimitExceeded" in text, task_log(text)


# mpirun on the launcher starts 4 ranks over SSH on the 2 workers (2 slots each, our hostfile),
# logging in with the job's own key pair; every rank checks an allreduce.
MPI = '''
import json, socket
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
total = comm.allreduce(rank + 1, op=MPI.SUM)
assert total == size * (size + 1) // 2, total
hosts = comm.gather(socket.gethostname(), root=0)
if rank == 0:
    print("mpi result " + json.dumps({"size": size, "allreduce": total, "hosts": sorted(set(hosts))}), flush=True)
'''


def run_mpi(admin, namespace: str, dag_files, k8s_conn, backend: str, worker_command: list[str], capfd) -> str:
    """The MPI job above on `backend`, its workers running `worker_command`; checks what the
    ranks reported and returns the task log."""
    script = create_script(admin, namespace, MPI)
    job = framework_job(script, type="mpi", slots_per_worker=2, roles={
        "launcher": {"replicas": 1, "command": ["mpirun", "-np", "4", "/opt/venv/bin/python3", "/scripts/main.py"]},
        "worker": {"replicas": 2, "command": worker_command}})
    ti = run(dag_files, k8s_conn, job, backend)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    result = reported(text, "mpi result ")
    assert result["size"] == 4 and result["allreduce"] == 10, result
    # the ranks ran on the two workers, none on the launcher
    assert len(result["hosts"]) == 2 and all("-worker-" in host for host in result["hosts"]), result
    return text


@pytest.mark.parametrize("backend", ["native", "jobset"])
def test_mpirun_over_ssh_with_the_jobs_own_keys(kube, admin, controllers, k8s_conn, dag_files, frameworks, capfd,
                                               backend):
    text = run_mpi(admin, kube.namespace, dag_files, k8s_conn, backend,
                   ["/usr/sbin/sshd", "-De", "-f", "/etc/ssh/dlc/sshd_config"], capfd)
    assert "PRIVATE KEY" not in text  # the key pair is never logged


def test_mpijob_under_the_training_operator(kube, admin, controllers, k8s_conn, dag_files, frameworks, capfd):
    """The MPIJob's own mechanism: the operator copies kubectl into the launcher (from our
    kubectl-delivery image) and mpirun starts the ranks through `kubectl exec` into the workers,
    as the launcher's ServiceAccount, from inside the cluster."""
    run_mpi(admin, kube.namespace, dag_files, k8s_conn, "kubeflow", ["sleep", "infinity"], capfd)
