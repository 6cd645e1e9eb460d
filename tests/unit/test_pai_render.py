"""The pai backend's pure half: every DLC setting we map, every refusal, the status mapping.

Pure functions only (no stand-in, no network). Each rendered request is also read back
through the SDK's own CreateJobRequest model: a field name we got wrong would be dropped
there, and the test says which.
"""

from __future__ import annotations

import shlex
import subprocess

import pytest

from dlc_airflow import naming
from dlc_airflow.errors import BackendError
from dlc_airflow.jobtypes import JobType
from dlc_airflow.pai import backend
from dlc_airflow.pai.backend import PaiBackend, render, status
from dlc_airflow.spec import DLCJob
from dlc_airflow.status import JobState

NAME = "train-0123abcd-1"
IDENTITY = naming.TaskIdentity("retrain", "train", "scheduled__2026-12-01T00:00:00+00:00", map_index=2, try_number=3)
QUOTA = {"scheduling": {"queue": "quota12345"}, "resources": {"cpu": "4", "memory": "16Gi"}}


def job(**spec) -> DLCJob:
    base = {"type": "pytorch", "image": "registry/train:1", "command": ["python", "train.py"], **QUOTA}
    base.update(spec)
    return DLCJob.model_validate(base)


def fields(j: DLCJob, **defaults):
    out = render(j, NAME, IDENTITY, 1, **defaults)
    _sdk_roundtrip(out)
    return out


def _sdk_roundtrip(out: dict) -> None:
    """Every key we send is a field of the SDK's CreateJobRequest (nothing silently dropped)."""
    models = pytest.importorskip("alibabacloud_pai_dlc20201203.models")
    back = models.CreateJobRequest().from_map(out).to_map()

    def subset(a, b, where):
        if isinstance(a, dict):
            for k, v in a.items():
                assert k in b, f"{where}.{k} is not a CreateJobRequest field"
                subset(v, b[k], f"{where}.{k}")
        elif isinstance(a, list):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                subset(x, y, f"{where}[{i}]")
        else:
            assert a == b, where

    subset(out, back, "CreateJobRequest")


def spec_of(out: dict, dlc_type: str) -> dict:
    return next(s for s in out["JobSpecs"] if s["Type"] == dlc_type)


def refused(field: str, **spec) -> str:
    with pytest.raises(BackendError) as err:
        PaiBackend().check(job(**spec))
    message = str(err.value)
    assert field in message and "pai backend" in message and "\n" not in message, message
    return message


# -- job types and roles ------------------------------------------------------------------
TYPES = [
    ("pytorch", {"master": 1, "worker": 2}, "PyTorchJob", {"master": "Master", "worker": "Worker"}),
    ("deepspeed", {"worker": 2}, "PyTorchJob", {"worker": "Worker"}),
    ("megatron", {"master": 1, "worker": 3}, "PyTorchJob", {"master": "Master", "worker": "Worker"}),
    ("tensorflow", {"chief": 1, "ps": 2, "worker": 3, "evaluator": 1}, "TFJob",
     {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}),
    ("mpi", {"launcher": 1, "worker": 2}, "MPIJob", {"launcher": "Launcher", "worker": "Worker"}),
    ("xgboost", {"master": 1, "worker": 2}, "XGBoostJob", {"master": "Master", "worker": "Worker"}),
    ("ray", {"head": 1, "worker": 2}, "RayJob", {"head": "Head", "worker": "Worker"}),
    ("batch", {"worker": 4}, "ElasticBatchJob", {"worker": "Worker"}),
    ("custom", {"main": 3}, "PyTorchJob", {"main": "Worker"}),
]
if hasattr(JobType, "slurm"):  # the slurm type (another backend's work): DLC's SlurmJob
    TYPES.append(("slurm", {"worker": 2}, "SlurmJob", {"worker": "Worker"}))


