"""The bad-input catalogue (issue 9, item 6): what a new user or a careless DAG author writes,
each refused (a) at DAG parse time or by the CLI, (b) in one line that names the field or
argument and says what to do, (c) leaving nothing behind: no local job folder, no process,
no manifest entry. The cases that reach the API server are in
tests/cluster/test_bad_input_cluster.py; tests/unit/test_spec_errors.py has the first 82 spec
cases, which this extends rather than repeats.

Table-driven: each table maps a case name to (input, words the message must contain).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from dlc_airflow.spec import DLCJob, Resources, Role, SpecError, load_job, parse_job

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("dlc-airflow")
BASE = {"type": "pytorch", "image": "registry.example.com/train:1", "command": ["python", "train.py"]}
BATCH = {"type": "batch", "image": "registry.example.com/prep:1", "command": ["prep"]}
SHA = "sha256:" + "0" * 64


def one_line(message: str, words: list[str]) -> None:
    assert "\n" not in message, f"more than one line: {message!r}"
    assert "Traceback" not in message and "pydantic" not in message and "errors.pydantic.dev" not in message
    missing = [w for w in words if w not in message]
    assert not missing, f"message does not say {missing}: {message}"


@pytest.fixture
def leftovers(tmp_path):
    """Asserts, after the case, that it made no job folder and started no process."""
    root = tmp_path / "jobs"
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def check() -> None:
        assert not root.exists() or not any(root.iterdir()), f"left behind: {list(root.iterdir())}"
        started = {p.pid for p in psutil.Process().children(recursive=True)} - before
        assert not started, f"processes left behind: {started}"

    check.root = root
    return check


def mount(kind: str = "pvc", **kw) -> dict:
    base = {"pvc": {"claim_name": "data"}, "nfs": {"server": "nas", "path": "/exports"},
            "host_path": {"path": "/mnt/data"}, "csi": {"driver": "csi.example.com"},
            "config_map": {"name": "cfg"}, "secret": {"name": "creds"}, "empty_dir": {}}[kind]
    return {"type": kind, "mount_path": "/data", **base, **kw}


def code(**kw) -> dict:
    return {"code": {"repo": "https://git.example.com/ml/train.git", **kw}}


# -- the job spec ---------------------------------------------------------------------------
SPEC = {
    # a token in the clone URL would be stored in the job and printed by git
    "code.repo with a token": (code(repo="https://ci:ghp_s3cr3tT0ken@git.example.com/ml/train.git"),
                               ["code.repo", "https://ci:***@git.example.com/ml/train.git", "code.secret_name"]),
    # a Kueue priority without a queue would be silently ignored
    "queue_priority without queue": ({"scheduling": {"queue_priority": "production"}},
                                     ["scheduling", "queue_priority 'production'", "set scheduling.queue"]),
    "queue_priority: Production": ({"scheduling": {"queue": "team-a", "queue_priority": "Production"}},
                                   ["queue_priority 'Production'", "lowercase DNS name"]),
    # Kueue places by topology: without a queue nothing would
    "topology without queue": ({"scheduling": {"topology": {"required": "cloud.provider.com/topology-rack"}}},
                               ["scheduling.topology", "needs a queue", "set scheduling.queue"]),
    "topology: no level": ({"scheduling": {"queue": "team-a", "topology": {}}},
                           ["scheduling.topology", "exactly one of required or preferred"]),
    "topology: both levels": ({"scheduling": {"queue": "team-a", "topology": {"required": "a.io/rack",
                                                                               "preferred": "a.io/block"}}},
                              ["scheduling.topology", "exactly one of required or preferred"]),
    "topology: a level that is no label": ({"scheduling": {"queue": "team-a", "topology": {"required": "rack!"}}},
                                           ["scheduling.topology.required", "node label", "'rack!'"]),
    "topology: slice_size alone": ({"scheduling": {"queue": "team-a", "topology": {"required": "a.io/rack",
                                                                                   "slice_size": 2}}},
                                   ["scheduling.topology", "slice_level and slice_size go together"]),
    # a bool is not a replica count, and a replica count is a whole number
    "worker: true": ({"roles": {"worker": True}}, ["roles.worker.replicas", "whole number", "true"]),
    "worker: false": ({"roles": {"worker": False}}, ["roles.worker.replicas", "whole number", "false"]),
    "worker: 2.5": ({"roles": {"worker": 2.5}}, ["roles.worker.replicas", "whole number", "2.5"]),
    "worker: 'two'": ({"roles": {"worker": "two"}}, ["roles.worker.replicas", "whole number", "'two'"]),
    "worker: null": ({"roles": {"worker": None}}, ["roles", "'worker'", "number of replicas"]),
    # a discriminated union's member without its tag (pydantic: "Unable to extract tag ...")
    "storage without type": ({"storage": [{"mount_path": "/data"}]},
                             ["storage[0]: type is missing: set type to one of", "host_path", "pvc"]),
    "second storage without type": ({"storage": [mount(), {"claim_name": "x", "mount_path": "/x"}]},
                                    ["storage[1]: type is missing", "empty_dir"]),
    "storage type s3": ({"storage": [{"type": "s3", "mount_path": "/data"}]},
                        ["storage[0]: type 's3' is unknown: set type to one of", "csi"]),
    "storage type null": ({"storage": [{"type": None, "mount_path": "/data"}]}, ["storage[0]: type", "unknown"]),
    # the API server's size limits: a label value, one object's annotations (ours count too)
    "label value of 300 characters": ({"labels": {"team": "x" * 300}},
                                      ["label team: the value is 300 characters", "at most 63", "annotation"]),
    "annotations over 256 KiB": ({"annotations": {"notes": "x" * (256 * 1024)}},
                                 ["annotations: 262149 bytes of your annotations", "dlc-airflow's (the packed spec",
                                  "262144 bytes per object", "ConfigMap"]),
    "annotations just under 256 KiB with ours": ({"annotations": {"a": "x" * (256 * 1024 - 600)}},
                                                 ["annotations:", "of dlc-airflow's", "262144"]),
    "a spec too large to pack": ({"env": {f"E{i}": random.Random(i).randbytes(100).hex() for i in range(2000)}},
                                 ["the job spec (packed into an annotation)", "262144"]),
    "worker: a list": ({"roles": {"worker": [1, 2]}}, ["roles", "'worker'", "number of replicas"]),
    "replicas: true": ({"roles": {"worker": {"replicas": True}}}, ["roles.worker.replicas", "whole number"]),
    "replicas: 1.5": ({"roles": {"worker": {"replicas": 1.5}}}, ["roles.worker.replicas", "whole number", "1.5"]),
    "replicas: '3 pods'": ({"roles": {"worker": {"replicas": "3 pods"}}}, ["roles.worker.replicas", "whole number"]),
    "master: true": ({"roles": {"master": True, "worker": 2}}, ["roles.master.replicas", "whole number"]),
    "gpu: true": ({"resources": {"gpu": True}}, ["resources.gpu", "whole number", "true"]),
    "role gpu: true": ({"roles": {"worker": {"replicas": 2, "resources": {"gpu": True}}}},
                       ["roles.worker.resources.gpu", "whole number"]),
    "rdma: true": ({"resources": {"rdma": True}}, ["resources.rdma", "whole number"]),
    "rdma: 1.5": ({"resources": {"rdma": 1.5}}, ["resources.rdma", "whole number", "1.5"]),
    "negative rdma": ({"resources": {"rdma": -1}}, ["resources.rdma", "greater than or equal to 0"]),
    "port: true": ({"port": True}, ["port", "whole number", "true"]),
    "port: 0": ({"port": 0}, ["port", "greater than or equal to 1"]),
    "port: '29500x'": ({"port": "29500x"}, ["port", "whole number"]),
    "nproc_per_node: true": ({"nproc_per_node": True}, ["nproc_per_node", "whole number"]),
    "nproc_per_node: 0": ({"nproc_per_node": 0}, ["nproc_per_node", "greater than or equal to 1"]),
    "nproc_per_node: 2.5": ({"nproc_per_node": 2.5}, ["nproc_per_node", "whole number", "2.5"]),
    "slots_per_worker: true": ({"type": "mpi", "roles": {"launcher": 1, "worker": 2}, "slots_per_worker": True},
                               ["slots_per_worker", "whole number"]),
    "slots_per_worker: 0": ({"type": "mpi", "roles": {"launcher": 1, "worker": 2}, "slots_per_worker": 0},
                            ["slots_per_worker", "greater than or equal to 1"]),
    "max_restarts: true": ({"fault_tolerance": {"max_restarts": True}}, ["fault_tolerance.max_restarts", "whole number"]),
    "max_restarts: 0.5": ({"fault_tolerance": {"max_restarts": 0.5}}, ["fault_tolerance.max_restarts", "whole number"]),
    "retryable exit code 0": ({"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [0]}},
                              ["retryable_exit_codes", "0 is success"]),
    "retryable exit code true": ({"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [True]}},
                                 ["fault_tolerance.retryable_exit_codes", "[0]", "whole number"]),
    "retryable exit code 1.5": ({"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [137, 1.5]}},
                                ["retryable_exit_codes", "[1]", "whole number", "1.5"]),
    "retryable exit code 256": ({"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [256]}},
                                ["retryable_exit_codes", "1..255"]),
    "retryable exit code 'oom'": ({"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": ["oom"]}},
                                  ["retryable_exit_codes", "whole number", "'oom'"]),
    "restart_on_preemption: 'yes'": ({"fault_tolerance": {"restart_on_preemption": "yes"}},
                                     ["fault_tolerance.restart_on_preemption", "true or false", "'yes'"]),
    "restart_on_preemption: 1": ({"fault_tolerance": {"restart_on_preemption": 1}},
                                 ["restart_on_preemption", "true or false"]),
    "elastic min_replicas: true": ({"elastic": {"min_replicas": True, "max_replicas": 2}},
                                   ["elastic.min_replicas", "whole number"]),
    "elastic max_restarts: -1": ({"elastic": {"min_replicas": 1, "max_replicas": 2, "max_restarts": -1}},
                                 ["elastic.max_restarts", "greater than or equal to 0"]),
    "elastic max_replicas: 2.5": ({"elastic": {"min_replicas": 1, "max_replicas": 2.5}},
                                  ["elastic.max_replicas", "whole number"]),
    "checkpoint keep_last: true": ({"checkpoint": {"uri": "file:///ckpt", "keep_last": True}},
                                   ["checkpoint.keep_last", "whole number"]),
    "checkpoint keep_last: 0": ({"checkpoint": {"uri": "file:///ckpt", "keep_last": 0}},
                                ["checkpoint.keep_last", "greater than or equal to 1"]),
    "read_only: 'no'": ({"storage": [mount(read_only="no")]}, ["storage[0].read_only", "true or false", "'no'"]),
    "read_only: 'yes'": ({"storage": [mount(read_only="yes")]}, ["storage[0].read_only", "true or false"]),
    "read_only: 1": ({"storage": [mount(read_only=1)]}, ["storage[0].read_only", "true or false", "1"]),
    "read_only: 'true'": ({"storage": [mount("nfs", read_only="true")]}, ["storage[0].read_only", "true or false"]),
    "host_path read_only: 0": ({"storage": [mount("host_path", read_only=0)]},
                               ["storage[0].read_only", "true or false"]),
    "empty_dir memory: 'on'": ({"storage": [mount("empty_dir", memory="on")]}, ["storage[0].memory", "true or false"]),
    "second mount read_only: 'no'": ({"storage": [mount(), mount("secret", mount_path="/s", read_only="no")]},
                                     ["storage[1].read_only", "true or false"]),
    # durations
    "negative max_running_time": ({"max_running_time": -5}, ["max_running_time", "positive"]),
    "max_running_time: true": ({"max_running_time": True}, ["max_running_time", "seconds", "True"]),
    "max_running_time: nan": ({"max_running_time": math.nan}, ["max_running_time", "not a duration"]),
    "max_running_time: inf": ({"max_running_time": math.inf}, ["max_running_time", "not a duration"]),
    "max_running_time: 10**20": ({"max_running_time": 10**20}, ["max_running_time", "too long"]),
    "negative ttl": ({"ttl_after_finished": "-1h"}, ["ttl_after_finished", "not a duration"]),
    # image references (the OCI distribution grammar)
    "uppercase repository": ({"image": "Registry.Example.com/Train:1"},
                             ["image", "'Registry.Example.com/Train:1'", "lowercase"]),
    "two tags and digests": ({"image": "registry/train::1@@x"}, ["image", "more than one '@'"]),
    "two tags": ({"image": "registry/train::1"}, ["image", "one tag at most"]),
    "empty tag": ({"image": "registry/train:"}, ["image", "tag ''"]),
    "tag starting with '-'": ({"image": "registry/train:-rc1"}, ["image", "tag '-rc1'"]),
    "tag of 129 characters": ({"image": "registry/train:" + "a" * 129}, ["image", "1-128"]),
    "short digest": ({"image": "registry/train@sha256:abc"}, ["image", "digest 'sha256:abc'", "algorithm:hex"]),
    "digest without algorithm": ({"image": "registry/train@" + "0" * 64}, ["image", "digest", "algorithm:hex"]),
    "scheme in the image": ({"image": "https://registry.example.com/train:1"}, ["image", "no scheme"]),
    "registry with a bad port": ({"image": "registry.example.com:port/train:1"}, ["image", "registry"]),
    "double slash": ({"image": "registry.example.com//train:1"}, ["image", "repository path component"]),
    "trailing separator": ({"image": "registry.example.com/train-:1"}, ["image", "'train-'"]),
    "uppercase single name": ({"image": "Train"}, ["image", "lowercase"]),
    "tab in the image": ({"image": "train:1\t"}, ["image", "whitespace"]),
    "role image uppercase": ({"roles": {"worker": {"replicas": 2, "image": "registry/Train:2"}}},
                             ["roles.worker.image", "lowercase"]),
    "role image empty": ({"roles": {"worker": {"replicas": 2, "image": ""}}}, ["roles.worker.image", "empty"]),
    "code image with two tags": (code(image="alpine/git:2:47"), ["code.image", "one tag at most"]),
    # git source
    "repo not a url": (code(repo="not a url"), ["code.repo", "'not a url'", "https://", "user@host:path"]),
    "repo relative path": (code(repo="ml/train.git"), ["code.repo", "scp-like"]),
    "repo ftp scheme": (code(repo="ftp://git.example.com/x.git"), ["code.repo", "ftp://", "https://"]),
    "repo without host": (code(repo="https:///x.git"), ["code.repo", "host"]),
    "repo without path": (code(repo="https://git.example.com"), ["code.repo", "repository path"]),
    "repo starting with '-'": (code(repo="--upload-pack=touch /tmp/x"), ["code.repo", "'-'", "option"]),
    "repo ext:: helper": (code(repo="ext::ssh"), ["code.repo", "remote helpers"]),
    "repo relative file url": (code(repo="file://repo.git"), ["code.repo", "absolute path"]),
    "repo bad port": (code(repo="https://git.example.com:http/x.git"), ["code.repo", "port"]),
    "repo empty": (code(repo=""), ["code.repo", "not a git repository"]),
    "revision with ';'": (code(revision="main; rm -rf /"), ["code.revision", "';'", "branch, tag or commit"]),
    "revision with $()": (code(revision="$(curl evil)"), ["code.revision", "'$()'"]),
    "revision with backticks": (code(revision="`id`"), ["code.revision", "'`'"]),
    "revision with '|'": (code(revision="main|sh"), ["code.revision", "'|'"]),
    "revision with a newline": (code(revision="main\nrm"), ["code.revision", "whitespace"]),
    "revision with a space": (code(revision="release 1"), ["code.revision", "whitespace"]),
    "revision option": (code(revision="--orphan"), ["code.revision", "'-'", "option"]),
    "revision with '..'": (code(revision="main..dev"), ["code.revision", "git ref"]),
    "revision ending in .lock": (code(revision="main.lock"), ["code.revision", ".lock"]),
    "revision HEAD~1": (code(revision="HEAD~1"), ["code.revision", "'~'"]),
    "revision empty": (code(revision=""), ["code.revision", "empty"]),
    # shapes pydantic would otherwise report in its own words
    "roles as a list": ({"roles": ["worker"]}, ["roles", "valid dictionary"]),
    "command as a string": ({"command": "python train.py"}, ["command", "valid list"]),
    "storage as a mapping": ({"storage": mount()}, ["storage", "valid list"]),
    "resources as a number": ({"resources": 4}, ["resources", "valid dictionary"]),
    "role name with a newline": ({"type": "custom", "roles": {"a\nb": 1}}, ["roles.a b", "DNS label"]),
    "many wrong env values": ({"env": {f"E{i}": [i] for i in range(8)}}, ["env.E0", "(and ", " more)"]),
}


@pytest.mark.parametrize("overrides, words", SPEC.values(), ids=SPEC.keys())
def test_spec(overrides, words, leftovers):
    from dlc_airflow.operators import DLCJobOperator

    spec = {**BASE, **overrides}
    with pytest.raises(SpecError) as err:
        parse_job(spec)
    one_line(str(err.value), ["invalid job spec: ", *words])
    # and the operator refuses it at DAG parse time: nothing is made, on the local backend either
    with pytest.raises(SpecError) as err:
        DLCJobOperator(task_id="train", job=spec, backend="local", local_root=str(leftovers.root))
    one_line(str(err.value), ["invalid job of task train: ", *words])
    leftovers()


DIRECT = {
    "DLCJob(image=...) with whitespace": (lambda: DLCJob(image="my image", command=["x"]), ["job spec", "image"]),
    "DLCJob without image": (lambda: DLCJob(command=["x"]), ["job spec", "image", "required"]),
    "Role(replicas=True)": (lambda: Role(replicas=True), ["Role spec", "replicas", "whole number"]),
    "Resources(gpu='x')": (lambda: Resources(gpu="x"), ["Resources spec", "gpu"]),
    "assigning replicas=True": (lambda: setattr(DLCJob(**BASE).roles["worker"], "replicas", True),
                                ["Role spec", "replicas", "whole number"]),
    "assigning a bad image": (lambda: setattr(DLCJob(**BASE), "image", "A/B"), ["job spec", "image", "lowercase"]),
}


@pytest.mark.parametrize("make, words", DIRECT.values(), ids=DIRECT.keys())
def test_models_built_in_python_fail_in_one_line_too(make, words):
    """DLCJob(...) in a DAG file raises SpecError (a ValueError) in one line, not pydantic's dump."""
    with pytest.raises(SpecError) as err:
        make()
    one_line(str(err.value), ["invalid ", *words])


