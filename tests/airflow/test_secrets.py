"""Secret env values end to end with real Airflow (dag.test): on the local backend, and on the
native backend through the real control plane as the restricted identity.

The values come from a Variable in Airflow's metadata DB, a connection (Airflow's
environment-variables backend), a Kubernetes Secret (a local stand-in file on the local
backend) and a literal under a secret-looking name. Every place a value could leak is
grepped for each of them: the task log (the job prints its values: they must show as ***),
XCom, the serialized DAG, every file of the local job folder, and the Kubernetes Job objects.
The job also prints each value's sha256, which proves the replicas got the real values.
"""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import yaml

from dlc_airflow.k8s.kinds import JOB, SECRET, ResourceKind
from dlc_airflow.naming import LABEL_JOB, MANAGED_BY
from tests.airflow.test_operator_dagtest import RUN_FOR, wait_until
from tests.support.cluster import pod_logs

REPO = Path(__file__).resolve().parents[2]
CLUSTER_ROLE = ResourceKind("rbac.authorization.k8s.io/v1", "ClusterRole", "clusterroles", namespaced=False)

PRINT = textwrap.dedent("""
    import hashlib, os, sys
    for name in sys.argv[1:]:
        value = os.environ[name]
        print(f"{name}={value}", flush=True)
        print(f"{name} sha256={hashlib.sha256(value.encode()).hexdigest()}", flush=True)
""")


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.fixture
def sources(airflow_db, monkeypatch):
    """A DB Variable, an env connection and a literal, each with a unique value. The Variable's
    key and the login do not look secret: Airflow itself would not mask them, only we do."""
    from airflow.models import Variable

    tag = uuid.uuid4().hex[:10]
    values = {
        "HF_TOKEN": f"var-secret-{tag}",
        "WAREHOUSE_PW": f"conn-pass-{tag}",
        "WH_TOKEN": f"conn-extra-{tag}",
        "WH_USER": f"conn-login-{tag}",
        "API_TOKEN": f"literal-tok-{tag}",
    }
    variable, conn_id = f"hub_{tag}", f"warehouse_{tag}"
    Variable.set(variable, values["HF_TOKEN"])
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(
        {"conn_type": "http", "host": "wh.local", "login": values["WH_USER"], "password": values["WAREHOUSE_PW"],
         "extra": {"token": values["WH_TOKEN"]}}))
    env = {
        "HF_TOKEN": {"airflow_variable": variable},
        "WAREHOUSE_PW": {"airflow_connection": conn_id},
        "WH_TOKEN": {"airflow_connection": conn_id, "field": "extra.token"},
        "WH_USER": {"airflow_connection": conn_id, "field": "login"},
        "API_TOKEN": values["API_TOKEN"],
    }
    yield env, values, variable
    Variable.delete(variable)


def assert_masked(values: dict[str, str]) -> None:
    """Each value is registered with Airflow's secrets masker (in this process: dag.test runs
    the task and its trigger here; its console output is not masked, a real task log is)."""
    from airflow.sdk._shared.secrets_masker import redact

    for name, value in values.items():
        assert redact(f"x {value} y") == "x *** y", f"{name} is not registered with the secrets masker"


def assert_clean(text: str, values: dict[str, str], what: str) -> None:
    for name, value in values.items():
        assert value not in text, f"{name}'s value is in {what}"


def all_xcoms(ti) -> str:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=ti.dag_id, run_id=ti.run_id).all()
        assert rows
        return json.dumps([XComModel.deserialize_value(r) for r in rows], default=str)


def serialized_dag(dag_id: str) -> str:
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(SerializedDagModel).filter_by(dag_id=dag_id).first()
        return json.dumps(row.data, default=str) if row is not None else ""


def grep_tree(root: Path, values: dict[str, str], skip: Path | None = None) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not (skip and skip in path.parents):
            data = path.read_bytes()
            found += [f"{path}: {n}" for n, v in values.items() if v.encode() in data]
    return found


