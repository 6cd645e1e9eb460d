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
def test_validate_prints_a_one_line_summary(path, capsys):
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"{path}: valid {path.stem} job, ")
    for backend in supported_backends(path):
        assert main(["validate", str(path), "--backend", backend]) == 0
        assert f"{backend} backend renders" in capsys.readouterr().out


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