def _spec_models() -> set[type]:
    """Every pydantic model reachable from DLCJob's fields (through lists, dicts, unions)."""
    import typing

    from pydantic import BaseModel

    found: set[type] = set()

    def walk(annotation) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.add(annotation)
                for field in annotation.model_fields.values():
                    walk(field.annotation)
        for arg in typing.get_args(annotation):
            walk(arg)

    walk(DLCJob)
    return found


def test_every_count_and_switch_of_every_spec_model_is_strict():
    """No bool-as-int and no "no"-as-bool anywhere, fields added later included: each int,
    list-of-int and bool field of each model refuses the wrong kind, naming the field."""
    from pydantic import ValidationError

    from dlc_airflow.spec.fields import scalar_kind

    checked = []
    for model in sorted(_spec_models(), key=lambda m: m.__name__):
        for name, field in model.model_fields.items():
            kind = scalar_kind(field.annotation)
            if kind is None:
                continue
            bad = {"int": True, "ints": [False], "bool": "no"}[kind]
            with pytest.raises(ValidationError) as err:
                model.model_validate({name: bad})
            mine = [e for e in err.value.errors() if e["loc"][:1] == (name,)]
            assert mine and ("whole number" in mine[0]["msg"] or "true or false" in mine[0]["msg"]), \
                f"{model.__name__}.{name} took {bad!r}: {err.value.errors()}"
            checked.append(f"{model.__name__}.{name}")
    assert {"Role.replicas", "Resources.gpu", "PVCMount.read_only", "FaultTolerance.retryable_exit_codes",
            "DLCJob.port", "Elastic.min_replicas"} <= set(checked), checked


