"""The prelude's pure part (dlc_airflow.slurm.prelude): Slurm node lists, which replica task k
is, and the env it derives from SLURM_* with the shared wiring; and the connection's settings
(dlc_airflow.slurm.settings): URL, user, JWT problems named without quoting the token."""

from __future__ import annotations

import base64
import json
import os
import time

import pytest

from dlc_airflow.slurm.prelude import PORT_BASE, expand_nodelist, plan_task, redactor_of, replicas
from dlc_airflow.slurm.settings import SlurmConfigError, SlurmSettings, token_claims, token_problem
from dlc_airflow.spec import DLCJob

NAME = "train-0123456789-1"
JOBDIR = f"/shared/jobs/{NAME}"


@pytest.mark.parametrize("text, nodes", [
    ("dlc1", ["dlc1"]),
    ("dlc[1-3]", ["dlc1", "dlc2", "dlc3"]),
    ("dlc[1,3-4],gpu07", ["dlc1", "dlc3", "dlc4", "gpu07"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a[1-2],b[3]", ["a1", "a2", "b3"]),
])
def test_expand_nodelist(text, nodes):
    assert expand_nodelist(text) == nodes


def torch_job(**kw) -> DLCJob:
    return DLCJob(type="pytorch", image="u", roles={"master": 1, "worker": 2}, command=["torchrun", "train.py"],
                  nproc_per_node=4, **kw)


def test_task_k_is_replica_k_on_node_k():
    job = torch_job()
    assert replicas(job) == [("master", 0), ("worker", 0), ("worker", 1)]
    nodes = ["n1", "n2", "n3"]
    addresses = {"n1": "10.0.0.1", "n2": "10.0.0.2", "n3": "10.0.0.3"}
    environ = {"PATH": "/usr/bin", "RANK": "7", "MASTER_ADDR": "stale", "DLC_SLURM_SPEC": "{}", "SLURM_PROCID": "2"}
    tasks = [plan_task(job, NAME, k, nodes, addresses.__getitem__, JOBDIR, environ, job_id=123) for k in range(3)]
    assert [(t.role, t.index) for t in tasks] == replicas(job)
    for rank, task in enumerate(tasks):
        env = task.env
        assert env["RANK"] == env["PET_NODE_RANK"] == str(rank)  # not the inherited RANK=7
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "10.0.0.1"  # replica 0's node
        assert env["MASTER_PORT"] == str(PORT_BASE + 123) and env["WORLD_SIZE"] == "12"
        assert env["SLURM_PROCID"] == "2"  # Slurm's own env stays
        assert "DLC_SLURM_SPEC" not in env  # the prelude's inputs do not
        assert env["DLC_OUTPUT_FILE"] == f"{JOBDIR}/outputs/{task.key}.json"
        assert task.log == f"{JOBDIR}/logs/{task.key}.log" and task.exit_file == f"{JOBDIR}/exits/{task.key}"
        assert task.cwd == JOBDIR and task.argv == ["torchrun", "train.py"]
    fixed = plan_task(torch_job(port=29500), NAME, 0, nodes, str, JOBDIR, {}, job_id=123)
    assert fixed.env["MASTER_PORT"] == "29500"


def test_mpi_hostfile_and_errors():
    job = DLCJob(type="mpi", image="u", roles={"launcher": 1, "worker": 2}, slots_per_worker=4,
                 command=["mpirun", "app"], health_check={"command": ["nvidia-smi"]})
    task = plan_task(job, NAME, 0, ["a", "b", "c"], str, JOBDIR, {}, job_id=1)
    assert task.hostfile == "b slots=4\nc slots=4\n" and task.hostfile_path == f"{JOBDIR}/hostfile"
    assert task.env["OMPI_MCA_orte_default_hostfile"] == task.env["DLC_HOSTFILE"] == f"{JOBDIR}/hostfile"
    assert task.health_argv == ["nvidia-smi"]
    with pytest.raises(ValueError, match="task 3 of a job of 3 replicas"):
        plan_task(job, NAME, 3, ["a", "b", "c"], str, JOBDIR, {}, job_id=1)
    with pytest.raises(ValueError, match="3 replicas but 2 nodes"):
        plan_task(job, NAME, 0, ["a", "b"], str, JOBDIR, {}, job_id=1)


def test_redaction_of_secret_values(tmp_path):
    secrets = tmp_path / ".secrets.json"
    secrets.write_text(json.dumps({"env": {"HF_TOKEN": "hf_abcdef123"}}))
    redact = redactor_of({"DLC_SLURM_SECRETS": str(secrets)})
    assert redact(b"token is hf_abcdef123\n") == b"token is ***\n"
    assert redactor_of({}) is None
    # a file the job cannot read: one line saying why, no traceback
    with pytest.raises(SystemExit, match="cannot read the job's secrets file .*: No such file"):
        redactor_of({"DLC_SLURM_SECRETS": str(tmp_path / "gone.json")})


class Conn:
    def __init__(self, **kw):
        self.conn_type, self.host, self.port, self.login, self.password = "slurm", None, None, None, None
        self.extra_dejson = {}
        for key, value in kw.items():
            setattr(self, key, value)


@pytest.mark.parametrize("host, port, url", [
    ("http://head:6820", None, "http://head:6820"),
    ("head", 6820, "http://head:6820"),
    ("https://head/slurm/", None, "https://head/slurm"),
])
def test_settings_url(host, port, url):
    assert SlurmSettings.from_connection(Conn(host=host, port=port, login="u", password="t"), "c").url == url


@pytest.mark.parametrize("conn, words", [
    (Conn(login="u"), "has no host"),
    (Conn(host="ftp://x", login="u"), "not an http(s) URL"),
    (Conn(host="http://x"), "has no login"),
    (Conn(host="http://x", login="u", conn_type="kubernetes"), "is a 'kubernetes' connection, not slurm"),
    (Conn(host="http://x", login="u", extra_dejson={"api_version": "v0.0.36"}), "extra api_version 'v0.0.36'"),
    (Conn(host="http://x", login="u", extra_dejson={"job_root": "jobs"}), "job_root 'jobs' must be an absolute"),
    (Conn(host="http://x", login="u", extra_dejson={"poll_interval": "soon"}), "poll_interval, timeout and token_grace"),
    (Conn(host="http://x", login="u", extra_dejson={"token_grace": -1}), "token_grace zero or more"),
])
def test_settings_errors_name_the_field(conn, words):
    with pytest.raises(SlurmConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        SlurmSettings.from_connection(conn, "c")


def jwt(**claims) -> str:
    def part(data):
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256'})}.{part(claims)}.sig"


def test_token_problems_never_quote_the_token(tmp_path):
    assert token_claims(jwt(sun="u", exp=1)) == {"sun": "u", "exp": 1}
    assert token_problem("garbage", "u") == "the token is not a JWT (three base64 parts)"
    assert token_problem(jwt(sun="u", exp=100), "u", now=200) == "the JWT expired at 1970-01-01T00:01:40Z"
    assert token_problem(jwt(sun="v", exp=time.time() + 60), "u") == "the JWT is for user 'v', the connection's login is 'u'"
    assert token_problem(jwt(sun="u", exp=time.time() + 60), "u") == ""
    settings = SlurmSettings.from_connection(Conn(host="http://x", login="u", password="s3cret.tok.en"), "c")
    assert "s3cret" not in repr(settings)
    path = tmp_path / "token"
    path.write_text("SLURM_JWT=abc.def.ghi\n")
    assert SlurmSettings(conn_id="c", url="http://x", user="u", token_file=str(path)).read_token() == "abc.def.ghi"
    with pytest.raises(SlurmConfigError, match="has no JWT"):
        SlurmSettings(conn_id="c", url="http://x", user="u").read_token()


def test_connections_with_different_credentials_do_not_share_a_poller(tmp_path):
    def key(**fields):
        return SlurmSettings(conn_id="c", url="http://x", user="u", **fields).cluster_key

    assert key(token_file="/a") == key(token_file="/a") != key(token_file="/b")
    assert key(token="one.two.three") == key(token="one.two.three") != key(token="one.two.four")
    assert all("one.two" not in part for part in key(token="one.two.three"))  # a digest, not the token
    grace = SlurmSettings.from_connection(Conn(host="http://x", login="u", extra_dejson={"token_grace": "5"}), "c")
    assert grace.token_grace == 5.0


def test_a_rotated_token_file_is_read_again_even_within_the_same_second(tmp_path):
    from dlc_airflow.slurm.client import SlurmClient

    path = tmp_path / "token"
    path.write_text("a.b.c\n")
    client = SlurmClient(SlurmSettings(conn_id="c", url="http://x", user="u", token_file=str(path)))
    assert client._token_value() == "a.b.c"
    mtime = path.stat().st_mtime_ns
    fresh = tmp_path / "token.new"
    fresh.write_text("d.e.f\n")
    os.utime(fresh, ns=(mtime, mtime))  # the same mtime: a rename in place is seen by its inode
    fresh.rename(path)
    assert client._token_value() == "d.e.f"