@pytest.mark.parametrize(("our_type", "roles", "dlc_type", "role_types"), TYPES, ids=[t[0] for t in TYPES])
def test_job_type_and_role_types(our_type, roles, dlc_type, role_types):
    out = fields(job(type=our_type, roles=roles))
    assert out["JobType"] == dlc_type
    assert {s["Type"]: s["PodCount"] for s in out["JobSpecs"]} == {role_types[r]: n for r, n in roles.items()}
    assert out["DisplayName"] == NAME and out["UserCommand"]


def test_every_job_type_is_mapped_or_refused():
    for job_type in JobType:
        assert job_type in PaiBackend.job_types, f"{job_type.value} has no DLC mapping"
    if hasattr(JobType, "slurm"):  # another engineer's type: DLC's SlurmJob
        assert backend.JOB_TYPE_MAP[JobType.slurm] == "SlurmJob"


def test_registry_knows_the_backend():
    from dlc_airflow.registry import ALL_BACKENDS, backends_running, pure_backend

    assert "pai" in ALL_BACKENDS and pure_backend("pai").name == "pai"
    assert "pai" in backends_running("tensorflow")


def test_tensorflow_with_a_chief_succeeds_with_the_chief():
    assert fields(job(type="tensorflow", roles={"chief": 1, "worker": 2}))["SuccessPolicy"] == "ChiefWorker"
    assert "SuccessPolicy" not in fields(job(type="tensorflow", roles={"worker": 2}))


# -- image, command, env --------------------------------------------------------------------
def test_image_per_role():
    out = fields(job(roles={"master": {"replicas": 1, "image": "registry/master:2"}, "worker": 2}))
    assert spec_of(out, "Master")["Image"] == "registry/master:2"
    assert spec_of(out, "Worker")["Image"] == "registry/train:1"


def run_prelude(command: str, hostname: str, extra_env: dict | None = None, main: str = "exec python train.py") -> dict:
    """Run a rendered UserCommand with /bin/sh, its main command replaced by `env`."""
    assert command.endswith(main), command
    out = subprocess.run(["/bin/sh", "-c", command[: -len(main)] + "exec env"], capture_output=True, text=True, check=True,
                         env={"HOSTNAME": hostname, "PATH": "/usr/bin:/bin", **(extra_env or {})})
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


def test_command_is_quoted_argv_and_exec():
    out = fields(job(command=["python", "train.py", "--note", "it's a 'test' $HOME"], roles={"worker": 1}))
    command = spec_of(out, "Worker")["UserCommand"]
    assert command.endswith("exec " + shlex.join(["python", "train.py", "--note", "it's a 'test' $HOME"]))
    assert out["UserCommand"] == command


def test_shell_command_keeps_its_own_operators():
    out = fields(job(command=None, shell="echo a; false || echo b", roles={"worker": 1}))
    command = spec_of(out, "Worker")["UserCommand"]
    assert command.endswith("{\necho a; false || echo b\n}")
    result = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env={"HOSTNAME": "x-worker-0"})
    assert result.stdout.split() == ["a", "b"]


def test_role_command_working_dir_and_health_check():
    out = fields(job(roles={"master": {"replicas": 1, "command": ["python", "serve.py"]}, "worker": 2},
                     working_dir="/workspace/code", health_check={"command": ["dlc-airflow", "sanity-check"]}))
    master = spec_of(out, "Master")["UserCommand"]
    assert master.endswith("cd /workspace/code && dlc-airflow sanity-check && exec python serve.py")
    assert spec_of(out, "Worker")["UserCommand"].endswith("exec python train.py")
    assert out["Settings"]["EnableSanityCheck"] is True