def test_templated_values_still_pass_at_parse_time():
    job = parse_job({**BASE, "image": "{{ var.value.image }}", "roles": {"worker": {"replicas": 2,
                     "image": "registry/{{ params.flavour }}:1"}},
                     "code": {"repo": "{{ var.value.repo }}", "revision": "{{ params.sha }}"}})
    assert job.image == "{{ var.value.image }}" and job.code.revision == "{{ params.sha }}"
    for good in ("registry.example.com/team/train:1.0", "Registry.Example.com/train:1", "localhost:5000/a/b",
                 f"train@{SHA}", f"a__b/c--d.e:v1_2@{SHA}", "[::1]:5000/x:y", "python"):
        assert parse_job({**BASE, "image": good}).image == good
    for repo in ("git@github.com:org/repo.git", "ssh://git@host:2222/x.git", "git://host/x", "file:///srv/x.git",
                 "/srv/git/x.git", "github.com:org/repo"):
        assert parse_job({**BASE, "code": {"repo": repo, "revision": "refs/pull/7/head"}}).code.repo == repo


# -- spec files -----------------------------------------------------------------------------
FILES = {
    "duplicate top-level key": ("job.yaml", "type: batch\nimage: a\nimage: b\ncommand: [x]\n",
                                ["duplicate key 'image' at line 3 (first at line 2)"]),
    "duplicate nested key": ("job.yaml", "type: batch\nimage: a\ncommand: [x]\nresources:\n  gpu: 1\n  cpu: 2\n"
                             "  gpu: 2\n", ["duplicate key 'gpu' at line 7 (first at line 5)"]),
    "duplicate role": ("job.yaml", "type: pytorch\nimage: a\ncommand: [x]\nroles:\n  worker: 2\n  worker: 4\n",
                       ["duplicate key 'worker' at line 6"]),
    "duplicate key in a flow mapping": ("job.yaml", "type: batch\nimage: a\ncommand: [x]\nenv: {A: '1', A: '2'}\n",
                                        ["duplicate key 'A' at line 4"]),
    "duplicate key in a mount": ("job.yaml", "type: batch\nimage: a\ncommand: [x]\nstorage:\n- type: pvc\n"
                                 "  claim_name: d\n  mount_path: /a\n  mount_path: /b\n",
                                 ["duplicate key 'mount_path' at line 8"]),
    "duplicate JSON key": ("job.json", '{"type": "batch", "image": "a", "command": ["x"], "type": "mpi"}',
                           ["duplicate key 'type'", "JSON"]),
    "not UTF-8": ("job.yaml", b"type: batch\nimage: \xff\xfe\n", ["not UTF-8"]),
    "two YAML documents": ("job.yaml", "type: batch\n---\nimage: a\n", ["not valid YAML", "single document"]),
    "python object tag": ("job.yaml", "type: !!python/object/apply:os.system ['id']\n", ["not valid YAML", "line 1"]),
    "a scalar": ("job.yaml", "just a string\n", ["a job spec is a mapping"]),
    "empty file": ("job.yaml", "", ["a job spec is a mapping"]),
    "JSON list": ("job.json", "[1, 2]", ["a job spec is a mapping"]),
    "tab indentation": ("job.yaml", "type: batch\nresources:\n\tgpu: 1\n", ["not valid YAML", "line 3"]),
    "bool replicas in YAML": ("job.yaml", "type: batch\nimage: a\ncommand: [x]\nroles: {worker: yes}\n",
                              ["roles.worker.replicas", "whole number", "true"]),
    "quoted 'no' in YAML": ("job.yaml", "type: batch\nimage: a\ncommand: [x]\nstorage:\n- {type: pvc, claim_name: d, "
                            "mount_path: /d, read_only: 'no'}\n", ["storage[0].read_only", "true or false"]),
    "a directory": ("dir", None, ["cannot read job spec"]),
}


