"""Real processes on the real node, through DLCJobOperator and real Airflow (dag.test):
sharded preprocessing and inference over a PVC, a repository cloned by the init container,
outputs through the termination message, logs streamed while the job runs, and failures as
real processes make them (exit codes, a restart, an OOM kill, a replaced pod, a command
that does not exist, a stop that ends the processes)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime

import pytest

from dlc_airflow.k8s.kinds import JOB, POD
from dlc_airflow.naming import MANAGED_BY
from tests.airflow.test_operator_dagtest import stopped_and_kept, xcom
from tests.node.test_ddp import task_log
from tests.node.workloads import create_pvc, volume_folder
from tests.support.realnode import crictl, node_address, on_real_node

SMALL = {"cpu": "250m", "memory": "256Mi"}


def run(dag_files, conn_id: str, job: dict, **kwargs):
    kwargs.setdefault("queue_timeout", 120)
    dag = dag_files.operator_dag(conn_id=conn_id, backend="native", job=job, **kwargs)
    return dag.test().get_task_instance("train")


def python_job(source: str, **spec) -> dict:
    spec.setdefault("resources", SMALL)
    return on_real_node(type=spec.pop("type", "batch"), command=["python3", "-c", source], **spec)


SHARD = '''
import json, os
from dlc_airflow.runtime import shard, report_output
index, count = shard()
rows = [i * i for i in range(index, 30, count)]
os.makedirs("/data/shards", exist_ok=True)
with open(f"/data/shards/shard-{index}.json", "w") as f:
    json.dump({"index": index, "count": count, "rows": rows, "host": os.uname().nodename}, f)
report_output("rows_" + str(index), len(rows))
print(f"shard {index}/{count}: {len(rows)} rows", flush=True)
'''

INFER = '''
import glob, json
from dlc_airflow.runtime import report_output
model = json.load(open("/data/model.json"))
shards = [json.load(open(p)) for p in sorted(glob.glob("/data/shards/shard-*.json"))]
predictions = [model["scale"] * r for s in shards for r in s["rows"]]
report_output("shards", len(shards))
report_output("predictions", len(predictions))
report_output("total", sum(predictions))
print(f"inference over {len(shards)} shards: {len(predictions)} predictions", flush=True)
'''


def test_preprocessing_shards_then_inference_over_a_pvc(kube, admin, k8s_conn, dag_files, real_node, capfd):
    namespace = kube.namespace
    claim = create_pvc(admin, namespace)
    volume = [{"type": "pvc", "claim_name": claim, "mount_path": "/data"}]
    prep = run(dag_files, k8s_conn, python_job(SHARD, roles={"worker": 3}, storage=volume))
    assert prep.state == "success", task_log("".join(capfd.readouterr()))
    folder = volume_folder(admin, namespace, claim)
    shards = [json.loads((folder / "shards" / f"shard-{i}.json").read_text()) for i in range(3)]
    # three real processes, each its own shard of the rows, all written to the one volume
    assert [s["index"] for s in shards] == [0, 1, 2] and {s["count"] for s in shards} == {3}
    assert sorted(r for s in shards for r in s["rows"]) == [i * i for i in range(30)]
    assert len({s["host"] for s in shards}) == 3
    assert xcom(prep)["outputs"] == {"rows_0": 10, "rows_1": 10, "rows_2": 10}
    (folder / "model.json").write_text(json.dumps({"scale": 2}))  # "the model", as training would leave it
    infer = run(dag_files, k8s_conn, python_job(INFER, storage=volume), deferrable=True)
    assert infer.state == "success", task_log("".join(capfd.readouterr()))
    assert xcom(infer)["outputs"] == {"shards": 3, "predictions": 30, "total": 2 * sum(i * i for i in range(30))}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture
def git_repo(tmp_path, admin):
    """A repository served by a real git daemon on this host, reached by pods at the node's
    address (the bridge's): (URL, the commit of its tag v1, the commit of main)."""
    repo = tmp_path / "repos" / "models.git"
    work = tmp_path / "work"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def git(*args, cwd=work):
        return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()
    work.mkdir()
    git("init", "-q", "-b", "main")
    (work / "train.py").write_text("print('version one')\n")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    git("tag", "v1")
    tagged = git("rev-parse", "HEAD")
    (work / "train.py").write_text("print('version two')\n")
    git("commit", "-q", "-am", "two")
    head = git("rev-parse", "HEAD")
    git("clone", "-q", "--bare", str(work), str(repo), cwd=tmp_path)
    address, port = node_address(admin), free_port()
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={tmp_path / 'repos'}",
                               f"--listen={address}", f"--port={port}", str(tmp_path / "repos")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    yield f"git://{address}:{port}/models.git", tagged, head
    daemon.terminate()
    daemon.wait(10)


@pytest.mark.parametrize("revision", ["v1", "main"])
def test_the_init_container_clones_the_repository_at_its_revision(kube, k8s_conn, dag_files, real_node, capfd,
                                                                  git_repo, revision):
    url, tagged, head = git_repo
    source = ("import subprocess; from dlc_airflow.runtime import report_output; "
              "commit = subprocess.run(['git', '-C', '/workspace/code', 'rev-parse', 'HEAD'], capture_output=True, "
              "text=True, check=True).stdout.strip(); print('commit', commit, flush=True); "
              "report_output('commit', commit); exec(open('/workspace/code/train.py').read())")
    job = python_job(source, code={"repo": url, "revision": revision, "image": real_node})
    ti = run(dag_files, k8s_conn, job)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    expected = tagged if revision == "v1" else head
    assert xcom(ti)["outputs"]["commit"] == expected
    assert f"] commit {expected}" in text
    assert ("] version one" if revision == "v1" else "] version two") in text


def test_outputs_come_back_through_the_termination_message(kube, k8s_conn, dag_files, real_node):
    source = ("from dlc_airflow.runtime import report_output, log_metrics; "
              "log_metrics(step=3, loss=0.125); report_output('model_uri', 's3://bucket/model/7')")
    ti = run(dag_files, k8s_conn, python_job(source), deferrable=True)
    assert ti.state == "success"
    result = xcom(ti)
    assert result["metrics"] == {"step": 3, "loss": 0.125} and result["outputs"] == {"model_uri": "s3://bucket/model/7"}
    # what the waiting side read: the kubelet's copy of /dev/termination-log in the pod status
    pod = kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0][0]
    message = json.loads(pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"])
    assert message["outputs"] == {"model_uri": "s3://bucket/model/7"}


def test_logs_stream_while_the_job_runs_and_the_jobs_cli_reads_them(kube, k8s_conn, dag_files, real_node, capfd):
    source = ("import time\nfor i in range(4):\n    print(f'tick {i}', flush=True)\n    time.sleep(4)\n")
    # a wait on a worker (the deferred wait on Kubernetes reads logs at each state change only)
    ti = run(dag_files, k8s_conn, python_job(source, roles={"worker": 2}), deferrable=False)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    # each replica's lines, prefixed, in the task log as they were printed: "tick 0" arrives
    # well before the job ends (the sync wait streams; it does not read logs at the end only)
    stamps = {}
    for line in text.splitlines():
        for tick in ("tick 0", "tick 3"):
            if f"[worker-0] {tick}" in line and tick not in stamps:
                stamps[tick] = datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
    assert set(stamps) == {"tick 0", "tick 3"}, task_log(text)
    assert (stamps["tick 3"] - stamps["tick 0"]).total_seconds() >= 8
    assert "[worker-1] tick 3" in text
    # the jobs CLI reads the same pods' logs (through the API server and the kubelet)
    name = xcom(ti)["job_name"]
    done = subprocess.run([sys.executable, "-m", "dlc_airflow.cli", "jobs", "logs", name, "--conn-id", k8s_conn],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "tick 0" in done.stdout and "tick 3" in done.stdout and "worker-1" in done.stdout


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_a_non_retryable_exit_code_fails_the_task_with_the_code(kube, k8s_conn, dag_files, real_node, capfd,
                                                                deferrable):
    job = python_job("import sys; print('bad hyperparameter', flush=True); sys.exit(3)",
                     fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [1]})
    ti = run(dag_files, k8s_conn, job, deferrable=deferrable)
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    assert "exited with code 3" in text, task_log(text)
    assert "[worker-0] bad hyperparameter" in text
    jobs = kube.list(JOB, labels={MANAGED_BY: "dlc-airflow"})[0]
    assert [j["status"].get("failed", 0) for j in jobs] == [1]  # not restarted


def test_a_retryable_exit_code_restarts_the_replica(kube, admin, k8s_conn, dag_files, real_node, capfd):
    claim = create_pvc(admin, kube.namespace)
    # the first run leaves a mark on the volume and fails with a retryable code; the restart succeeds
    source = ("import os, sys\nmark = '/state/first-run-done'\nif not os.path.exists(mark):\n"
              "    open(mark, 'w').close(); print('flaky failure', flush=True); sys.exit(1)\n"
              "print('second run ok', flush=True)\n")
    job = python_job(source, storage=[{"type": "pvc", "claim_name": claim, "mount_path": "/state"}],
                     fault_tolerance={"max_restarts": 2, "retryable_exit_codes": [1]})
    ti = run(dag_files, k8s_conn, job)
    text = "".join(capfd.readouterr())
    assert ti.state == "success", task_log(text)
    assert xcom(ti)["restarts"] == 1
    assert "flaky failure" in text and "second run ok" in text


def test_a_replica_over_its_memory_limit_fails_as_oomkilled(kube, k8s_conn, dag_files, real_node, capfd):
    hog = "x = []\nwhile True:\n    x.append(bytearray(16 * 1024 * 1024))\n"
    ti = run(dag_files, k8s_conn, python_job(hog, resources={"cpu": "250m", "memory": "96Mi"}))
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    assert "OOMKilled" in text and "out of memory" in text and "resources.memory" in text, task_log(text)


def test_a_deleted_pod_is_replaced_and_the_job_still_succeeds(kube, admin, k8s_conn, dag_files, real_node, capfd):
    source = "import time, socket\nprint('running on', socket.gethostname(), flush=True)\ntime.sleep(12)\n"
    deleted = []

    def delete_first_pod():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not deleted:
            for pod in kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]:
                if pod.get("status", {}).get("phase") == "Running":
                    admin.delete(POD, pod["metadata"]["name"], kube.namespace)
                    deleted.append(pod["metadata"]["uid"])
                    return
            time.sleep(0.5)
    thread = threading.Thread(target=delete_first_pod, daemon=True)
    thread.start()
    ti = run(dag_files, k8s_conn, python_job(source))
    thread.join(5)
    text = "".join(capfd.readouterr())
    assert deleted and ti.state == "success", task_log(text)
    pods = kube.list(POD, labels={MANAGED_BY: "dlc-airflow"})[0]
    assert [p["metadata"]["uid"] for p in pods if p["status"]["phase"] == "Succeeded"] != deleted