def test_prelude_sets_role_index_from_the_pod_hostname():
    out = fields(job(type="tensorflow", roles={"chief": 1, "worker": 3},
                     env={"LR": "0.1"}, checkpoint={"uri": "oss://bucket/ckpt", "path": "/mnt/ckpt"}))
    env = run_prelude(spec_of(out, "Worker")["UserCommand"], "dlc1a2b3c-worker-2")
    assert env["DLC_ROLE"] == "worker" and env["DLC_ROLE_INDEX"] == "2" and env["DLC_ROLE_REPLICAS"] == "3"
    assert out["Envs"]["LR"] == "0.1" and out["Envs"]["DLC_JOB_NAME"] == NAME
    assert out["Envs"]["DLC_JOB_TYPE"] == "tensorflow"
    assert out["Envs"]["DLC_CHECKPOINT_URI"] == "oss://bucket/ckpt" and out["Envs"]["DLC_CHECKPOINT_DIR"] == "/mnt/ckpt"


def test_batch_shards_come_from_the_replica_index():
    out = fields(job(type="batch", roles={"worker": 5}))
    env = run_prelude(spec_of(out, "Worker")["UserCommand"], "dlc99-worker-3")
    assert (env["SHARD_INDEX"], env["SHARD_COUNT"], env["JOB_COMPLETION_INDEX"]) == ("3", "5", "3")