def _write(tmp_path: Path, name: str, content: str | bytes | None) -> Path:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("name, content, words", FILES.values(), ids=FILES.keys())
def test_files(tmp_path, name, content, words, leftovers):
    from dlc_airflow.operators import DLCJobOperator

    path = _write(tmp_path, name, content)
    with pytest.raises(SpecError) as err:
        load_job(path)
    one_line(str(err.value), [str(path), *words])
    with pytest.raises(SpecError) as err:
        DLCJobOperator(task_id="train", job=str(path), backend="local", local_root=str(leftovers.root))
    one_line(str(err.value), [str(path), *words])
    leftovers()


def test_yaml_merge_keys_may_be_overridden(tmp_path):
    """`<<: *base` then a key of its own is YAML's way to override, not a duplicate."""
    path = _write(tmp_path, "job.yaml", "type: batch\nimage: a\ncommand: [x]\nroles:\n  worker:\n"
                                        "    <<: {replicas: 2}\n    replicas: 3\n")
    assert load_job(path).roles["worker"].replicas == 3


# -- the operator ---------------------------------------------------------------------------
OPERATOR = {
    "queue_timeout=-30": ({"queue_timeout": -30}, ["train: queue_timeout must be positive", "-30", "unset"]),
    "timeout=-5": ({"timeout": -5}, ["train: timeout must be positive", "-5"]),
    "timeout=0": ({"timeout": 0}, ["train: timeout must be positive"]),
    "negative timedelta": ({"timeout": timedelta(minutes=-1)}, ["timeout must be positive", "-60 seconds"]),
    "queue_timeout='-30s'": ({"queue_timeout": "-30s"}, ["queue_timeout", "not a duration", "'30m'"]),
    "timeout=True": ({"timeout": True}, ["timeout", "True"]),
    "timeout='soon'": ({"timeout": "soon"}, ["timeout", "'soon'", "not a duration"]),
    "timeout=nan": ({"timeout": math.nan}, ["timeout", "not a duration"]),
    "deferrable='no'": ({"deferrable": "no"}, ["train: deferrable must be True or False", "'no'"]),
    "deferrable=1": ({"deferrable": 1}, ["deferrable must be True or False", "1"]),
    "start_in_triggerer='no'": ({"start_in_triggerer": "no"}, ["start_in_triggerer", "True or False", "'no'"]),
    "wait_for_completion='false'": ({"wait_for_completion": "false"}, ["wait_for_completion", "True or False"]),
    "stream_logs=0": ({"stream_logs": 0}, ["stream_logs", "True or False"]),
    "reuse_succeeded='yes'": ({"reuse_succeeded": "yes"}, ["reuse_succeeded", "True or False"]),
    "on_finish='remove'": ({"on_finish": "remove"}, ["train: on_finish must be 'keep' or 'delete'", "'remove'"]),
    "no wait, delete": ({"wait_for_completion": False, "on_finish": "delete"},
                        ["on_finish='delete'", "wait_for_completion=True", "drop one"]),
    "no wait, timeout": ({"wait_for_completion": False, "timeout": 60}, ["timeout", "wait_for_completion=True"]),
    "no wait, queue_timeout": ({"wait_for_completion": False, "queue_timeout": 60},
                               ["queue_timeout", "wait_for_completion=True"]),
    "no wait, deferrable": ({"wait_for_completion": False, "deferrable": True},
                            ["deferrable=True", "wait_for_completion=True"]),
    "queue_timeout > timeout": ({"queue_timeout": "1h", "timeout": "10m"},
                                ["queue_timeout (3600s)", "longer than timeout (600s)"]),
    "backend='Local'": ({"backend": "Local"}, ["train: unknown backend 'Local'", "did you mean 'local'",
                                               "native", "kubeflow", "trainer", "jobset", "ray", "local"]),
    "backend='kubernetes'": ({"backend": "kubernetes"}, ["unknown backend 'kubernetes'", "native", "local"]),
    "backend=' native'": ({"backend": " native"}, ["unknown backend ' native'", "did you mean 'native'"]),
    "backend=3": ({"backend": 3}, ["backend must be one of", "local", "not 3"]),
    "backend cannot run the type": ({"backend": "ray"}, ["job type 'batch'", "ray backend", "backend="]),
    "namespace 'ML Team'": ({"namespace": "ML Team"}, ["train: namespace 'ML Team'", "DNS label"]),
    "namespace too long": ({"namespace": "n" * 64}, ["namespace", "at most 63"]),
    "namespace=5": ({"namespace": 5}, ["namespace must be a string"]),
    "conn_id=''": ({"conn_id": ""}, ["train: conn_id must be the id of an Airflow connection", "''"]),
    "conn_id is a URI": ({"conn_id": "https://k8s.example.com"}, ["conn_id", "kubernetes_default"]),
    "local_root relative": ({"local_root": "jobs"}, ["train: local_root must be an absolute folder", "'jobs'"]),
    "job is a list": ({"job": ["batch"]}, ["invalid job of task train", "valid dictionary"]),
    "job file missing": ({"job": "/nonexistent/job.yaml"}, ["cannot read job spec /nonexistent/job.yaml"]),
    # 100,000 processes on this host: the local backend's replica cap (policy max_replicas), at parse time
    "100,000 local replicas": ({"backend": "local", "job": {**BATCH, "roles": {"worker": 100_000}}},
                               ["refused by policy: roles: 100000 replicas (at most", "dlc_policy.max_replicas",
                                "local backend's default policy", "ask your Airflow admin"]),
}


