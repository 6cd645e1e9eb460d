"""Bad input: every mistake is refused at parse time with one actionable line naming the field."""

from __future__ import annotations

import pytest

from dlc_airflow.spec import SpecError, load_job, parse_job

BASE = {"type": "pytorch", "image": "registry.example.com/train:1", "command": ["python", "train.py"]}
# Words that tell the user what to do (or what is allowed) in every message.
GUIDANCE = ("must", "set ", "use", "write", "drop", "shorten", "should", "needs", "only for", "at most",
            "check the spelling", "required", "elsewhere", "has roles", "is more than", "are in both",
            "outside", "used more than once", "exactly one", "give", "expected tags", "list ")


def pvc(path="/data", **kw):
    return {"type": "pvc", "claim_name": "datasets", "mount_path": path, **kw}


CASES = {
    # image
    "missing image": ({"image": None}, ["image", "required"]),
    "blank image": ({"image": "  "}, ["image"]),
    "image with spaces": ({"image": "my image:1"}, ["image", "whitespace"]),
    # roles and replicas
    "zero replicas": ({"roles": {"worker": 0}}, ["roles.worker.replicas", ">= 1"]),
    "negative replicas": ({"roles": {"worker": {"replicas": -2}}}, ["roles.worker.replicas"]),
    "too many replicas": ({"roles": {"worker": 100_001}}, ["roles.worker.replicas", "100000"]),
    "ps on pytorch": ({"roles": {"ps": 1, "worker": 2}}, ["roles.ps", "pytorch", "master", "worker"]),
    "launcher on tensorflow": ({"type": "tensorflow", "roles": {"launcher": 1, "worker": 2}}, ["roles.launcher"]),
    "master on batch": ({"type": "batch", "roles": {"master": 1, "worker": 2}}, ["roles.master", "batch"]),
    "chief on ray": ({"type": "ray", "roles": {"head": 1, "chief": 1}}, ["roles.chief"]),
    "two masters": ({"roles": {"master": 2, "worker": 1}}, ["roles.master.replicas", "at most 1"]),
    "custom with two roles": ({"type": "custom", "roles": {"a": 1, "b": 1}}, ["custom", "exactly one role"]),
    "custom role name": ({"type": "custom", "roles": {"Trainer_1": 1}}, ["roles.Trainer_1", "DNS label"]),
    "custom role too long": ({"type": "custom", "roles": {"abcdefghijk": 1}}, ["roles.abcdefghijk", "10"]),
    "mpi without launcher": ({"type": "mpi", "roles": {"worker": 2}}, ["roles", "launcher"]),
    "ray without head": ({"type": "ray", "roles": {"worker": 2}}, ["roles", "head"]),
    "unknown type": ({"type": "spark"}, ["type", "pytorch"]),
    # GPUs and resources
    "fractional gpu": ({"resources": {"gpu": 0.5}}, ["resources.gpu", "fractional", "integer"]),
    "fractional gpu as text": ({"resources": {"gpu": "1.5"}}, ["resources.gpu", "whole number"]),
    "fractional gpu of a role": ({"roles": {"worker": {"replicas": 2, "resources": {"gpu": 1.5}}}},
                                 ["roles.worker.resources.gpu", "fractional"]),
    "negative gpu": ({"resources": {"gpu": -1}}, ["resources.gpu"]),
    "fractional rdma": ({"resources": {"rdma": 0.5}}, ["resources.rdma"]),
    "gpu_type without gpu": ({"resources": {"gpu_type": "NVIDIA-A100-SXM4-80GB"}}, ["gpu_type", "gpu >= 1"]),
    "gpu_type not a label value": ({"resources": {"gpu": 1, "gpu_type": "NVIDIA A100"}}, ["gpu_type"]),
    "bad cpu": ({"resources": {"cpu": "four"}}, ["resources.cpu", "quantity", "500m"]),
    "bad memory": ({"resources": {"memory": "16GB"}}, ["resources.memory", "16Gi"]),
    "bad shared memory": ({"resources": {"shared_memory": "lots"}}, ["resources.shared_memory"]),
    "bad size limit": ({"storage": [{"type": "empty_dir", "mount_path": "/s", "size_limit": "2 GB"}]},
                       ["size_limit"]),
    # names
    "name too long": ({"name": "a" * 41}, ["name", "41 characters", "40", "shorten"]),
    "name not a DNS label": ({"name": "Train_Job"}, ["name", "lowercase"]),
    # conflicting options
    "command and shell": ({"shell": "python train.py"}, ["command", "shell", "not both"]),
    "role command and shell": ({"roles": {"worker": {"command": ["a"], "shell": "b"}}},
                               ["roles.worker", "command", "shell"]),
    "empty command": ({"command": []}, ["command", "empty"]),
    "no command anywhere": ({"command": None}, ["roles.worker", "no command"]),
    "elastic on tensorflow": ({"type": "tensorflow", "elastic": {"min_replicas": 1, "max_replicas": 2}},
                              ["elastic", "pytorch", "tensorflow"]),
    "elastic range": ({"roles": {"worker": 5}, "elastic": {"min_replicas": 1, "max_replicas": 4}},
                      ["roles.worker.replicas", "elastic"]),
    "elastic min above max": ({"elastic": {"min_replicas": 3, "max_replicas": 2}}, ["elastic.min_replicas"]),
    "nproc_per_node on tensorflow": ({"type": "tensorflow", "nproc_per_node": 4}, ["nproc_per_node", "torch"]),
    "launcher on pytorch": ({"launcher": "mpi"}, ["launcher", "deepspeed"]),
    "include and exclude the same node": ({"scheduling": {"include_nodes": ["gpu-1"], "exclude_nodes": ["gpu-1"]}},
                                          ["include_nodes", "exclude_nodes", "gpu-1"]),
    # storage
    "duplicate mount paths": ({"storage": [pvc("/data"), {"type": "empty_dir", "mount_path": "/data"}]},
                              ["mount_path", "/data", "more than once"]),
    "code over a storage mount": ({"storage": [pvc("/code")],
                                   "code": {"repo": "https://g/x.git", "mount_path": "/code"}},
                                  ["mount_path", "/code"]),
    "storage over shared memory": ({"resources": {"shared_memory": "8Gi"},
                                    "storage": [{"type": "empty_dir", "mount_path": "/dev/shm"}]},
                                   ["mount_path", "/dev/shm", "shared_memory"]),
    "storage over the MPI hostfile": ({"type": "mpi", "roles": {"launcher": 1, "worker": 2},
                                       "storage": [pvc("/etc/mpi/hostfile")]}, ["mount_path", "hostfile"]),
    "relative mount path": ({"storage": [pvc("data")]}, ["mount_path", "absolute"]),
    "absolute sub_path": ({"storage": [pvc(sub_path="/x")]}, ["sub_path", "relative"]),
    "sub_path with ..": ({"storage": [pvc(sub_path="a/../b")]}, ["sub_path", ".."]),
    "relative NFS export": ({"storage": [{"type": "nfs", "server": "nas", "path": "exports", "mount_path": "/n"}]},
                            ["path", "absolute"]),
    "host path with ..": ({"storage": [{"type": "host_path", "path": "/a/../b", "mount_path": "/h"}]}, ["path", ".."]),
    "empty claim name": ({"storage": [{"type": "pvc", "claim_name": "", "mount_path": "/d"}]}, ["claim_name"]),
    "CSI driver": ({"storage": [{"type": "csi", "driver": "My Driver", "mount_path": "/o"}]}, ["driver", "DNS"]),
    "unknown storage type": ({"storage": [{"type": "s3", "mount_path": "/s"}]}, ["storage", "type"]),
    "relative code path": ({"code": {"repo": "https://g/x.git", "mount_path": "code"}}, ["code.mount_path"]),
    # labels, env, scheduling
    "bad label value": ({"labels": {"team": "ml platform"}}, ["labels", "team", "63 characters"]),
    "bad label key": ({"labels": {"my team": "ml"}}, ["labels", "my team"]),
    "reserved label prefix": ({"labels": {"dlc-airflow/job-name": "x"}}, ["labels", "reserved"]),
    "bad annotation key": ({"annotations": {"see docs": "x"}}, ["annotations", "annotation key"]),
    "bad node selector": ({"scheduling": {"node_selector": {"pool": "a b"}}}, ["scheduling.node_selector", "pool"]),
    "bad env name": ({"env": {"1ST": "x"}}, ["env", "1ST"]),
    "env value not a string": ({"env": {"EPOCHS": 3}}, ["env.EPOCHS", "string"]),
    "bad role env name": ({"roles": {"worker": {"env": {"A B": "x"}}}}, ["roles.worker.env", "A B"]),
    "bad queue": ({"scheduling": {"queue": "Team_A"}}, ["scheduling.queue", "lowercase"]),
    "bad priority class": ({"scheduling": {"priority_class": "High Priority"}}, ["scheduling.priority_class"]),
    "bad spot": ({"scheduling": {"spot": "maybe"}}, ["scheduling.spot", "prefer"]),
    "bad toleration": ({"scheduling": {"tolerations": [{"key": "gpu", "operator": "Maybe"}]}},
                       ["tolerations[0].operator", "Exists"]),
    "toleration seconds without NoExecute": ({"scheduling": {"tolerations": [{"key": "gpu", "tolerationSeconds": 5}]}},
                                             ["tolerationSeconds", "NoExecute"]),
    "bad node name": ({"scheduling": {"include_nodes": ["gpu node"]}}, ["include_nodes", "gpu node"]),
    # fault tolerance, limits, checkpoint, health check
    "exit code 0": ({"fault_tolerance": {"retryable_exit_codes": [0, 137]}}, ["retryable_exit_codes", "1..255"]),
    "negative restarts": ({"fault_tolerance": {"max_restarts": -1}}, ["fault_tolerance.max_restarts"]),
    "bad duration": ({"max_running_time": "2 hours"}, ["max_running_time", "'2h'"]),
    "zero duration": ({"max_running_time": 0}, ["max_running_time", "positive"]),
    "ttl beyond int32": ({"ttl_after_finished": 2**31}, ["ttl_after_finished", "at most"]),
    "remote checkpoint without path": ({"checkpoint": {"uri": "s3://bucket/ckpt"}}, ["checkpoint", "checkpoint.path"]),
    "empty health check": ({"health_check": {"command": []}}, ["health_check.command"]),
    "bad port": ({"port": 70000}, ["port", "65535"]),
    "typo in a field": ({"gpus": 2}, ["gpus", "unknown field", "dlc-airflow schema"]),
    "typo in a nested field": ({"resources": {"gpus": 2}}, ["resources.gpus", "unknown field"]),
}