def test_torch_gets_torchrun_env_from_dlcs_own():
    out = fields(job(roles={"master": 1, "worker": 3}, nproc_per_node=4))
    assert out["Envs"]["PET_NNODES"] == "4" and out["Envs"]["PET_NPROC_PER_NODE"] == "4"
    assert out["Envs"]["PYTHONUNBUFFERED"] == "1"  # the type's preset
    env = run_prelude(spec_of(out, "Worker")["UserCommand"], "dlc9-worker-1",
                      {"RANK": "2", "MASTER_ADDR": "dlc9-master-0", "MASTER_PORT": "23456"})
    assert (env["PET_NODE_RANK"], env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("2", "dlc9-master-0", "23456")


def test_role_env_is_quoted_in_the_prelude():
    out = fields(job(roles={"master": 1, "worker": {"replicas": 2, "env": {"NOTE": "a b; $(reboot)"}}}))
    env = run_prelude(spec_of(out, "Worker")["UserCommand"], "j-worker-0")
    assert env["NOTE"] == "a b; $(reboot)"
    assert "NOTE" not in run_prelude(spec_of(out, "Master")["UserCommand"], "j-master-0")


# -- resources ------------------------------------------------------------------------------
def test_resource_config_with_a_quota():
    out = fields(job(resources={"cpu": "500m", "memory": "16Gi", "gpu": 2, "gpu_type": "A100", "shared_memory": "8Gi"},
                     roles={"master": {"replicas": 1, "resources": {"cpu": "2", "memory": "4Gi"}}, "worker": 2}))
    assert out["ResourceId"] == "quota12345"
    assert spec_of(out, "Worker")["ResourceConfig"] == {"CPU": "0.5", "Memory": "16Gi", "GPU": "2",
                                                        "GPUType": "A100", "SharedMemory": "8Gi"}
    assert spec_of(out, "Master")["ResourceConfig"] == {"CPU": "2", "Memory": "4Gi"}


def test_connection_quota_is_the_default_and_the_job_queue_wins():
    no_queue = job(scheduling={})
    assert fields(no_queue, resource_id="quota-conn")["ResourceId"] == "quota-conn"
    assert fields(job(), resource_id="quota-conn")["ResourceId"] == "quota12345"


def test_ecs_spec_for_public_resources():
    out = fields(job(scheduling={}, resources={"shared_memory": "2Gi"},
                     annotations={"pai/ecs-spec": "ecs.g6.xlarge", "pai/ecs-spec-master": "ecs.gn6v-c8g1.2xlarge"},
                     roles={"master": 1, "worker": 2}))
    assert "ResourceId" not in out
    assert spec_of(out, "Master")["EcsSpec"] == "ecs.gn6v-c8g1.2xlarge"
    assert spec_of(out, "Worker")["EcsSpec"] == "ecs.g6.xlarge"
    assert spec_of(out, "Worker")["ResourceConfig"] == {"SharedMemory": "2Gi"}


def test_ecs_spec_with_cpu_is_refused():
    refused("resources", annotations={"pai/ecs-spec": "ecs.g6.xlarge"})


def test_rdma_enables_rdma():
    out = fields(job(roles={"master": 1, "worker": {"replicas": 2, "resources": {"cpu": "8", "memory": "32Gi",
                                                                                  "rdma": 1}}}))
    assert out["Settings"]["EnableRDMA"] is True
    assert "EnableRDMA" not in fields(job())["Settings"]


# -- scheduling -----------------------------------------------------------------------------
def test_priority_from_priority_class():
    assert fields(job(scheduling={**QUOTA["scheduling"], "priority_class": "7"}))["Priority"] == 7
    assert "Priority" not in fields(job())


@pytest.mark.parametrize("value", ["0", "10", "high"])
def test_bad_priority_is_refused(value):
    refused("scheduling.priority_class", scheduling={"priority_class": value})


def test_spot_require_uses_spot_instances():
    out = fields(job(scheduling={**QUOTA["scheduling"], "spot": "require"}, roles={"worker": 2}))
    assert spec_of(out, "Worker")["UseSpotInstance"] is True
    assert "UseSpotInstance" not in spec_of(fields(job(roles={"worker": 1})), "Worker")


def test_include_and_exclude_nodes():
    out = fields(job(scheduling={**QUOTA["scheduling"], "include_nodes": ["n1", "n2"], "exclude_nodes": ["n3"]},
                     roles={"worker": 1}))
    assert spec_of(out, "Worker")["AssignNodeSpec"] == {"EnableAssignNode": True, "NodeNames": "n1,n2",
                                                        "AntiAffinityNodeNames": "n3"}


def test_max_running_time_in_whole_minutes():
    assert fields(job(max_running_time="90s"))["JobMaxRunningTimeMinutes"] == 2
    assert fields(job(max_running_time="2h"))["JobMaxRunningTimeMinutes"] == 120
    assert "JobMaxRunningTimeMinutes" not in fields(job())


def test_idle_resources_annotation():
    assert fields(job(annotations={"pai/idle-resources": "true"}))["Settings"]["EnableTideResource"] is True
    assert "EnableTideResource" not in fields(job(annotations={"pai/idle-resources": "false"}))["Settings"]


# -- fault tolerance ------------------------------------------------------------------------
def test_max_restarts_turns_on_aimaster():
    out = fields(job(fault_tolerance={"max_restarts": 3}))
    assert out["Settings"]["EnableErrorMonitoringInAIMaster"] is True
    assert "--max-num-of-job-restart=3" in out["Settings"]["ErrorMonitoringArgs"]
    assert all(s["RestartPolicy"] == "Never" for s in out["JobSpecs"])
    assert "EnableErrorMonitoringInAIMaster" not in fields(job())["Settings"]


# -- storage and code -----------------------------------------------------------------------
def test_data_sources():
    out = fields(job(storage=[
        {"type": "nfs", "server": "0a1b2c-xyz.cn-hangzhou.nas.aliyuncs.com", "path": "/exports/data",
         "mount_path": "/mnt/data", "read_only": True},
        {"type": "csi", "driver": "ossplugin.csi.alibabacloud.com", "mount_path": "/mnt/oss",
         "volume_attributes": {"bucket": "my-bucket", "url": "oss-cn-hangzhou-internal.aliyuncs.com",
                               "path": "/datasets", "otherOpts": "-o max_stat_cache_size=0"}},
        {"type": "csi", "driver": "cpfs.csi", "mount_path": "/mnt/cpfs", "sub_path": "team",
         "volume_attributes": {"uri": "cpfs://cpfs-0123.cn-hangzhou/share"}},
    ]))
    assert out["DataSources"] == [
        {"Uri": "nas://0a1b2c-xyz.cn-hangzhou.nas.aliyuncs.com/exports/data", "MountPath": "/mnt/data",
         "MountAccess": "RO"},
        {"Uri": "oss://my-bucket.oss-cn-hangzhou-internal.aliyuncs.com/datasets/", "MountPath": "/mnt/oss",
         "MountAccess": "RW", "Options": "-o max_stat_cache_size=0"},
        {"Uri": "cpfs://cpfs-0123.cn-hangzhou/share/team", "MountPath": "/mnt/cpfs", "MountAccess": "RW"},
    ]


def test_code_source_by_annotation():
    commit = fields(job(code={"repo": "https://git.example.com/team/repo.git", "revision": "0123abcd9f",
                              "mount_path": "/root/code"}, annotations={"pai/code-source": "code-123"}))
    assert commit["CodeSource"] == {"CodeSourceId": "code-123", "MountPath": "/root/code", "Commit": "0123abcd9f"}
    branch = fields(job(code={"repo": "https://git.example.com/team/repo.git", "revision": "release-1"},
                        annotations={"pai/code-source": "code-123"}))
    assert branch["CodeSource"]["Branch"] == "release-1" and "Commit" not in branch["CodeSource"]
    only = fields(job(annotations={"pai/code-source": "code-123"}))  # the code source's own branch and path
    assert only["CodeSource"] == {"CodeSourceId": "code-123"}


# -- identity -------------------------------------------------------------------------------
def test_tags_carry_the_task_identity_and_labels():
    out = fields(job(labels={"team": "search"}), workspace_id="ws-1")
    tags = out["Settings"]["Tags"]
    assert tags[naming.LABEL_TASK_KEY] == IDENTITY.key and tags[naming.LABEL_JOB] == NAME
    assert tags[naming.LABEL_TRY] == "3" and tags[naming.LABEL_ATTEMPT] == "1" and tags["team"] == "search"
    assert tags[naming.MANAGED_BY] == "dlc-airflow"
    assert backend.find_tags(IDENTITY).items() <= tags.items()
    assert out["WorkspaceId"] == "ws-1"
    assert IDENTITY.run_id in out["Description"]


def test_custom_role_name_is_kept_in_a_tag():
    out = fields(job(type="custom", roles={"main": 2}))
    assert out["Settings"]["Tags"][backend.CUSTOM_ROLE] == "main"


# -- refusals (one line, the field named) ------------------------------------------------------
REFUSALS = [
    ("launcher", {"type": "deepspeed", "launcher": "mpi"}),
    ("elastic", {"roles": {"worker": 2}, "elastic": {"min_replicas": 1, "max_replicas": 3}}),
    ("port", {"port": 29500}),
    ("slots_per_worker", {"type": "mpi", "roles": {"launcher": 1, "worker": 2}, "slots_per_worker": 4}),
    ("ttl_after_finished", {"ttl_after_finished": "1h"}),
    ("env.TOKEN", {"env": {"TOKEN": {"airflow_variable": "hf_token"}}}),
    ("roles.worker.env.PW", {"roles": {"worker": {"replicas": 1, "env": {"PW": {"secret": "db", "key": "pw"}}}}}),
    ("resources.ephemeral_storage", {"resources": {"cpu": "1", "memory": "1Gi", "ephemeral_storage": "10Gi"}}),
    ("storage[0].type", {"storage": [{"type": "pvc", "claim_name": "data", "mount_path": "/data"}]}),
    ("storage[0].type", {"storage": [{"type": "host_path", "path": "/srv", "mount_path": "/data"}]}),
    ("storage[0].type", {"storage": [{"type": "config_map", "name": "cfg", "mount_path": "/cfg"}]}),
    ("storage[0].type", {"storage": [{"type": "secret", "name": "s", "mount_path": "/s"}]}),
    ("storage[0].type", {"storage": [{"type": "empty_dir", "mount_path": "/scratch"}]}),
    ("storage[0].secret_name", {"storage": [{"type": "csi", "driver": "ossplugin.csi.alibabacloud.com",
                                             "mount_path": "/m", "secret_name": "oss-keys",
                                             "volume_attributes": {"bucket": "b"}}]}),
    ("storage[0]", {"storage": [{"type": "csi", "driver": "ebs.csi.aws.com", "mount_path": "/m"}]}),
    ("storage[0].volume_attributes.uri", {"storage": [{"type": "csi", "driver": "x.csi", "mount_path": "/m",
                                                       "volume_attributes": {"uri": "s3://bucket/x"}}]}),
    ("code.repo", {"code": {"repo": "https://git.example.com/team/repo.git"}}),
    ("code.secret_name", {"code": {"repo": "https://git.example.com/r.git", "secret_name": "git-creds"},
                          "annotations": {"pai/code-source": "code-1"}}),
    ("code.image", {"code": {"repo": "https://git.example.com/r.git", "image": "alpine/git:2"},
                    "annotations": {"pai/code-source": "code-1"}}),
    ("scheduling.node_selector", {"scheduling": {"node_selector": {"pool": "gpu"}}}),
    ("scheduling.tolerations", {"scheduling": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}),
    ("scheduling.service_account", {"scheduling": {"service_account": "trainer"}}),
    ("scheduling.queue_priority", {"scheduling": {"queue": "quota1", "queue_priority": "production"}}),
    ("scheduling.spot", {"scheduling": {"spot": "prefer"}}),
    ("scheduling.topology", {"scheduling": {"queue": "quota1", "topology": {"required": "cloud.provider.com/topology-rack"}}}),
    ("fault_tolerance.retryable_exit_codes", {"fault_tolerance": {"max_restarts": 2, "retryable_exit_codes": [1]}}),
    ("fault_tolerance.restart_on_preemption", {"fault_tolerance": {"restart_on_preemption": False}}),
    ("annotations.example.com/owner", {"annotations": {"example.com/owner": "me"}}),
    ("annotations.pai/ecs-spec-ps", {"annotations": {"pai/ecs-spec-ps": "ecs.g6.large"}}),
    ("annotations.pai/idle-resources", {"annotations": {"pai/idle-resources": "yes"}}),
    ("labels", {"labels": {f"l{i}": "v" for i in range(10)}}),
    ("labels.aliyun-team", {"labels": {"aliyun-team": "x"}}),
    # secret-looking literals: Envs and UserCommand are readable by the whole workspace
    ("env.API_TOKEN", {"env": {"API_TOKEN": "s3cr3t-value"}}),
    ("env.DB_PASSWORD", {"env": {"DB_PASSWORD": "{{ var.value.db_password }}"}}),
    ("roles.worker.env.HF_TOKEN", {"roles": {"worker": {"replicas": 1, "env": {"HF_TOKEN": "hf_x"}}}}),
]


def test_no_secret_reaches_the_request_and_the_refusal_says_what_dlc_offers():
    for spec in ({"env": {"API_TOKEN": "s3cr3t-value"}},
                 {"roles": {"worker": {"replicas": 2, "env": {"WANDB_API_KEY": "s3cr3t-value"}}}}):
        with pytest.raises(BackendError) as err:
            render(job(**spec), NAME, IDENTITY, 1)
        message = str(err.value)
        assert "s3cr3t-value" not in message and "\n" not in message
        assert "CredentialConfig" in message and "readable by the whole workspace" in message
    # a plain literal still goes into Envs
    assert {"LR": "0.1"}.items() <= fields(job(env={"LR": "0.1"}))["Envs"].items()


@pytest.mark.parametrize(("field", "spec"), REFUSALS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(REFUSALS)])
def test_refused_with_the_field_named(field, spec):
    refused(field, **spec)