@pytest.mark.parametrize("kwargs, words", OPERATOR.values(), ids=OPERATOR.keys())
def test_operator(kwargs, words, leftovers):
    from dlc_airflow.operators import DLCJobOperator

    args = {"task_id": "train", "job": BATCH, "local_root": str(leftovers.root), **kwargs}
    with pytest.raises(ValueError) as err:  # SpecError, BackendError, ArgumentError: all ValueErrors
        DLCJobOperator(**args)
    one_line(str(err.value), words)
    leftovers()


def test_operator_names_the_task_inside_a_dag(leftovers):
    from airflow.sdk import DAG
    from dlc_airflow.operators import DLCJobOperator

    with DAG("catalogue", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
        with pytest.raises(ValueError) as err:
            DLCJobOperator(task_id="prep", job=BATCH, timeout=-1, local_root=str(leftovers.root))
    one_line(str(err.value), ["prep: timeout must be positive"])
    leftovers()


# -- the sensor -----------------------------------------------------------------------------
SENSOR = {
    "neither job_name nor task_id_of_job": ({}, ["watch: give exactly one of job_name or task_id_of_job"]),
    "both": ({"job_name": "a", "task_id_of_job": "train"}, ["exactly one of job_name or task_id_of_job"]),
    "job_name with uppercase": ({"job_name": "Train_Job"}, ["watch: job_name 'Train_Job'", "DNS label"]),
    "job_name with a path": ({"job_name": "../../etc"}, ["job_name '../../etc'", "DNS label"]),
    "job_name too long": ({"job_name": "j" * 64}, ["job_name", "at most 63"]),
    "job_name=7": ({"job_name": 7}, ["job_name must be a string"]),
    "task_id_of_job with a space": ({"task_id_of_job": "train model"}, ["task_id_of_job", "id of a task"]),
    "unknown job type argument": ({"job_name": "a", "job_type": "pytorch"}, ["watch: DLCJobSensor has no job_type",
                                                                              "drop job_type"]),
    "backend='Local'": ({"job_name": "a", "backend": "Local"}, ["watch: unknown backend 'Local'", "local", "native"]),
    "backend='k8s'": ({"job_name": "a", "backend": "k8s"}, ["unknown backend 'k8s'", "native", "local"]),
    "backend=None": ({"job_name": "a", "backend": None}, ["backend must be one of", "None"]),
    "deferrable='no'": ({"job_name": "a", "deferrable": "no"}, ["watch: deferrable must be True or False", "'no'"]),
    "deferrable and reschedule": ({"job_name": "a", "deferrable": True, "mode": "reschedule"},
                                  ["deferrable=True", "mode='reschedule'", "choose one"]),
    "timeout=-5": ({"job_name": "a", "timeout": -5}, ["watch: timeout must not be negative", "-5"]),
    "negative timedelta timeout": ({"job_name": "a", "timeout": timedelta(seconds=-3)},
                                   ["timeout must not be negative", "-3 seconds"]),
    "timeout=True": ({"job_name": "a", "timeout": True}, ["timeout must be seconds or a timedelta", "True"]),
    "timeout='1h'": ({"job_name": "a", "timeout": "1h"}, ["timeout must be seconds or a timedelta", "'1h'"]),
    "poke_interval=-1": ({"job_name": "a", "poke_interval": -1}, ["poke_interval must not be negative"]),
    "namespace 'Prod'": ({"job_name": "a", "namespace": "Prod"}, ["watch: namespace 'Prod'", "DNS label"]),
    "conn_id=' '": ({"job_name": "a", "conn_id": " "}, ["conn_id must be the id of an Airflow connection"]),
    "local_root relative": ({"job_name": "a", "backend": "local", "local_root": "./jobs"},
                            ["local_root must be an absolute folder"]),
}


@pytest.mark.parametrize("kwargs, words", SENSOR.values(), ids=SENSOR.keys())
def test_sensor(kwargs, words, leftovers):
    from dlc_airflow.sensors import DLCJobSensor

    with pytest.raises(ValueError) as err:
        DLCJobSensor(task_id="watch", **kwargs)
    one_line(str(err.value), words)
    leftovers()


def test_sensor_takes_templated_names():
    from dlc_airflow.sensors import DLCJobSensor

    sensor = DLCJobSensor(task_id="watch", job_name="{{ ti.xcom_pull(task_ids='train')['job_name'] }}")
    assert sensor.job_name.startswith("{{")


# -- pipelines ------------------------------------------------------------------------------
def _pipeline_kwargs(root: Path, **overrides) -> dict:
    jobs = {k: {**BATCH, "name": k[:4]} for k in ("preprocess", "train", "inference")}
    return {**jobs, "storage_root": str(root), "lineage": "digits", "backend": "local", **overrides}


PIPELINE = {
    "Gate threshold 'high'": ({"gate": "Gate('accuracy', 'high')"}, ["Gate.threshold must be a number", "'high'"]),
    "Gate threshold True": ({"gate": "Gate('accuracy', True)"}, ["Gate.threshold must be a number", "True"]),
    "Gate threshold nan": ({"gate": "Gate('accuracy', float('nan'))"}, ["Gate.threshold must be a finite number"]),
    "Gate threshold '0.9'": ({"gate": "Gate('accuracy', '0.9')"}, ["Gate.threshold must be a number", "'0.9'"]),
    "Gate mode 'higher'": ({"gate": "Gate('accuracy', 0.9, 'higher')"}, ["Gate.mode", "'max'", "'higher'"]),
    "Gate without a metric": ({"gate": "Gate('', 0.9)"}, ["Gate.metric must name a metric"]),
    "gate as a tuple": ({"gate": "('accuracy', 0.9)"}, ["gate must be a Gate(metric, threshold, mode)"]),
    "approval without a gate": ({"approval": "Approval()"}, ["approval needs a gate", "Gate('accuracy', 0.0)"]),
    "approval as a dict": ({"gate": "Gate('accuracy', 0.9)", "approval": "{'timeout': 3600}"},
                           ["approval must be an Approval(", "{'timeout': 3600}"]),
    "Approval timeout of zero": ({"gate": "Gate('a', 0.9)", "approval": "Approval(timeout=timedelta(0))"},
                                 ["Approval.timeout must be a positive timedelta", "timedelta(0)"]),
    "Approval timeout in seconds": ({"gate": "Gate('a', 0.9)", "approval": "Approval(timeout=3600)"},
                                    ["Approval.timeout must be a positive timedelta", "3600"]),
    "Approval on_timeout 'skip'": ({"gate": "Gate('a', 0.9)", "approval": "Approval(on_timeout='skip')"},
                                   ["Approval.on_timeout must be 'reject' or 'approve'", "'skip'"]),
    "Approval assigned_users a string": ({"gate": "Gate('a', 0.9)", "approval": "Approval(assigned_users='alice')"},
                                         ["Approval.assigned_users must be a list of user ids", "'alice'"]),
    "Approval assigned_users blank": ({"gate": "Gate('a', 0.9)", "approval": "Approval(assigned_users=[' '])"},
                                      ["Approval.assigned_users", "' ' is not a user id"]),
    "Approval notify a string": ({"gate": "Gate('a', 0.9)", "approval": "Approval(notify='slack')"},
                                 ["Approval.notify must be Airflow notifiers", "'slack'"]),
    "unknown storage scheme": ({"storage_root": "bogus://bucket/lineage", "mount_path": "/mnt/l"},
                               ["storage_root 'bogus://bucket/lineage'", "ObjectStoragePath cannot open bogus://"]),
    "typo in the scheme": ({"storage_root": "s4://bucket/lineage", "mount_path": "/mnt/l"},
                           ["storage_root", "s4://"]),
    "store library missing": ({"storage_root": "oss://bucket/lineage", "mount_path": "/mnt/l"},
                              ["storage_root 'oss://bucket/lineage'", "oss://", "ossfs"]),
    "remote root without mount_path": ({"storage_root": "s3://bucket/lineage"}, ["storage_root", "mount_path="]),
    "relative storage root": ({"storage_root": "data/lineage"}, ["storage_root 'data/lineage'", "absolute path"]),
    "relative mount_path": ({"mount_path": "mnt/l"}, ["mount_path 'mnt/l'", "absolute path"]),
    "lineage with a slash": ({"lineage": "a/b"}, ["lineage 'a/b'", "folder name"]),
    "keep_last=0": ({"keep_last": 0}, ["keep_last must be a whole number >= 1", "0"]),
    "keep_last=True": ({"keep_last": True}, ["keep_last must be a whole number >= 1", "True"]),
    "on_unfinished='ignore'": ({"on_unfinished": "ignore"}, ["on_unfinished must be 'block' or 'skip'", "'ignore'"]),
    "operator_kwargs sets backend": ({"operator_kwargs": {"backend": "native"}},
                                     ["operator_kwargs sets backend", "pipeline sets itself"]),
    "train_kwargs sets job": ({"train_kwargs": {"job": {}}}, ["train_kwargs sets job"]),
    "operator_kwargs not a dict": ({"operator_kwargs": ["timeout", 60]}, ["operator_kwargs must be a dict"]),
    "operator_kwargs with a negative timeout": ({"operator_kwargs": {"timeout": -1}},
                                                ["preprocess: timeout must be positive"]),
    "job env the pipeline sets": ({"train": {**BATCH, "env": {"DLC_DATA_URI": "x"}}},
                                  ["the train job sets DLC_DATA_URI", "remove them"]),
    "backend='Local'": ({"backend": "Local"}, ["unknown backend 'Local'", "local"]),
    "bad train spec": ({"train": {**BATCH, "roles": {"worker": 2.5}}}, ["invalid train job", "whole number"]),
}


@pytest.mark.parametrize("overrides, words", PIPELINE.values(), ids=PIPELINE.keys())
def test_pipelines(tmp_path, overrides, words, leftovers):
    from airflow.sdk import DAG

    from dlc_airflow.pipelines import Approval, Gate, training_pipeline

    root = tmp_path / "lineage"
    kwargs = _pipeline_kwargs(root, local_root=str(leftovers.root), **overrides)
    with pytest.raises(ValueError) as err:  # at DAG parse time, before any job or manifest exists
        for name in ("gate", "approval"):  # the Gate(...) / Approval(...) is the bad input itself
            if isinstance(kwargs.get(name), str):
                kwargs[name] = eval(kwargs[name], {"Gate": Gate, "Approval": Approval, "timedelta": timedelta})
        with DAG("catalogue", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=UTC)):
            training_pipeline(**kwargs)
    one_line(str(err.value), words)
    assert not root.exists(), "a manifest (or its folder) was written"
    leftovers()


