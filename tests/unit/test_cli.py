"""The `dlc-airflow` command line: validate, render, schema, and the example specs.

The installed console script is run as a subprocess for exit codes and streams; the matrix of
examples x backends calls the same `main` in-process (tests/cluster/test_cli_render.py sends
the console script's output to the API server).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlc_airflow.cli import main
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.k8s.backends import BACKENDS, get_backend
from dlc_airflow.spec import load_job, parse_job

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "specs").glob("*.yaml"))
SCRIPT = Path(sys.executable).with_name("dlc-airflow")


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dlc_airflow.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def supported_backends(path: Path) -> list[str]:
    job = load_job(path)
    out = []
    for name in BACKENDS:
        try:
            get_backend(name).check(job)
            out.append(name)
        except BackendError:
            pass
    return out


def test_one_realistic_example_per_job_type():
    assert {p.stem for p in EXAMPLES} == {t.value for t in JobType}
    for path in EXAMPLES:
        job = load_job(path)
        assert job.type.value == path.stem and job.name and job.image
        assert supported_backends(path) or job.type is JobType.slurm  # a batch script: backend="slurm" only


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_validate_prints_a_one_line_summary(path, capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__DLC_AIRFLOW__POLICY", raising=False)
    policy = []
    if load_job(path).storage:  # the slurm example's shared folder: a host path the default policy refuses
        (tmp_path / "policy.yaml").write_text("host_paths: [{prefix: /shared, writable: true}]\n")
        policy = ["--policy", str(tmp_path / "policy.yaml")]
    assert main(["validate", str(path), *policy]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{path}: valid {path.stem} job, ")
    assert out.rstrip().endswith(f"allowed by {'policy file ' if policy else 'the default policy'}"
                                 f"{tmp_path / 'policy.yaml' if policy else ' (no [dlc_airflow] policy is set)'}")
    for backend in supported_backends(path):
        assert main(["validate", str(path), "--backend", backend, *policy]) == 0
        assert f"{backend} backend renders" in capsys.readouterr().out


def test_validate_applies_the_policy_in_the_operators_words(tmp_path, capsys, monkeypatch):
    from dlc_airflow.airflow.policy_source import policy_for
    from dlc_airflow.policy import PolicyError, enforce

    spec = tmp_path / "job.yaml"
    spec.write_text("type: batch\nimage: docker.io/prep:1\ncommand: [prep]\n"
                    "storage: [{type: host_path, path: /tmp/out, mount_path: /out}]\n")
    # the Airflow config's policy, where Airflow is configured
    monkeypatch.setenv("AIRFLOW__DLC_AIRFLOW__POLICY", '{"registries": ["registry.example.com/"]}')
    assert main(["validate", str(spec), "--backend", "local"]) == 2
    err = capsys.readouterr().err
    policy, source = policy_for("local", None)  # what the operator applies
    assert source == "the Airflow config [dlc_airflow] policy (over the local backend's defaults)"
    with pytest.raises(PolicyError) as operator:
        enforce(policy, load_job(spec), source)
    assert err == f"error: {operator.value}\n" and err.startswith("error: refused by policy: image: ")
    # a cluster backend: the host path is refused by the defaults the config leaves
    assert main(["validate", str(spec), "--backend", "native"]) == 2
    assert "refused by policy: storage[0].path: host path '/tmp/out'" in capsys.readouterr().err
    # --policy FILE instead of the config
    (tmp_path / "p.json").write_text('{"max_replicas": 1}')
    assert main(["validate", str(spec), "--backend", "local", "--policy", str(tmp_path / "p.json")]) == 0
    assert f"allowed by policy file {tmp_path / 'p.json'} (over the local backend's defaults)" in \
        capsys.readouterr().out
    monkeypatch.delenv("AIRFLOW__DLC_AIRFLOW__POLICY")
    # the new user's local job: host paths are fine on the local backend
    assert main(["validate", str(spec), "--backend", "local"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize("content,words", [
    (None, ["cannot read policy file", "No such file"]),
    ("{max_replicas: [", ["cannot read policy file"]),
    ('{"max_replicas": 0}', ["invalid dlc policy in policy file", "max_replicas"]),
    ('{"hostpaths": []}', ["invalid dlc policy in policy file", "hostpaths"]),
    ("[1, 2]", ["invalid dlc policy in policy file"]),
])
def test_validate_refuses_a_bad_policy_file_in_one_line(tmp_path, capsys, content, words):
    spec = tmp_path / "job.yaml"
    spec.write_text("type: batch\nimage: docker.io/prep:1\ncommand: [prep]\n")
    policy = tmp_path / "policy.yaml"
    if content is not None:
        policy.write_text(content)
    assert main(["validate", str(spec), "--policy", str(policy)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert all(w in captured.err for w in words), captured.err


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_render_prints_the_backends_objects_as_yaml(path, capsys):
    job = load_job(path)
    for backend in supported_backends(path):
        assert main(["render", str(path), "--backend", backend]) == 0
        docs = list(yaml.safe_load_all(capsys.readouterr().out))
        assert docs == get_backend(backend).render(job, job.name)
        assert docs[0]["kind"] == get_backend(backend).kind(job).kind


def test_render_name_option(capsys):
    assert main(["render", str(EXAMPLES[0]), "--name", "other-name-1"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert all(d["metadata"]["name"].startswith("other-name-1") for d in docs)


@pytest.mark.parametrize("args, words", [
    (["validate", "{bad_yaml}"], ["not valid YAML", "line 3"]),
    (["validate", "{bad_spec}"], ["roles.worker.replicas", ">= 1"]),
    (["validate", "{missing}"], ["cannot read job spec"]),
    (["validate", "{pytorch}", "--backend", "ray"], ["'pytorch'", "ray backend", "backend="]),
    (["render", "{pytorch}", "--backend", "k8s"], ["unknown backend 'k8s'", "native", "local"]),
    (["render", "{slurm}", "--backend", "local"], ["job type 'slurm' cannot run on the local backend", "backend=", "'slurm'"]),
    (["render", "{bad_spec}"], ["roles.worker.replicas"]),
])
def test_errors_are_one_line_with_exit_code_2(tmp_path, args, words):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("type: pytorch\nimage: x\n  oops: [\n")
    bad_spec = tmp_path / "spec.yaml"
    bad_spec.write_text("type: batch\nimage: x\ncommand: [run]\nroles: {worker: 0}\n")
    paths = {"bad_yaml": bad_yaml, "bad_spec": bad_spec, "missing": tmp_path / "missing.yaml",
             "pytorch": REPO / "examples" / "specs" / "pytorch.yaml", "slurm": REPO / "examples" / "specs" / "slurm.yaml"}
    proc = cli(*(a.format(**paths) for a in args))
    assert proc.returncode == 2, proc
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert all(w in proc.stderr for w in words), proc.stderr


def test_console_script_validates_and_renders():
    path = REPO / "examples" / "specs" / "batch.yaml"
    proc = cli("validate", str(path))
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1 and proc.stderr == ""
    proc = cli("render", str(path))
    assert proc.returncode == 0 and [d["kind"] for d in yaml.safe_load_all(proc.stdout)] == ["Job", "Service"]


def test_schema_is_a_json_schema_the_examples_satisfy():
    proc = cli("schema")
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert schema["type"] == "object" and schema["title"] == "DLCJob"
    fields = {"name", "type", "image", "command", "roles", "resources", "storage", "scheduling"}
    assert fields <= set(schema["properties"])
    assert "image" in schema["required"]

    import jsonschema

    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in EXAMPLES:
        errors = [e.message for e in validator.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], f"{path.name}: {errors}"
    # what the validators take besides the models' types: shorthand, numbers, templates
    loose = {"type": "batch", "image": "x", "command": ["run"], "roles": {"worker": 4}, "max_running_time": 600,
             "ttl_after_finished": "1d", "resources": {"cpu": 4, "memory": "{{ params.memory }}"}}
    assert list(validator.iter_errors(loose)) == []
    assert parse_job(loose).resources.cpu == "4"
    # and it catches what an editor should flag
    bad = {"type": "pytorch", "image": "x", "gpus": 1, "resources": {"gpu": "many", "memory": "16GB"},
           "roles": {"worker": 0}}
    assert len(list(validator.iter_errors(bad))) >= 4