# -- local backend ------------------------------------------------------------------------------


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_local_job_gets_its_secrets_and_none_leaks(sources, dag_files, tmp_path, capfd, deferrable):
    env, values, _ = sources
    root = tmp_path / "jobs"
    stand_in = root / "volumes" / "secret-db-creds"  # the local backend's Secret db-creds
    stand_in.mkdir(parents=True)
    values = {**values, "DB_PASSWORD": f"kube-secret-{uuid.uuid4().hex[:10]}"}
    (stand_in / "password").write_text(values["DB_PASSWORD"])
    names = ["HF_TOKEN", "WAREHOUSE_PW", "WH_USER", "API_TOKEN", "DB_PASSWORD", "WH_TOKEN"]
    job = {"type": "custom", "image": "local", "roles": {"main": {"replicas": 1, "env": {"WH_TOKEN": env["WH_TOKEN"]}}},
           "command": [sys.executable, "-c", PRINT, *names],
           "env": {**{k: v for k, v in env.items() if k != "WH_TOKEN"},
                   "DB_PASSWORD": {"secret": "db-creds", "key": "password"}}}
    dag = dag_files.operator_dag(backend="local", job=job, deferrable=deferrable, local_root=str(root))
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    for name in names:  # the replica had every real value; its log (in the job folder) masks them
        assert f"{name} sha256={sha(values[name])}" in text, name
        assert f"{name}=***" in text, name
    assert_clean(text, values, "the task log")
    assert_masked(values)
    assert_clean(all_xcoms(ti), values, "XCom")
    assert_clean(serialized_dag(dag.dag_id), {k: v for k, v in values.items() if k not in ("API_TOKEN", "DB_PASSWORD")},
                 "the serialized DAG")
    jobdirs = [p for p in root.iterdir() if p.is_dir() and p.name != "volumes"]
    assert len(jobdirs) == 1
    assert grep_tree(root, values, skip=root / "volumes") == []  # spec.json, state.json, logs, outputs...
    spec = json.loads((jobdirs[0] / "spec.json").read_text())
    assert spec["env"]["HF_TOKEN"] == env["HF_TOKEN"] and spec["env"]["API_TOKEN"] == "<hidden>"


LOCAL_RUNTIME_BAD = [
    ({"TOKEN": {"airflow_variable": "no_such_var_q7"}}, "env.TOKEN", "Airflow variable 'no_such_var_q7' does not exist"),
    ({"PW": {"airflow_connection": "no_such_conn_q7"}}, "env.PW", "Airflow connection 'no_such_conn_q7' does not exist"),
]


@pytest.mark.airflow
@pytest.mark.parametrize(("env", "field", "words"), LOCAL_RUNTIME_BAD, ids=["variable", "connection"])
def test_a_missing_source_fails_the_local_task_leaving_nothing(env, field, words, dag_files, tmp_path, capfd):
    root = tmp_path / "jobs"
    job = {"type": "custom", "image": "local", "roles": {"main": 1}, "command": ["true"], "env": env}
    dag = dag_files.operator_dag(backend="local", job=job, deferrable=False, local_root=str(root))
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    line = next(line for line in text.splitlines() if words in line)
    assert f"{field}: {words}" in line
    assert not root.exists() or list(root.iterdir()) == []


# -- native backend, real control plane ---------------------------------------------------------


@pytest.fixture
def runner_role(admin):
    """The repository's Role (secrets: create/delete) as the cluster's, whatever it was started with."""
    role = yaml.safe_load((REPO / "k8s" / "rbac" / "role.yaml").read_text())
    admin.request("PUT", CLUSTER_ROLE.path(name=role["metadata"]["name"]), body=role)
    return role


@pytest.fixture
def kube_secret(admin, namespace):
    value = f"kube-secret-{uuid.uuid4().hex[:10]}"
    admin.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds"},
                  "stringData": {"password": value}}, namespace)
    return value


def native_job(env: dict, run_for: str = "3s", **extra) -> dict:
    return {"type": "pytorch", "image": "registry.local/train:1", "command": ["python", "train.py"],
            "roles": {"master": 1, "worker": 1}, "annotations": {RUN_FOR: run_for}, "env": env, **extra}