RETRAINING = {
    "cadence in words": ({"cadence": "every day"}, ["cadence 'every day'", "cron expression"]),
    "cadence @once": ({"cadence": "@once"}, ["cadence '@once'", "no data intervals"]),
    "cadence of zero": ({"cadence": timedelta(0)}, ["cadence", "must be positive"]),
    "cadence as a number": ({"cadence": 86400}, ["cadence must be a cron string or a timedelta"]),
    "naive start_date": ({"start_date": datetime(2026, 1, 1)}, ["start_date", "needs a timezone"]),
    "unknown scheme": ({"storage_root": "bogus://b/l", "mount_path": "/mnt/l"}, ["ObjectStoragePath cannot open"]),
}


@pytest.mark.parametrize("overrides, words", RETRAINING.values(), ids=RETRAINING.keys())
def test_retraining_dags(tmp_path, overrides, words, leftovers):
    from dlc_airflow.pipelines import retraining_dag

    root = tmp_path / "lineage"
    kwargs = {"cadence": "@daily", "start_date": datetime(2026, 1, 1, tzinfo=UTC),
              **_pipeline_kwargs(root, local_root=str(leftovers.root)), **overrides}
    with pytest.raises(ValueError) as err:
        retraining_dag("catalogue_retrain", **kwargs)
    one_line(str(err.value), words)
    assert not root.exists()
    leftovers()


