"""`dlc-airflow sanity-check` through the real CLI entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlc_airflow.runtime.sanity import parse_size

CLI = Path(sys.executable).with_name("dlc-airflow")
WIRING = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DLC_CHECKPOINT_DIR", "DLC_JOB_NAME",
          "DLC_ROLE", "DLC_ROLE_INDEX", "DLC_ROLE_REPLICAS", "SHARD_INDEX", "SHARD_COUNT",
          "PET_NODE_RANK", "PET_NNODES", "TF_CONFIG")


def sanity(*args: str, **env: str) -> tuple[int, list[str]]:
    base = {k: v for k, v in os.environ.items() if k not in WIRING}
    result = subprocess.run([str(CLI), "sanity-check", "--dns-timeout", "2", *args],
                            env={**base, **env}, capture_output=True, text=True, timeout=60)
    assert result.stderr == "" or result.returncode != 0, result.stderr
    return result.returncode, result.stdout.splitlines()


def line(lines: list[str], check: str) -> str:
    found = [entry for entry in lines if entry[5:].startswith(check + ":")]
    assert len(found) == 1, lines
    return found[0]


def test_a_consistent_replica_passes(tmp_path):
    code, lines = sanity(RANK="1", WORLD_SIZE="2", MASTER_ADDR="localhost", MASTER_PORT="23456",
                         DLC_ROLE="worker", DLC_ROLE_INDEX="0", DLC_ROLE_REPLICAS="1",
                         DLC_CHECKPOINT_DIR=str(tmp_path / "ckpt"))
    assert code == 0, lines
    assert line(lines, "env") == "ok   env: rank 1 of 2, role worker 0 of 1"
    assert line(lines, "master_addr").startswith("ok   master_addr: localhost resolves to ")
    assert line(lines, "master_port") == "ok   master_port: 23456"
    assert line(lines, "checkpoint_dir") == f"ok   checkpoint_dir: {tmp_path / 'ckpt'} is writable"
    assert (tmp_path / "ckpt").is_dir() and list((tmp_path / "ckpt").iterdir()) == []
    assert lines[-1] == "sanity-check: 7 ok, 0 failed"


def test_rank_not_below_world_size_fails():
    code, lines = sanity(RANK="2", WORLD_SIZE="2")
    assert code == 1
    assert line(lines, "env") == "FAIL env: RANK=2 must be smaller than WORLD_SIZE=2"
    assert lines[-1] == "sanity-check: 5 ok, 1 failed (env)"


def test_unresolvable_master_and_bad_port_fail():
    code, lines = sanity(RANK="0", WORLD_SIZE="2", MASTER_ADDR="no-such-host.invalid", MASTER_PORT="70000")
    assert code == 1
    assert line(lines, "master_addr").startswith("FAIL master_addr: no-such-host.invalid does not resolve")
    assert line(lines, "master_port") == "FAIL master_port: MASTER_PORT='70000' is not a port (1..65535)"


def test_unwritable_checkpoint_dir_fails(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, lines = sanity("--checkpoint-dir", str(blocker / "ckpt"))
    assert code == 1
    assert line(lines, "checkpoint_dir").startswith(f"FAIL checkpoint_dir: {blocker / 'ckpt'} is not writable")


def test_small_shm_and_full_disk_fail():
    code, lines = sanity("--min-shm", "1000Ti", "--min-disk", "1000Ti")
    assert code == 1
    assert line(lines, "shm").startswith("FAIL shm: /dev/shm is ")
    assert "need 1000.0 TiB; set resources.shared_memory" in line(lines, "shm")
    assert line(lines, "disk").startswith("FAIL disk: ") and "need 1000.0 TiB" in line(lines, "disk")


def test_missing_gpus_fail():
    # more GPUs than any machine has: the failure path, also where GPUs exist
    code, lines = sanity("--gpus", "1000")
    assert code == 1
    assert line(lines, "gpus").startswith("FAIL gpus: found ") and line(lines, "gpus").endswith("need 1000")


def test_bad_arguments_are_usage_errors():
    result = subprocess.run([str(CLI), "sanity-check", "--min-shm", "lots"], capture_output=True, text=True)
    assert result.returncode == 2 and "'lots' is not a size" in result.stderr


@pytest.mark.parametrize("text, size", [("512Mi", 512 * 2**20), ("8Gi", 8 * 2**30), ("1G", 10**9),
                                        ("1.5Ki", 1536), ("4096", 4096), ("2GB", 2 * 10**9)])
def test_parse_size(text, size):
    assert parse_size(text) == size
