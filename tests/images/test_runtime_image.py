"""The images the local cluster builds (scripts/k8s-images), started as throwaway containers
through testcontainers on Podman's Docker-compatible API (scripts/podman-local): what a
container of each runs by default, as whom, and what `python -m dlc_airflow.runtime` says
inside it. In CI a missing API service or image fails them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import IN_CI

SOCKET = Path(os.environ.get("DLC_PODMAN_STATE", Path.home() / ".cache" / "dlc-airflow" / "podman")) / "podman.sock"


@pytest.fixture(scope="module")
def docker_api():
    """testcontainers pointed at Podman's API (only for these tests: the cluster tests would
    otherwise take a Docker API for one to run k3s in)."""
    if not SOCKET.exists():
        message = f"no container API at {SOCKET}: run scripts/podman-local up"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DOCKER_HOST", f"unix://{SOCKET}")
        env.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # its reaper image is on Docker Hub
        yield


def built(variable: str) -> str:
    """The image k8s-images built, by its name in the shared build storage (no pull)."""
    from tests.support.realnode import NodeUnavailable, frameworks_image, runtime_image

    try:
        ref = runtime_image() if variable == "DLC_RUNTIME_IMAGE" else frameworks_image()
    except NodeUnavailable as exc:
        if IN_CI:
            pytest.fail(str(exc), pytrace=False)
        pytest.skip(str(exc))
    return ref.replace("registry.local/", "localhost/", 1)


def run(image: str, command: list[str] | None = None, env: dict[str, str] | None = None) -> tuple[int, str, dict]:
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image)
    if command is not None:
        container = container.with_command(command)
    for key, value in (env or {}).items():
        container = container.with_env(key, value)
    with container:
        wrapped = container.get_wrapped_container()
        code = wrapped.wait(timeout=120)["StatusCode"]
        out, err = container.get_logs()
        return code, (out + err).decode(), wrapped.image.attrs["Config"]  # the image's defaults


@pytest.mark.parametrize("variable", ["DLC_RUNTIME_IMAGE", "DLC_FRAMEWORKS_IMAGE"])
def test_a_container_runs_as_a_user_with_python_and_the_runtime(docker_api, variable):
    image = built(variable)
    code, out, config = run(image, ["sh", "-c", "id -u; python3 -m dlc_airflow.runtime"])
    assert code == 0, out
    uid, line = out.strip().splitlines()[-2:]
    assert uid == "1000" and config["User"] == "1000:1000"  # not root
    assert config["Cmd"] == ["python3"] and config["WorkingDir"] == "/workspace"
    assert json.loads(line) == {"dlc_airflow": "0.1.0", "in_job": False, "rank": 0, "world_size": 1,
                                "coordinator": True, "shard": [0, 1]}


def test_inside_a_job_the_runtime_reads_the_jobs_env(docker_api):
    env = {"DLC_JOB_NAME": "train-1", "DLC_JOB_TYPE": "pytorch", "DLC_ROLE": "worker", "DLC_ROLE_INDEX": "1",
           "DLC_ROLE_REPLICAS": "2", "RANK": "1", "WORLD_SIZE": "2"}
    code, out, _ = run(built("DLC_RUNTIME_IMAGE"), ["python3", "-m", "dlc_airflow.runtime"], env)
    assert code == 0, out
    where = json.loads(out.strip().splitlines()[-1])
    assert (where["job"], where["role"], where["rank"], where["coordinator"]) == ("train-1", "worker", 1, False)
    # an inconsistent env is one line naming the variable, and a failure
    env["RANK"] = "5"
    code, out, _ = run(built("DLC_RUNTIME_IMAGE"), ["python3", "-m", "dlc_airflow.runtime"], env)
    assert code == 1 and out.strip().startswith("dlc-airflow runtime: ") and "RANK" in out, out
