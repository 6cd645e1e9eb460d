"""Atomic checkpoints: real files, real processes (one is SIGKILLed mid-write)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from dlc_airflow.runtime import checkpoint as ckpt
from dlc_airflow.runtime import metrics
from dlc_airflow.runtime.checkpoint import CheckpointError


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "DLC_JOB_NAME", "DLC_CHECKPOINT_DIR", "DLC_CHECKPOINT_URI",
                 "DLC_CHECKPOINT_KEEP", "DLC_RESUME_FROM", "DLC_OUTPUT_FILE", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    metrics._reset_for_tests()
    yield monkeypatch
    metrics._reset_for_tests()


def writer(text: str):
    def write(path: str) -> None:
        with open(os.path.join(path, "weights.txt"), "w") as handle:
            handle.write(text)
    return write


def names(path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def test_save_renames_a_complete_directory_and_keeps_last_n(tmp_path, clean_env):
    clean_env.setenv("DLC_CHECKPOINT_DIR", str(tmp_path))
    clean_env.setenv("DLC_CHECKPOINT_KEEP", "2")
    seen_tmp = []

    def write(path):
        seen_tmp.append(os.path.basename(path))
        assert not (tmp_path / os.path.basename(path).split("-", 1)[1].rsplit("-", 1)[0]).exists()
        writer("w")(path)

    for step in (1, 2, 3):
        final = ckpt.save_checkpoint(write, step)
        assert final == tmp_path / f"step-{step:06d}"
    assert seen_tmp[-1] == f".tmp-step-000003-{os.getpid()}"
    assert names(tmp_path) == ["step-000002", "step-000003"]
    assert (tmp_path / "step-000003" / "weights.txt").read_text() == "w"
    assert ckpt.latest_checkpoint() == tmp_path / "step-000003"
    assert ckpt.resume_path() == str(tmp_path / "step-000003")


def test_same_step_is_replaced_whole(tmp_path):
    ckpt.save_checkpoint(writer("old"), 5, tmp_path)
    (tmp_path / "step-000005" / "stale.txt").write_text("x")
    ckpt.save_checkpoint(writer("new"), 5, tmp_path)
    assert names(tmp_path / "step-000005") == ["weights.txt"]
    assert (tmp_path / "step-000005" / "weights.txt").read_text() == "new"
    assert names(tmp_path) == ["step-000005"]


def test_only_rank_zero_writes(tmp_path, clean_env):
    clean_env.setenv("RANK", "1")
    clean_env.setenv("WORLD_SIZE", "2")
    clean_env.setenv("DLC_JOB_NAME", "j")
    called = []
    assert ckpt.save_checkpoint(lambda p: called.append(p), 1, tmp_path) is None
    assert called == [] and names(tmp_path) == []
    clean_env.setenv("RANK", "0")
    assert ckpt.save_checkpoint(writer("r0"), 1, tmp_path) == tmp_path / "step-000001"


def test_a_failed_write_leaves_nothing(tmp_path):
    ckpt.save_checkpoint(writer("good"), 1, tmp_path)

    def broken(path):
        writer("half")(path)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(broken, 2, tmp_path)
    assert names(tmp_path) == ["step-000001"]
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step-000001"


def test_resume_from_is_never_pruned(tmp_path, clean_env):
    clean_env.setenv("DLC_CHECKPOINT_URI", f"file://{tmp_path}")
    for step in (1, 2):
        ckpt.save_checkpoint(writer(str(step)), step)
    clean_env.setenv("DLC_RESUME_FROM", f"file://{tmp_path}/step-000001")
    assert ckpt.resume_path() == str(tmp_path / "step-000001")
    for step in (3, 4, 5):
        ckpt.save_checkpoint(writer(str(step)), step, keep=1)
    assert names(tmp_path) == ["step-000001", "step-000005"]


def test_resume_from_under_a_remote_uri_maps_to_the_mount(tmp_path, clean_env):
    clean_env.setenv("DLC_CHECKPOINT_URI", "s3://bucket/runs/a")
    clean_env.setenv("DLC_CHECKPOINT_DIR", str(tmp_path))
    clean_env.setenv("DLC_RESUME_FROM", "s3://bucket/runs/a/step-000007")
    assert ckpt.resume_path() == str(tmp_path / "step-000007")
    clean_env.delenv("DLC_RESUME_FROM")
    assert ckpt.resume_path() is None  # nothing saved yet
    ckpt.save_checkpoint(writer("x"), 8)
    # reported under the job's URI, not the mount path
    assert metrics.current_document()["outputs"]["checkpoint"] == "s3://bucket/runs/a/step-000008"


def test_locations_that_are_not_local_are_errors(tmp_path, clean_env):
    with pytest.raises(CheckpointError, match="no checkpoint directory"):
        ckpt.save_checkpoint(writer("x"), 1)
    with pytest.raises(CheckpointError, match="'s3://b/x' is not a local path"):
        ckpt.save_checkpoint(writer("x"), 1, "s3://b/x")
    assert ckpt.resume_path() is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CheckpointError, match="cannot create checkpoint directory"):
        ckpt.save_checkpoint(writer("x"), 1, blocker / "sub")


def test_a_writer_killed_mid_write_is_invisible_and_cleaned_up(tmp_path):
    code = textwrap.dedent(f"""
        import os, time
        from dlc_airflow.runtime.checkpoint import save_checkpoint
        def slow(path):
            open(os.path.join(path, "part1"), "w").write("x")
            print("writing", flush=True)
            time.sleep(60)
        save_checkpoint(slow, 2, {str(tmp_path)!r})
    """)
    ckpt.save_checkpoint(writer("one"), 1, tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        tmp_name = f".tmp-step-000002-{proc.pid}"
        assert tmp_name in names(tmp_path)
        assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step-000001"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step-000001"
    ckpt.save_checkpoint(writer("three"), 3, tmp_path)  # prunes the dead writer's leftovers
    assert names(tmp_path) == ["step-000001", "step-000003"]


def test_step_numbers_sort_numerically(tmp_path):
    for step in (999999, 1000000, 2):
        ckpt.save_checkpoint(writer(str(step)), step, tmp_path, keep=10)
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / "step-1000000"
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [2, 999999, 1000000]