def test_refused_at_parse_time_by_the_operator():
    from dlc_airflow.operators import DLCJobOperator

    with pytest.raises(BackendError, match="scheduling.tolerations"):
        DLCJobOperator(task_id="t", backend="pai", conn_id="pai_default",
                       job=job(scheduling={"tolerations": [{"key": "gpu", "operator": "Exists"}]}).to_dict())


def test_templated_values_are_checked_once_rendered():
    templated = job(scheduling={"priority_class": "{{ params.prio }}", "queue": "quota1"})
    PaiBackend().check(templated)  # fine at parse time
    with pytest.raises(BackendError, match="priority_class"):
        render(job(scheduling={"priority_class": "urgent", "queue": "quota1"}), NAME, IDENTITY, 1)


# -- status -----------------------------------------------------------------------------------
STATUSES = [
    ("Creating", JobState.PENDING), ("Queuing", JobState.QUEUED), ("Bidding", JobState.QUEUED),
    ("EnvPreparing", JobState.PENDING), ("SanityChecking", JobState.PENDING), ("Running", JobState.RUNNING),
    ("Restarting", JobState.RESTARTING), ("Stopping", JobState.RUNNING), ("SucceededReserving", JobState.SUCCEEDED),
    ("FailedReserving", JobState.FAILED), ("Succeeded", JobState.SUCCEEDED), ("Failed", JobState.FAILED),
    ("Stopped", JobState.STOPPED),
]


