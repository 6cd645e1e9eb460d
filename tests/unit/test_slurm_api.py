"""The slurmrestd OpenAPI versions (dlc_airflow.slurm.api): request shapes and answer parsing
for v0.0.38 (Slurm 22.05, Debian 12) and v0.0.40+ (Slurm 23.11 to 26.x). The field names are
checked against the specs: v0.0.38's from the local daemon's /openapi/v3 (plus the sbatch keys
its parser takes: nodelist, exclude_nodes), v0.0.40's V0040JobDescMsg."""

from __future__ import annotations

import pytest

from dlc_airflow.slurm import api
from dlc_airflow.slurm.api import Api, ApiVersionError, JobRequest

# v0.0.38_job_properties, as slurmrestd 22.05.8 serves it (/openapi/v3), and the two sbatch
# option keys its parser takes although the schema leaves them out (checked against 22.05.8)
V38_JOB_PROPERTIES = {
    "account", "account_gather_frequency", "argv", "array", "batch_features", "begin_time", "burst_buffer",
    "cluster_constraint", "comment", "constraints", "container", "core_specification", "cores_per_socket",
    "cpu_binding", "cpu_binding_hint", "cpu_frequency", "cpus_per_gpu", "cpus_per_task",
    "current_working_directory", "deadline", "delay_boot", "dependency", "distribution", "environment",
    "exclusive", "get_user_environment", "gres", "gres_flags", "gpu_binding", "gpu_frequency", "gpus",
    "gpus_per_node", "gpus_per_socket", "gpus_per_task", "hold", "kill_on_invalid_dependency", "licenses",
    "mail_type", "mail_user", "mcs_label", "memory_binding", "memory_per_cpu", "memory_per_gpu",
    "memory_per_node", "minimum_cpus_per_node", "minimum_nodes", "name", "nice", "no_kill", "nodes", "open_mode",
    "oversubscribe", "partition", "prefer", "priority", "qos", "requeue", "reservation", "signal",
    "sockets_per_node", "spread_job", "standard_error", "standard_input", "standard_output", "tasks",
    "tasks_per_core", "tasks_per_node", "tasks_per_socket", "thread_specification", "threads_per_core",
    "time_limit", "time_minimum", "wait_all_nodes", "wckey",
} | {"nodelist", "exclude_nodes"}
# v0.0.40_job_desc_msg fields we send (the generated client's V0040JobDescMsg)
V40_JOB_DESC = {
    "account", "comment", "cpus_per_task", "current_working_directory", "environment", "excluded_nodes",
    "maximum_nodes", "memory_per_node", "minimum_nodes", "name", "partition", "qos", "required_nodes", "requeue",
    "script", "standard_error", "standard_output", "tasks", "tasks_per_node", "time_limit", "tres_per_node",
}

REQUEST = JobRequest(name="train-0123456789-1", script="#!/bin/bash\necho hi\n", environment={"A": "1", "B": "x=y"},
                     working_directory="/shared/jobs", nodes=3, tasks=3, tasks_per_node=1, cpus_per_task=4,
                     memory_per_node_mb=16384, gpus_per_node=2, gpu_type="a100", time_limit_minutes=90,
                     partition="gpu", qos="high", account="team", required_nodes=("n1", "n2"),
                     excluded_nodes=("n9",), requeue=False, comment="dlc-airflow:{}")


def test_versions():
    assert api.parse_version("v0.0.38") == api.parse_version("0.0.38") == "0.0.38"
    with pytest.raises(ApiVersionError, match="0.0.36.*not a slurmrestd OpenAPI version this backend speaks"):
        api.parse_version("v0.0.36")
    served = api.versions_served({"paths": {"/slurm/v0.0.36/jobs": {}, "/slurm/v0.0.38/ping": {},
                                            "/slurmdb/v0.0.38/jobs": {}, "/openapi/v3": {}}})
    assert served == ["0.0.36", "0.0.38"] and api.choose(served) == "0.0.38"
    assert api.choose(["0.0.38", "0.0.40", "0.0.44"]) == "0.0.44"
    assert api.choose(["0.0.39", "0.0.36"]) is None


def test_v38_submit_body():
    body = Api("0.0.38").submit_body(REQUEST)
    job = body["job"]
    assert body["script"] == REQUEST.script and "script" not in job
    assert set(job) <= V38_JOB_PROPERTIES, set(job) - V38_JOB_PROPERTIES
    assert job["environment"] == {"A": "1", "B": "x=y"}
    assert job["nodes"] == [3, 3] and job["tasks"] == 3 and job["tasks_per_node"] == 1 and job["cpus_per_task"] == 4
    assert job["memory_per_node"] == 16384 and job["time_limit"] == 90
    assert job["gpus_per_node"] == "a100:2"
    assert job["nodelist"] == "n1,n2" and job["exclude_nodes"] == "n9"
    assert (job["partition"], job["qos"], job["account"], job["requeue"]) == ("gpu", "high", "team", False)