def test_lineage_tasks_check_their_root_at_parse_time(tmp_path):
    from dlc_airflow.pipelines.tasks import CommitOperator

    with pytest.raises(ValueError) as err:
        CommitOperator(task_id="commit", lineage_task_id="l", train_task_id="t", storage_root="bogus://b/x",
                       lineage="digits", mount_path="/m")
    one_line(str(err.value), ["commit: storage_root 'bogus://b/x'", "ObjectStoragePath cannot open"])


def test_openable_roots_pass(tmp_path):
    from dlc_airflow.pipelines.store import check_openable

    for root in (f"file://{tmp_path}", "memory://lineage", str(tmp_path)):
        check_openable(root)


# -- the command line -----------------------------------------------------------------------
def cli(*args: str) -> subprocess.CompletedProcess:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dlc_airflow.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, cwd=REPO)


GOOD = "type: batch\nimage: registry.example.com/prep:1\ncommand: [prep]\n"
CLI = {
    "validate: bool replicas": (["validate", "{spec}"], GOOD + "roles: {worker: true}\n",
                                ["roles.worker.replicas", "whole number"]),
    "validate: 2.5 replicas": (["validate", "{spec}"], GOOD + "roles: {worker: 2.5}\n",
                               ["roles.worker.replicas", "whole number", "2.5"]),
    "validate: uppercase image": (["validate", "{spec}"], GOOD.replace("registry.example.com/prep", "Reg.io/Prep"),
                                  ["image", "lowercase"]),
    "validate: duplicate key": (["validate", "{spec}"], GOOD + "image: other:1\n", ["duplicate key 'image' at line 4"]),
    "validate: git revision": (["validate", "{spec}"], GOOD + "code: {repo: 'https://g.example/x.git', "
                               "revision: 'main && curl x'}\n", ["code.revision", "'&'"]),
    "validate: git repo": (["validate", "{spec}"], GOOD + "code: {repo: not a url}\n", ["code.repo", "scp-like"]),
    "validate: --backend Local": (["validate", "{spec}", "--backend", "Local"], GOOD,
                                  ["unknown backend 'Local'", "did you mean 'local'", "native"]),
    "validate: --backend ray": (["validate", "{spec}", "--backend", "ray"], GOOD, ["job type 'batch'", "ray backend"]),
    "validate: not UTF-8": (["validate", "{spec}"], None, ["not UTF-8"]),
    "render: --backend pai, a secret reference": (["render", "{spec}", "--backend", "pai"],
                                                  GOOD + "env: {T: {airflow_variable: t}}\n",
                                                  ["pai backend", "env.T", "secret references"]),
    "render: --backend pai, a secret literal": (["render", "{spec}", "--backend", "pai"],
                                                GOOD + "env: {API_TOKEN: s3cr3t}\n",
                                                ["pai backend", "env.API_TOKEN", "secret-looking", "CredentialConfig"]),
    "render: --backend Native": (["render", "{spec}", "--backend", "Native"], GOOD, ["did you mean 'native'"]),
    "render: --name Bad_Name": (["render", "{spec}", "--name", "Bad_Name"], GOOD, ["job name 'Bad_Name'", "DNS-1035"]),
    "render: read_only 'no'": (["render", "{spec}"], GOOD + "storage: [{type: pvc, claim_name: d, mount_path: /d, "
                               "read_only: 'no'}]\n", ["storage[0].read_only", "true or false"]),
    "render: negative max_running_time": (["render", "{spec}"], GOOD + "max_running_time: -60\n",
                                          ["max_running_time", "positive"]),
    "render: a directory": (["render", "{dir}"], GOOD, ["cannot read job spec"]),
    # validate applies the admin's policy, in the operator's words
    "validate: refused by policy": (["validate", "{spec}"], GOOD + "storage: [{type: host_path, path: /etc, "
                                    "mount_path: /e}]\n", ["refused by policy: storage[0].path", "host path '/etc'",
                                                           "dlc_policy.host_paths", "default policy"]),
    "validate: --policy missing": (["validate", "{spec}", "--policy", "{dir}/nope.json"], GOOD,
                                   ["cannot read policy file", "nope.json"]),
    "validate: 100,000 local replicas": (["validate", "{spec}", "--backend", "local"],
                                         GOOD + "roles: {worker: 100000}\n",
                                         ["refused by policy: roles: 100000 replicas", "dlc_policy.max_replicas"]),
}