@pytest.mark.parametrize("deferrable", [False, True], ids=["sync", "deferrable"])
def test_native_job_references_secrets_and_none_leaks(runner_role, sources, kube, admin, k8s_conn, kube_secret,
                                                      dag_files, tmp_path, capfd, deferrable):
    env, values, _ = sources
    log_file = tmp_path / "train.log"
    log_file.write_text("".join(f"2026-12-02T10:00:0{i}.000000000Z stdout F {name}={value}\n"
                                for i, (name, value) in enumerate(values.items())))
    job = native_job({**{k: v for k, v in env.items() if k != "WH_TOKEN"},
                      "DB_PASSWORD": {"secret": "db-creds", "key": "password"}}, run_for="6s")
    job["roles"]["worker"] = {"replicas": 1, "env": {"WH_TOKEN": env["WH_TOKEN"]}}
    undo = pod_logs(admin, kube.namespace, log_file)
    try:
        dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=job, deferrable=deferrable)
        ti = dag.test().get_task_instance("train")
    finally:
        undo()
    text = "".join(capfd.readouterr())
    assert ti.state == "success", text[-3000:]
    for name in values:  # the pods "printed" each value: it reached the log, for the masker
        assert f"{name}=" in text, name
    assert_masked(values)  # dag.test's console does not mask: the task logs of test_real_task_logs do
    # the user's own Secret: this identity may not get it, so it cannot be masked (and says so)
    assert "not masked in this log: <secret db-creds/password>" in text
    assert_clean(all_xcoms(ti), values, "XCom")
    assert_clean(serialized_dag(dag.dag_id), {k: v for k, v in values.items() if k not in ("API_TOKEN", "DB_PASSWORD")},
                 "the serialized DAG")

    jobs = kube.list(JOB, labels={MANAGED_BY: "dlc-airflow"})[0]
    assert len(jobs) == 2
    assert_clean(json.dumps(jobs), {**values, "DB_PASSWORD": kube_secret}, "the Job objects")
    name = jobs[0]["metadata"]["labels"][LABEL_JOB]
    for obj in jobs:
        container = obj["spec"]["template"]["spec"]["containers"][0]
        entries = {e["name"]: e for e in container["env"]}
        assert entries["DB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "db-creds", "key": "password"}
        assert entries["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": f"{name}-env", "key": "HF_TOKEN"}
        assert entries["API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": f"{name}-env", "key": "API_TOKEN"}
    # the job's own Secret holds the values read at submit, owned by the primary Job
    secret = admin.get(SECRET, f"{name}-env", kube.namespace)
    data = {k: __import__("base64").b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"HF_TOKEN": values["HF_TOKEN"], "WAREHOUSE_PW": values["WAREHOUSE_PW"], "WH_USER": values["WH_USER"],
                    "API_TOKEN": values["API_TOKEN"], "worker.WH_TOKEN": values["WH_TOKEN"]}
    primary = next(j for j in jobs if not j["metadata"].get("ownerReferences"))
    assert secret["metadata"]["ownerReferences"][0]["uid"] == primary["metadata"]["uid"]


def test_the_job_secret_goes_with_the_job(runner_role, sources, kube, admin, k8s_conn, dag_files):
    env, _, _ = sources
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=native_job(env), deferrable=False,
                                 on_finish="delete")
    ti = dag.test().get_task_instance("train")
    assert ti.state == "success"
    assert kube.list(JOB, labels={MANAGED_BY: "dlc-airflow"})[0] == []
    wait_until(lambda: admin.list(SECRET, kube.namespace, labels={MANAGED_BY: "dlc-airflow"})[0] == [],
               "the garbage collector to delete the job's Secret")


NATIVE_RUNTIME_BAD = [
    ({"TOKEN": {"airflow_variable": "no_such_var_n1"}}, "env.TOKEN", "Airflow variable 'no_such_var_n1' does not exist"),
    ({"PW": {"airflow_connection": "{conn}", "field": "extra.nope"}}, "env.PW", "has no extra.nope"),
]


@pytest.mark.parametrize(("env", "field", "words"), NATIVE_RUNTIME_BAD, ids=["variable", "extra-key"])
def test_a_missing_source_fails_the_native_task_leaving_nothing(runner_role, env, field, words, kube, admin,
                                                                 k8s_conn, dag_files, capfd):
    env = json.loads(json.dumps(env).replace("{conn}", k8s_conn))
    dag = dag_files.operator_dag(conn_id=k8s_conn, backend="native", job=native_job(env), deferrable=False)
    ti = dag.test().get_task_instance("train")
    text = "".join(capfd.readouterr())
    assert ti.state == "failed"
    line = next(line for line in text.splitlines() if words in line)
    assert f"{field}: " in line
    assert kube.list(JOB)[0] == []
    assert admin.list(SECRET, kube.namespace, labels={MANAGED_BY: "dlc-airflow"})[0] == []