@pytest.mark.parametrize(("dlc", "state"), STATUSES, ids=[s[0] for s in STATUSES])
def test_every_documented_status(dlc, state):
    assert status({"Status": dlc}).state is state


def test_status_details():
    data = {
        "Status": "Failed", "ReasonCode": "JobMaxRunningTimeExceeded", "ReasonMessage": "ran out of time",
        "GmtCreateTime": "2026-12-01T10:00:00Z", "GmtRunningTime": "2026-12-01T10:02:00Z",
        "GmtFinishTime": "2026-12-01T10:12:00Z", "RestartTimes": "2/3",
        "JobSpecs": [{"Type": "Master", "PodCount": 1}, {"Type": "Worker", "PodCount": 2}],
        "Pods": [{"PodId": "dlc1-master-0", "Type": "master", "Status": "Failed"},
                 {"PodId": "dlc1-worker-0", "Type": "worker", "Status": "Succeeded"},
                 {"PodId": "dlc1-worker-1", "Type": "worker", "Status": "Running"}],
    }
    st = status(data)
    assert st.state is JobState.FAILED and st.reason == "DeadlineExceeded" and st.message == "ran out of time"
    assert st.restarts == 2
    assert st.durations() == {"queued_seconds": 120.0, "running_seconds": 600.0}
    assert st.roles["master"].failed == 1 and st.roles["worker"].succeeded == 1 and st.roles["worker"].active == 1
    assert st.roles["worker"].replicas == 2
    assert [r.name for r in backend.replicas(data)] == ["master-0", "worker-0", "worker-1"]


def test_queuing_reason_and_unknown_status():
    assert status({"Status": "Queuing", "ReasonCode": "QuotaNotEnough"}).reason == "QuotaNotEnough"
    unknown = status({"Status": "Hibernating"})
    assert unknown.state is JobState.PENDING and "Hibernating" in unknown.message
    assert status({"Status": "Running", "RestartRecord": [{}, {}]}).restarts == 2


def test_custom_roles_read_back_by_their_name():
    data = {"Status": "Running", "Settings": {"Tags": {backend.CUSTOM_ROLE: "main"}},
            "JobSpecs": [{"Type": "Worker", "PodCount": 2}], "Pods": [{"PodId": "x-worker-0", "Type": "worker",
                                                                       "Status": "Running"}]}
    assert status(data).roles["main"].active == 1