@pytest.mark.parametrize("args, text, words", CLI.values(), ids=CLI.keys())
def test_cli(tmp_path, args, text, words):
    spec = tmp_path / "job.yaml"
    if text is None:
        spec.write_bytes(b"type: batch\nimage: \xff\n")
    else:
        spec.write_text(text)
    proc = cli(*(a.format(spec=spec, dir=tmp_path) for a in args))
    assert proc.returncode == 2, proc
    assert proc.stdout == "", "nothing is rendered for a refused spec"
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    one_line(proc.stderr.strip(), words)


def test_the_cli_validates_for_the_local_backend(tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(GOOD)
    proc = cli("validate", str(spec), "--backend", "local")
    assert proc.returncode == 0 and "the local backend runs it" in proc.stdout, proc


def test_the_catalogue_has_at_least_150_cases_with_the_cluster_ones():
    from tests.cluster.test_bad_input_cluster import CASE_COUNT

    unit = sum(len(t) for t in (SPEC, DIRECT, FILES, OPERATOR, SENSOR, PIPELINE, RETRAINING, CLI))
    assert unit + CASE_COUNT >= 150, (unit, CASE_COUNT)
    json.dumps(sorted(SPEC))  # case names are plain text (they are the test ids)


def test_the_size_check_counts_the_packed_spec_as_specpack_makes_it():
    from dlc_airflow.spec.models import packed_size
    from dlc_airflow.specpack import SPEC_ANNOTATION, pack

    job = parse_job({**BASE, "annotations": {"a": "b"}, "env": {"LR": "0.1"}})
    assert packed_size(job.to_dict()) == len(SPEC_ANNOTATION) + len(pack(job))


def test_every_discriminated_union_names_its_tags():
    """A member without its tag gets `<tag> is missing: set <tag> to one of ...`: every
    discriminated union of the spec is known to the message."""
    from dlc_airflow.spec import json_schema
    from dlc_airflow.spec.models import _UNION_TAGS

    found: dict[str, list[str]] = {}

    def walk(node, field=""):
        if isinstance(node, dict):
            if "discriminator" in node:
                found[field] = sorted(node["discriminator"]["mapping"])
            for key, value in node.items():
                walk(value, key if key not in ("items", "anyOf", "oneOf", "properties") else field)
        elif isinstance(node, list):
            for value in node:
                walk(value, field)

    walk(json_schema())
    assert found == _UNION_TAGS


def test_a_token_in_the_clone_url_is_not_repeated_in_the_refusal():
    with pytest.raises(SpecError) as refused:
        parse_job({**BASE, **code(repo="https://ci:ghp_s3cr3tT0ken@git.example.com/ml/train.git")})
    assert "ghp_s3cr3tT0ken" not in str(refused.value)
