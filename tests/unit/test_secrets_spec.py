"""Env values from secrets in the spec: shapes, refusals, render on every Kubernetes backend,
`dlc-airflow render`, and the local backend's run-time refusals (nothing left behind).

Airflow sources resolve through Airflow's own secrets backends: outside a task that is its
environment-variables backend (AIRFLOW_VAR_*, AIRFLOW_CONN_*), set per test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlc_airflow import specpack
from dlc_airflow.cli import main
from dlc_airflow.errors import SecretSourceError
from dlc_airflow.k8s.backends import get_backend
from dlc_airflow.local.jobs import JobFolders
from dlc_airflow.local.secrets import local_values
from dlc_airflow.secrets import mask, resolve
from dlc_airflow.spec import SpecError, json_schema, parse_job
from dlc_airflow.spec.envsource import AirflowConnectionRef, AirflowVariableRef, SecretKeyRef

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("dlc-airflow")
LITERAL = "literal-token-3f9a1c77"  # under a secret-looking name: hidden like the others

ENV = {
    "DB_PASSWORD": {"secret": "db-creds", "key": "password"},
    "HF_TOKEN": {"airflow_variable": "hf_token"},
    "WAREHOUSE": {"airflow_connection": "warehouse"},
    "API_TOKEN": LITERAL,
    "PLAIN": "plain-value",
}
ROLE_ENV = {"WH_TOKEN": {"airflow_connection": "warehouse", "field": "extra.token"}}


def spec(job_type: str = "pytorch", **extra) -> dict:
    roles = ({"head": 1, "worker": {"replicas": 1, "env": ROLE_ENV}} if job_type == "ray"
             else {"worker": {"replicas": 2, "env": ROLE_ENV}})
    return {"name": "train", "type": job_type, "image": "registry.local/train:1",
            "command": ["python", "train.py"], "env": dict(ENV), "roles": roles, **extra}


# -- shapes -------------------------------------------------------------------------------------


def test_sources_parse_and_stay_references_in_to_dict():
    job = parse_job(spec())
    assert job.env["DB_PASSWORD"] == SecretKeyRef(secret="db-creds", key="password")
    assert job.env["HF_TOKEN"] == AirflowVariableRef(airflow_variable="hf_token")
    assert job.env["WAREHOUSE"] == AirflowConnectionRef(airflow_connection="warehouse", field="password")
    assert job.roles["worker"].env["WH_TOKEN"].field == "extra.token"
    data = job.to_dict()
    assert data["env"]["HF_TOKEN"] == {"airflow_variable": "hf_token"}
    assert data["roles"]["worker"]["env"] == ROLE_ENV
    assert parse_job(data) == job  # what the operator serializes round-trips


def test_templated_names_are_checked_after_rendering():
    job = parse_job({**spec(), "env": {"X": {"secret": "{{ params.secret }}", "key": "{{ params.key }}"}}})
    assert job.env["X"].secret == "{{ params.secret }}"


def test_the_json_schema_describes_the_sources():
    text = json.dumps(json_schema())
    for name in ("SecretKeyRef", "AirflowVariableRef", "AirflowConnectionRef"):
        assert name in text


BAD = [
    ({"X": {"secrt": "db", "key": "k"}}, "env.X", "is not a source"),
    ({"X": {"secret": "db"}}, "env.X", "needs key"),
    ({"X": {"secret": "db", "key": "k", "airflow_variable": "v"}}, "env.X", "one source"),
    ({"X": {"valueFrom": {"secretKeyRef": {"name": "db", "key": "k"}}}}, "env.X", "{secret: <name>, key: <key>}"),
    ({"X": {"airflow_connection": "wh", "field": "pwd"}}, "env.X", "field 'pwd'"),
    ({"X": {"airflow_connection": "wh", "field": "extra."}}, "env.X", "extra.<key>"),
    ({"X": {"secret": "DB_Creds", "key": "k"}}, "env.X", "DNS subdomain"),
    ({"X": {"secret": "db", "key": "a/b"}}, "env.X", "not a Secret key"),
    ({"X": {"airflow_variable": ""}}, "env.X", "non-empty string"),
    ({"X": {"airflow_variable": 3}}, "env.X", "non-empty string"),
    ({"X": {"secret": "db", "key": "k", "optional": True}}, "env.X", "unknown field 'optional'"),
    ({"X": 5}, "env.X", "must be a string"),
    ({"X": None}, "env.X", "must be a string"),
    ({"X": ["a"]}, "env.X", "must be a string"),
    ({"X": {}}, "env.X", "is not a source"),
]


@pytest.mark.parametrize(("env", "field", "words"), BAD, ids=[f"{i}-{b[2]}" for i, b in enumerate(BAD)])
@pytest.mark.parametrize("level", ["job", "role"])
def test_bad_sources_are_refused_in_one_line_naming_the_field(env, field, words, level, tmp_path):
    data = spec()
    if level == "role":
        data["roles"]["worker"]["env"] = env
        field = "roles.worker." + field
    else:
        data["env"] = env
    with pytest.raises(SpecError) as err:
        parse_job(data)
    message = str(err.value)
    assert "\n" not in message and f"{field}:" in message and words in message, message
    # nothing is left behind: the local backend refuses it before making a job folder
    root = tmp_path / "jobs"
    with pytest.raises(SpecError):
        JobFolders(root).submit(data, "bad-1", {"dlc-airflow/task-key": "k"})
    assert not root.exists() or not any(root.iterdir())


def test_a_bad_source_in_a_spec_file_fails_the_cli_naming_the_field(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**spec(), "env": {"DB_PASSWORD": {"secret": "db"}}}))
    result = cli("render", str(path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "env.DB_PASSWORD" in result.stderr and "needs key" in result.stderr


# -- render -------------------------------------------------------------------------------------


def _containers(obj: dict):
    """Every container (and the trainer's env holder) in a rendered object."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            if "env" in node and isinstance(node["env"], list) and ("image" in node or "numNodes" in node):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj)
    return found


@pytest.mark.parametrize(("backend", "job_type"), [
    ("native", "pytorch"), ("jobset", "pytorch"), ("kubeflow", "pytorch"), ("trainer", "pytorch"), ("ray", "ray"),
])
def test_every_kubernetes_backend_references_secrets_and_holds_no_value(backend, job_type):
    job = parse_job(spec(job_type))
    objects = get_backend(backend).render(job, "train-1")
    text = json.dumps(objects)
    assert LITERAL not in text and "plain-value" in text
    # the job's own Secret comes right after the primary, with placeholders naming the sources
    secret = objects[1]
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "train-1-env"
    assert secret["stringData"] == {
        "HF_TOKEN": "<airflow_variable hf_token>",
        "WAREHOUSE": "<airflow_connection warehouse password>",
        "API_TOKEN": "<env.API_TOKEN: literal, hidden>",
        "worker.WH_TOKEN": "<airflow_connection warehouse extra.token>",
    }
    assert secret["metadata"]["labels"]["dlc-airflow/job-name"] == "train-1"
    containers = _containers(objects)
    assert containers
    for container in containers:
        env = {e["name"]: e for e in container["env"]}
        assert env["DB_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "db-creds", "key": "password"}}
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "train-1-env", "key": "HF_TOKEN"}}
        assert env["API_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "train-1-env", "key": "API_TOKEN"}}
        assert env["PLAIN"] == {"name": "PLAIN", "value": "plain-value"}
        assert all("value" not in env[n] for n in ("DB_PASSWORD", "HF_TOKEN", "WAREHOUSE", "API_TOKEN"))
    # the role's own source reaches the worker's pods only (Kubeflow's xgboost, Ray's head: no)
    workers = [c for c in containers if any(e["name"] == "WH_TOKEN" for e in c["env"])]
    assert workers
    for container in workers:
        wh = next(e for e in container["env"] if e["name"] == "WH_TOKEN")
        assert wh["valueFrom"] == {"secretKeyRef": {"name": "train-1-env", "key": "worker.WH_TOKEN"}}


def test_without_hidden_values_there_is_no_job_secret():
    job = parse_job({**spec(), "env": {"DB_PASSWORD": {"secret": "db-creds", "key": "password"}, "A": "b"},
                     "roles": {"worker": 2}})
    objects = get_backend("native").render(job, "train-1")
    assert [o["kind"] for o in objects].count("Secret") == 0


def test_a_role_value_equal_to_the_jobs_shares_its_key():
    data = spec()
    data["roles"]["worker"]["env"] = {"HF_TOKEN": {"airflow_variable": "hf_token"}}
    objects = get_backend("native").render(parse_job(data), "train-1")
    assert set(objects[1]["stringData"]) == {"HF_TOKEN", "WAREHOUSE", "API_TOKEN"}


def test_a_key_clash_in_the_job_secret_is_refused():
    data = spec()
    data["env"]["worker.WH_TOKEN"] = {"airflow_variable": "other"}
    with pytest.raises(Exception) as err:
        get_backend("native").render(parse_job(data), "train-1")
    assert "env.worker.WH_TOKEN" in str(err.value) and "roles.worker.env.WH_TOKEN" in str(err.value)


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dlc_airflow.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_render_output_shows_references_never_values(tmp_path, monkeypatch):
    # even with the sources resolvable in this environment, render reads none of them
    monkeypatch.setenv("AIRFLOW_VAR_HF_TOKEN", "var-value-81c2d0e4")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec()))
    result = cli("render", str(path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert LITERAL not in out and "var-value-81c2d0e4" not in out
    assert "<airflow_variable hf_token>" in out and "<env.API_TOKEN: literal, hidden>" in out
    assert "secretKeyRef" in out and "name: db-creds" in out
    kinds = [o["kind"] for o in yaml.safe_load_all(out)]
    assert kinds[:2] == ["Job", "Secret"]


def test_validate_counts_the_job_secret(tmp_path, capsys):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec()))
    assert main(["validate", str(path), "--backend", "native"]) == 0
    assert "native backend renders 3 objects" in capsys.readouterr().out  # the Job, its Secret, the Service