@pytest.mark.parametrize(("backend", "job_type"), [
    ("native", "pytorch"), ("jobset", "pytorch"), ("kubeflow", "pytorch"), ("trainer", "pytorch"), ("ray", "ray"),
])
def test_every_backend_with_secrets_is_accepted_by_the_api_server(runner_role, kube, monkeypatch, backend, job_type):
    """What each Kubernetes backend submits for a job with every kind of source passes the real
    API server's validation (the CRDs' schemas too) as the restricted identity (dry run)."""
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.backends.jobsecret import fill_job_secret
    from dlc_airflow.spec import parse_job

    monkeypatch.setenv("AIRFLOW_VAR_ACCEPT_TOK", "accept-value-1")  # outside a task: the env backend
    roles = {"head": 1, "worker": 1} if job_type == "ray" else {"worker": 2}
    job = parse_job({"type": job_type, "image": "registry.local/train:1", "command": ["python", "train.py"],
                     "roles": roles, "env": {"DB_PASSWORD": {"secret": "db-creds", "key": "password"},
                                             "HF_TOKEN": {"airflow_variable": "accept_tok"},
                                             "API_TOKEN": "literal-accept-1"}})
    objects, values = fill_job_secret(get_backend(backend).render(job, "sec-1"), job, "sec-1")
    assert values == ["accept-value-1", "literal-accept-1"]
    assert [o["kind"] for o in objects][1] == "Secret"
    for obj in objects:
        kube.create(obj, kube.namespace, dry_run=True)


def test_adopting_a_job_keeps_its_secret_without_reading_it(runner_role, kube, admin, monkeypatch):
    """A retry adopts the job a cut-short try made (the Secret exists): the Role cannot get
    Secrets, and the submit completes the job without reading it back."""
    from dlc_airflow.k8s.backends import get_backend
    from dlc_airflow.k8s.runner import KubeRunner
    from dlc_airflow.naming import TaskIdentity
    from dlc_airflow.spec import parse_job

    monkeypatch.setenv("AIRFLOW_VAR_ADOPT_TOK", "adopt-value-1")  # outside a task: the env backend
    job = parse_job(native_job({"HF_TOKEN": {"airflow_variable": "adopt_tok"}}))
    identity = TaskIdentity(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1)
    runner = KubeRunner(kube, get_backend("native"), kube.namespace)
    name = "adopt-secret-1"
    objects = get_backend("native").render(job, name, identity, 1)
    from dlc_airflow.k8s.backends.jobsecret import fill_job_secret

    objects, _ = fill_job_secret(objects, job, name)
    primary = kube.create(objects[0], kube.namespace)  # a try cut short after its first two creates
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": primary["metadata"]["name"],
             "uid": primary["metadata"]["uid"]}
    kube.create({**objects[1], "metadata": {**objects[1]["metadata"], "ownerReferences": [owner]}}, kube.namespace)
    ref, created = runner.submit(job, name, identity, 1)
    assert created  # the Service and the worker Job
    assert len(kube.list(JOB, labels={LABEL_JOB: name})[0]) == 2
    secret = admin.get(SECRET, f"{name}-env", kube.namespace)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == primary["metadata"]["uid"]
    assert not kube.may("get", SECRET, kube.namespace)  # and it never could have read it


# -- the triggerer masks in its own process -----------------------------------------------------


