"""Atomic checkpoints: real files, real processes (one is SIGKILLed mid-write); what
resume_path picks (only what was named; the opt-in fallback only within one job attempt)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

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
    assert ckpt.resume_path() is None  # nothing named one: the directory's content is not a resume point
    meta = ckpt.checkpoint_metadata(final)
    assert meta["job_name"] is None and meta["step"] == 3 and isinstance(meta["saved_at"], float)


def test_same_step_is_replaced_whole(tmp_path):
    ckpt.save_checkpoint(writer("old"), 5, tmp_path)
    (tmp_path / "step-000005" / "stale.txt").write_text("x")
    ckpt.save_checkpoint(writer("new"), 5, tmp_path)
    assert names(tmp_path / "step-000005") == [ckpt.METADATA_FILE, "weights.txt"]
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


# -- what resume_path picks ---------------------------------------------------------------
# Readers run as real processes: "saved before this process started" is about the process.

READER = textwrap.dedent("""
    import json, os, sys
    from dlc_airflow.runtime import checkpoint, metrics
    if os.environ.get("WAIT_FOR_STDIN"):
        print("started", flush=True)
        sys.stdin.readline()
    answers = {}
    for fallback in (False, True):
        metrics._reset_for_tests()
        kwargs = {"fallback_to_latest": True} if fallback else {}
        try:
            path = checkpoint.resume_path(**kwargs)
        except TypeError as exc:  # an old resume_path without the argument
            path = repr(exc)
        answers["fallback" if fallback else "default"] = {
            "path": path, "reported": metrics.current_document()["outputs"].get("resumed_from", "missing")}
    print(json.dumps(answers), flush=True)
""")


def reader_env(directory, job: str | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "DLC_CHECKPOINT_DIR": str(directory), **extra}
    if job:
        env.update(DLC_JOB_NAME=job, RANK=extra.get("RANK", "0"), WORLD_SIZE="2")
    return env


def resume_in_new_process(directory, job: str | None, **extra: str) -> dict:
    """resume_path() and resume_path(fallback_to_latest=True) in a process started now."""
    time.sleep(0.05)  # a process's start time is known to a clock tick (10 ms): start clearly after the saves
    done = subprocess.run([sys.executable, "-c", READER], env=reader_env(directory, job, **extra),
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def save_as(clean_env, job: str | None, step: int, directory, text: str = "w"):
    """Save like rank 0 of job attempt `job` would."""
    if job:
        clean_env.setenv("DLC_JOB_NAME", job)
        clean_env.setenv("RANK", "0")
        clean_env.setenv("WORLD_SIZE", "2")
    try:
        return ckpt.save_checkpoint(writer(text), step, directory, report=False)
    finally:
        for name in ("DLC_JOB_NAME", "RANK", "WORLD_SIZE"):
            clean_env.delenv(name, raising=False)


def test_a_rerun_of_the_first_interval_starts_from_scratch(tmp_path, clean_env):
    # the first interval's earlier attempt (a cleared run's job) left its checkpoint here
    save_as(clean_env, "train-1a2b3c4d5e-1", 1, tmp_path, "attempt 1")
    # the re-run: no DLC_RESUME_FROM (no predecessor), a new job name
    answers = resume_in_new_process(tmp_path, "train-9f8e7d6c5b-1")
    assert answers["default"] == {"path": None, "reported": None}
    # even opted in, another attempt's checkpoint is not this attempt's work
    assert answers["fallback"] == {"path": None, "reported": None}


def test_rank_one_does_not_pick_what_rank_zero_just_saved(tmp_path, clean_env):
    job = "train-1a2b3c4d5e-1"
    rank1 = subprocess.Popen([sys.executable, "-c", READER], text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=reader_env(tmp_path, job, RANK="1", WAIT_FOR_STDIN="1"))
    try:
        assert rank1.stdout.readline().strip() == "started"
        save_as(clean_env, job, 1, tmp_path)  # rank 0, same attempt, while rank 1 runs
        out, _ = rank1.communicate("go\n", timeout=60)
    finally:
        if rank1.poll() is None:
            rank1.kill()
            rank1.wait()
    assert rank1.returncode == 0
    answers = json.loads(out.strip().splitlines()[-1])
    assert answers["default"] == {"path": None, "reported": None}
    assert answers["fallback"] == {"path": None, "reported": None}  # saved after rank 1 started
    # a restarted replica of the same attempt (a new process) may opt in to continue its work
    restarted = resume_in_new_process(tmp_path, job, RANK="1")
    assert restarted["default"]["path"] is None
    assert restarted["fallback"] == {"path": str(tmp_path / "step-000001"), "reported": str(tmp_path / "step-000001")}


def test_an_explicit_resume_from_wins(tmp_path, clean_env):
    job = "train-1a2b3c4d5e-1"
    own, predecessor = tmp_path / "interval-2", tmp_path / "interval-1"
    save_as(clean_env, "train-0000000000-1", 4, predecessor)
    save_as(clean_env, job, 9, own)  # this attempt's own, newer work is there too
    named = f"file://{predecessor}/step-000004"
    answers = resume_in_new_process(own, job, DLC_CHECKPOINT_URI=f"file://{own}", DLC_RESUME_FROM=named)
    expected = {"path": str(predecessor / "step-000004"), "reported": named}  # reported as named
    assert answers == {"default": expected, "fallback": expected}
    # in this process too (and nothing is reported when asked not to)
    clean_env.setenv("DLC_RESUME_FROM", named)
    assert ckpt.resume_path(report=False) == str(predecessor / "step-000004")
    assert "resumed_from" not in metrics.current_document()["outputs"]


def test_the_opt_in_fallback_only_sees_this_attempts_checkpoints(tmp_path, clean_env):
    root = tmp_path / "ckpt"
    save_as(clean_env, "train-1a2b3c4d5e-1", 1, root)
    save_as(clean_env, "train-1a2b3c4d5e-2", 2, root)  # the retry of the same task: a new attempt
    save_as(clean_env, "train-1a2b3c4d5e-1", 3, root)
    save_as(clean_env, None, 4, root)  # written outside any job
    (root / "step-000005").mkdir()  # the newest, but not written by save_checkpoint: no record
    remote = {"DLC_CHECKPOINT_URI": "s3://bucket/ckpt"}  # reported as the job's URI names it
    first = resume_in_new_process(root, "train-1a2b3c4d5e-1", **remote)
    assert first["default"] == {"path": None, "reported": None}
    assert first["fallback"] == {"path": str(root / "step-000003"), "reported": "s3://bucket/ckpt/step-000003"}
    assert resume_in_new_process(root, "train-1a2b3c4d5e-2")["fallback"]["path"] == str(root / "step-000002")
    assert resume_in_new_process(root, "train-1a2b3c4d5e-3")["fallback"] == {"path": None, "reported": None}
    assert resume_in_new_process(root, None)["fallback"]["path"] == str(root / "step-000004")
    # the record names the writer's attempt
    assert ckpt.checkpoint_metadata(root / "step-000002")["job_name"] == "train-1a2b3c4d5e-2"
    assert ckpt.checkpoint_metadata(root / "step-000005") is None