@pytest.mark.parametrize("overrides, words", CASES.values(), ids=CASES.keys())
def test_bad_input_is_one_actionable_line_naming_the_field(overrides, words):
    spec = {k: v for k, v in {**BASE, **overrides}.items() if v is not None}
    with pytest.raises(SpecError) as err:
        parse_job(spec)
    message = str(err.value)
    assert "\n" not in message and message.startswith("invalid job spec: ")
    missing = [w for w in words if w not in message]
    assert not missing, f"message does not say {missing}: {message}"
    assert any(g in message for g in GUIDANCE), f"no guidance in: {message}"


def test_templated_strings_are_checked_after_rendering_not_before():
    job = parse_job({**BASE, "image": "{{ var.value.image }}", "resources": {"memory": "{{ params.mem }}"},
                     "labels": {"run": "{{ ds_nodash }}"}, "name": "{{ task.task_id }}"})
    assert job.resources.memory == "{{ params.mem }}"


@pytest.mark.parametrize("text, words", [
    ("type: pytorch\nimage: x\n  bad: [\n", ["not valid YAML", "line 3"]),
    ("- just\n- a list\n", ["mapping"]),
    ("type: pytorch\n", ["image", "required"]),
])
def test_spec_files_fail_in_one_line(tmp_path, text, words):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_job(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    assert all(w in message for w in words), message


def test_missing_and_malformed_json_files(tmp_path):
    with pytest.raises(SpecError, match="cannot read job spec .*missing.yaml"):
        load_job(tmp_path / "missing.yaml")
    bad = tmp_path / "job.json"
    bad.write_text('{"type": "pytorch",\n "image": }')
    with pytest.raises(SpecError) as err:
        load_job(bad)
    assert "\n" not in str(err.value) and "not valid JSON" in str(err.value)