def test_the_trigger_masks_the_values_itself_from_references(monkeypatch):
    """The trigger runs in another process than the task (the triggerer): it gets references
    to the Airflow sources (never their values) and registers the values it reads there."""
    import asyncio

    from airflow.sdk._shared.secrets_masker import redact, reset_secrets_masker

    from dlc_airflow.airflow.trigger import DLCJobTrigger
    from dlc_airflow.secrets.mask import TriggerSecrets
    from dlc_airflow.spec import parse_job

    tag = uuid.uuid4().hex[:8]
    values = {"A": f"trig-var-{tag}", "B": f"trig-login-{tag}", "C": f"trig-literal-{tag}"}
    monkeypatch.setenv("AIRFLOW_VAR_TRIG_HUB", values["A"])  # outside a task: the env backend
    monkeypatch.setenv("AIRFLOW_CONN_TRIG_WH", json.dumps({"conn_type": "http", "login": values["B"]}))
    job = parse_job({"image": "local", "command": ["true"], "env": {
        "A": {"airflow_variable": "trig_hub"}, "B": {"airflow_connection": "trig_wh", "field": "login"},
        "API_TOKEN": values["C"], "PLAIN": "plain-value-1"}})
    trigger = DLCJobTrigger(ref={"name": "j", "namespace": "/tmp", "backend": "local"},
                            secrets=TriggerSecrets.of(job).to_dict())
    _, kwargs = trigger.serialize()
    text = json.dumps(kwargs)
    assert values["A"] not in text and values["B"] not in text and "trig_hub" in text
    reset_secrets_masker()  # as a fresh triggerer process
    asyncio.run(trigger._mask_secrets(None))
    for value in values.values():
        assert redact(f"x {value}") == "x ***"
    assert redact("plain-value-1") == "plain-value-1"


# -- the real task logs: scheduler, LocalExecutor task supervisor, triggerer ------------------------


STACK_DAG = '''
import json
from datetime import datetime, timezone
from airflow.sdk import DAG
from dlc_airflow.operators import DLCJobOperator

JOB = json.loads({job!r})
with DAG("secrets_stack", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
         default_args={{"retries": 0}}):
    DLCJobOperator(task_id="sync", job=JOB, backend="native", conn_id={conn!r}, deferrable=False)
    DLCJobOperator(task_id="deferred", job=JOB, backend="native", conn_id={conn!r}, deferrable=True)
'''


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_task_and_trigger_logs_show_the_values_masked(runner_role, kube, admin, k8s_conn, tmp_path, monkeypatch):
    from tests.support.airflow_stack import AirflowStack

    tag = uuid.uuid4().hex[:10]
    values = {"HF_TOKEN": f"var-secret-{tag}", "WH_USER": f"conn-login-{tag}", "WH_TOKEN": f"conn-extra-{tag}",
              "API_TOKEN": f"literal-tok-{tag}"}
    # the connection from the environment (every component inherits it), the Variable in the stack's DB
    monkeypatch.setenv(f"AIRFLOW_CONN_WH_{tag.upper()}", json.dumps(
        {"conn_type": "http", "login": values["WH_USER"], "extra": {"token": values["WH_TOKEN"]}}))
    env = {"HF_TOKEN": {"airflow_variable": f"hub_{tag}"},
           "WH_USER": {"airflow_connection": f"wh_{tag}", "field": "login"},
           "WH_TOKEN": {"airflow_connection": f"wh_{tag}", "field": "extra.token"},
           "API_TOKEN": values["API_TOKEN"]}
    log_file = tmp_path / "train.log"
    log_file.write_text("".join(f"2026-12-02T10:00:0{i}.000000000Z stdout F {name}={value}\n"
                                for i, (name, value) in enumerate(values.items())))
    dags = tmp_path / "dags"
    dags.mkdir()
    job = native_job(env, run_for="8s")
    job["roles"] = {"worker": 1}
    (dags / "secrets_stack.py").write_text(STACK_DAG.format(job=json.dumps(job), conn=k8s_conn))
    undo = pod_logs(admin, kube.namespace, log_file)
    try:
        with AirflowStack(tmp_path / "home", dags,
                          components=("api-server", "scheduler", "dag-processor", "triggerer")) as stack:
            stack.airflow("variables", "set", f"hub_{tag}", values["HF_TOKEN"])
            stack.wait_for_dag("secrets_stack")
            stack.airflow("dags", "unpause", "secrets_stack")
            stack.airflow("dags", "trigger", "secrets_stack")
            (run,) = stack.wait_for_runs("secrets_stack", 1, states={"success", "failed"}, timeout=400)
            logs = {t: stack.task_log("secrets_stack", run["run_id"], t) for t in ("sync", "deferred")}
            states = stack.task_states("secrets_stack", run["run_id"])
    finally:
        undo()
    assert states == {"sync": "success", "deferred": "success"}, (states, {t: v[-3000:] for t, v in logs.items()})
    for task, text in logs.items():
        for name in values:  # the job's log lines reached the task log, each value masked
            assert f"{name}=***" in text, (task, name, text[-3000:])
        assert_clean(text, values, f"the task log of {task}")