# -- Airflow's sensitive-name rules -------------------------------------------------------------


def test_secret_looking_names_follow_airflows_rules(monkeypatch):
    for name in ("DB_PASSWORD", "HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "HTTPS_PROXY"):
        assert resolve.is_sensitive(name), name
    for name in ("MASTER_ADDR", "DATA_DIR", "PLAIN"):
        assert not resolve.is_sensitive(name), name
    monkeypatch.setenv("AIRFLOW__CORE__SENSITIVE_VAR_CONN_NAMES", "wandb_entity,cookie")
    assert resolve.is_sensitive("WANDB_ENTITY") and resolve.is_sensitive("MY_COOKIE")
    monkeypatch.setenv("AIRFLOW__CORE__HIDE_SENSITIVE_VAR_CONN_FIELDS", "False")
    assert not resolve.is_sensitive("DB_PASSWORD")


def test_what_is_masked_includes_each_line_of_a_key_file():
    key = "-----BEGIN KEY-----\nabcdefghijkl\nmnopqrstuvwx\n-----END KEY-----"
    masked = mask.maskable([key, "abc", "long-enough"])
    assert key in masked and "abcdefghijkl" in masked and "long-enough" in masked and "abc" not in masked
    redact = mask.redactor([key, "long-enough"])
    assert redact(b"x long-enough y abcdefghijkl\n") == b"x *** y ***\n"


# -- the local backend: run-time sources, refused before anything is made -----------------------


LOCAL_BAD = [
    ({"TOKEN": {"airflow_variable": "no_such_var_x1"}}, "env.TOKEN", "Airflow variable 'no_such_var_x1' does not exist"),
    ({"PW": {"airflow_connection": "no_such_conn_x1"}}, "env.PW", "Airflow connection 'no_such_conn_x1' does not exist"),
    ({"PW": {"airflow_connection": "dlc_nopw"}}, "env.PW", "Airflow connection 'dlc_nopw' has no password"),
    ({"T": {"airflow_connection": "dlc_nopw", "field": "extra.token"}}, "env.T", "has no extra.token"),
    ({"K": {"secret": "db-creds", "key": "missing"}}, "env.K", "Secret 'db-creds' has no key 'missing'"),
]


@pytest.mark.parametrize(("env", "field", "words"), LOCAL_BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(LOCAL_BAD)])
def test_local_sources_that_cannot_be_read_leave_nothing_behind(env, field, words, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_DLC_NOPW", json.dumps({"conn_type": "http", "host": "h", "login": "u"}))
    root = tmp_path / "jobs"
    (root / "volumes" / "secret-db-creds").mkdir(parents=True)
    (root / "volumes" / "secret-db-creds" / "password").write_text("x")
    job = parse_job({"image": "local", "command": ["true"], "env": env})
    with pytest.raises(SecretSourceError) as err:
        JobFolders(root).submit(job, "job-1", {"dlc-airflow/task-key": "k"})
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{field}: ") and words in message, message
    assert err.value.permanent
    assert sorted(p.name for p in root.iterdir()) == ["volumes"]  # no job folder, no staging folder


def test_local_spec_json_holds_references_and_hides_secret_literals(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_VAR_HF_TOKEN", "var-value-2b7e9d11")
    job = parse_job({"image": "local", "command": ["true"],
                     "env": {"HF_TOKEN": {"airflow_variable": "hf_token"}, "API_TOKEN": LITERAL, "A": "b"}})
    stored = specpack.stored(job)
    assert stored["env"] == {"HF_TOKEN": {"airflow_variable": "hf_token"}, "API_TOKEN": resolve.HIDDEN, "A": "b"}
    values = local_values(job, tmp_path)
    assert values == {"env": {"HF_TOKEN": "var-value-2b7e9d11", "API_TOKEN": LITERAL}}
    restored = resolve.with_values(parse_job(stored), values)
    assert restored.env == {"HF_TOKEN": "var-value-2b7e9d11", "API_TOKEN": LITERAL, "A": "b"}