@pytest.mark.parametrize("version", api.NEW)
def test_v40_and_later_submit_body(version):
    body = Api(version).submit_body(REQUEST)
    job = body["job"]
    assert set(body) == {"job"} and job["script"] == REQUEST.script
    assert set(job) <= V40_JOB_DESC, set(job) - V40_JOB_DESC
    assert job["environment"] == ["A=1", "B=x=y"]
    assert job["minimum_nodes"] == job["maximum_nodes"] == 3
    assert job["memory_per_node"] == {"set": True, "infinite": False, "number": 16384}
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 90}
    assert job["tres_per_node"] == "gres/gpu:a100:2"
    assert job["required_nodes"] == ["n1", "n2"] and job["excluded_nodes"] == ["n9"]


def test_unset_fields_are_left_out():
    plain = JobRequest(name="x", script="s", environment={}, working_directory="/w", nodes=1)
    for version in ("0.0.38", "0.0.41"):
        job = Api(version).submit_body(plain)["job"]
        assert not {"memory_per_node", "time_limit", "gpus_per_node", "tres_per_node", "nodelist", "partition",
                    "qos", "account", "required_nodes"} & set(job)


# a job of the local Slurm 22.05.8 as GET /slurm/v0.0.38/jobs answered (trimmed)
V38_FAILED = {"job_id": 1, "name": "probe-1", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
              "state_description": "", "exit_code": 768, "derived_exit_code": 0, "comment": "dlc-airflow test",
              "nodes": "dlc[1-2]", "batch_host": "dlc1", "start_time": 1796277833, "end_time": 1796277840,
              "submit_time": 1796277830, "restart_cnt": 0, "partition": "debug", "user_name": "root"}
V40_COMPLETED = {"job_id": 7, "name": "train-1", "job_state": ["COMPLETED"], "state_reason": "None",
                 "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "infinite": False, "number": 0},
                               "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}},
                 "submit_time": {"set": True, "infinite": False, "number": 1796277830},
                 "start_time": {"set": True, "infinite": False, "number": 1796277831},
                 "end_time": {"set": True, "infinite": False, "number": 1796277840}, "restart_cnt": 2,
                 "comment": "c", "partition": "gpu", "nodes": "n[1-2]"}


def test_records_of_both_shapes():
    failed = Api("0.0.38").record(V38_FAILED)
    assert (failed.state, failed.reason, failed.exit_code, failed.signal) == ("FAILED", "NonZeroExitCode", 3, None)
    assert (failed.submit_time, failed.start_time, failed.end_time) == (1796277830.0, 1796277833.0, 1796277840.0)
    done = Api("0.0.41").record(V40_COMPLETED)
    assert (done.state, done.exit_code, done.signal, done.restarts) == ("COMPLETED", 0, None, 2)
    assert done.start_time == 1796277831.0 and done.partition == "gpu"
    killed = Api("0.0.38").record({**V38_FAILED, "exit_code": 9, "job_state": "CANCELLED"})
    assert (killed.exit_code, killed.signal) == (0, 9)
    pending = Api("0.0.40").record({"job_id": 3, "job_state": ["PENDING", "REQUEUED"], "start_time": 0,
                                    "exit_code": {"status": ["PENDING"], "return_code": {"set": False}}})
    assert pending.state == "PENDING" and pending.flags == ("REQUEUED",) and pending.exit_code is None
    assert pending.start_time is None
    completing = Api("0.0.38").record({"job_id": 4, "job_state": "COMPLETING"})
    assert completing.state == "" and completing.flags == ("COMPLETING",)


def test_errors_of_both_shapes():
    v38 = {"errors": [{"error_code": 2000, "error": "Invalid partition name specified"}]}
    assert api.errors(v38) == [{"text": "Invalid partition name specified", "number": 2000, "source": ""}]
    v38b = {"errors": [{"description": "Unable to find JobId=99999", "error_number": 2017,
                        "error": "Invalid job id specified", "source": "slurm_load_job"}]}
    assert api.error_text(v38b) == "Unable to find JobId=99999 (Invalid job id specified) [slurm_load_job]"
    assert api.is_invalid_job_id(v38b) and not api.is_invalid_job_id(v38)
    # 22.05 answers a held job's submit with an error and the new job's id: the job exists
    held = {"errors": [{"error_code": 2042, "error": "Job is in held state, pending scheduler release"}], "job_id": 2}
    assert Api("0.0.38").submitted_id(held) == 2
    assert Api("0.0.38").submitted_id(v38) is None
    assert Api("0.0.41").submitted_id({"result": {"job_id": 5}}) == 5


def test_numbers():
    assert api.number(5) == 5 and api.number({"set": True, "number": 5}) == 5
    assert api.number({"set": False, "number": 5}) is None and api.number({"set": True, "infinite": True}) is None
    assert api.number(True) is None and api.number("5") is None