def test_a_command_that_does_not_exist_fails_with_the_runtimes_message(kube, k8s_conn, dag_files, real_node, capfd):
    job = on_real_node(type="batch", command=["no-such-trainer", "--epochs", "3"], resources=SMALL)
    began = time.monotonic()
    ti = run(dag_files, k8s_conn, job, queue_timeout=60)
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    assert "no-such-trainer" in text and "executable file not found" in text, task_log(text)
    assert time.monotonic() - began < 60 + 30


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferred"])
def test_a_timeout_stops_the_real_processes(kube, k8s_conn, dag_files, real_node, capfd, deferrable):
    tag = uuid.uuid4().hex[:6]
    job = python_job(f"import time\nprint('sleeper {tag}', flush=True)\ntime.sleep(600)\n", roles={"worker": 2})
    seen: list[str] = []

    def containers():
        return [c for c in json.loads(crictl("ps", "-o", "json"))["containers"]
                if c["labels"].get("io.kubernetes.pod.namespace") == kube.namespace]

    def watch():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(seen) < 2:
            seen[:] = [c["id"] for c in containers()]
            time.sleep(0.5)
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    ti = run(dag_files, k8s_conn, job, deferrable=deferrable, timeout=30, queue_timeout=20)
    thread.join(5)
    assert ti.state == "failed"
    assert len(seen) == 2  # both replicas' containers really ran
    deadline = time.monotonic() + 60
    while containers():
        assert time.monotonic() < deadline, f"containers still running after the stop: {containers()}"
        time.sleep(0.5)
    # stopped, not deleted: the job and its record stay for its logs (on_finish decides that)
    assert stopped_and_kept(kube)


def test_an_image_that_does_not_exist_fails_within_queue_timeout(kube, k8s_conn, dag_files, real_node, capfd):
    job = on_real_node(type="batch", image="registry.local/dlc-airflow/not-pushed:1", command=["true"],
                       resources=SMALL)
    ti = run(dag_files, k8s_conn, job, queue_timeout=20)
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    assert "could not start within queue_timeout" in text and "not-pushed" in text, task_log(text)
    assert any(reason in text for reason in ("ErrImagePull", "ImagePullBackOff"))
