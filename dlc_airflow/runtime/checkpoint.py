"""Atomic checkpoints: rank 0 writes, a half-written checkpoint is never visible.

A checkpoint is a directory `step-000123/` under the checkpoint root (DLC_CHECKPOINT_DIR,
which the job's `checkpoint` section sets). `save_checkpoint` lets the caller write files
into `.tmp-step-000123-<pid>/` next to it, then renames that into place: a reader (or a
restarted job) sees either the whole checkpoint or none. Each checkpoint holds a small
`.dlc-checkpoint.json` (which job attempt wrote it, and when). Afterwards only the newest
DLC_CHECKPOINT_KEEP (default 3) are kept, never the one named by DLC_RESUME_FROM.

`resume_path()` returns the checkpoint the pipeline or the job spec named
(DLC_RESUME_FROM, set from `checkpoint.resume_from`), else None: a job never resumes from
whatever happens to lie in its checkpoint directory unless it asks to
(`resume_path(fallback_to_latest=True)`, see there). What it returned is reported as the
output "resumed_from".

    from dlc_airflow.runtime import save_checkpoint, resume_path
    start = resume_path()               # None on a fresh start (the first interval)
    if start: model.load_state_dict(torch.load(f"{start}/model.pt"))
    save_checkpoint(lambda d: torch.save(model.state_dict(), f"{d}/model.pt"), step)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from dlc_airflow.jsonvalue import JSONObject
from dlc_airflow.runtime.env import is_coordinator

__all__ = [
    "METADATA_FILE",
    "CheckpointError",
    "checkpoint_dir",
    "checkpoint_metadata",
    "checkpoint_name",
    "latest_checkpoint",
    "list_checkpoints",
    "resume_path",
    "save_checkpoint",
]

DEFAULT_KEEP = 3
METADATA_FILE = ".dlc-checkpoint.json"  # inside each checkpoint: who wrote it, and when
_STEP_DIR = re.compile(r"^step-(\d+)$")
_TMP_DIR = re.compile(r"^\.(?:tmp|old)-step-\d+-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint location that cannot be used; the message says which and why."""


def local_path(location: str | os.PathLike[str]) -> Path:
    """A plain path or a file:// URI as a local path; other schemes are an error."""
    text = os.fspath(location)
    if text.startswith("file://"):
        text = text[len("file://") :]
        if not text.startswith("/"):
            raise CheckpointError(f"{location!r}: a file:// URI needs an absolute path (file:///...)")
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise CheckpointError(
            f"{location!r} is not a local path: mount the store into the containers "
            "(job.storage) and set checkpoint.path to where they see it"
        )
    return Path(text)


def checkpoint_dir(directory: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint root: `directory`, else DLC_CHECKPOINT_DIR, else a file:// DLC_CHECKPOINT_URI."""
    if directory is not None:
        return local_path(directory)
    for name in ("DLC_CHECKPOINT_DIR", "DLC_CHECKPOINT_URI"):
        value = os.environ.get(name)
        if value:
            return local_path(value)
    raise CheckpointError(
        "no checkpoint directory: pass directory=..., or give the job a checkpoint section "
        "(it sets DLC_CHECKPOINT_DIR)"
    )


def checkpoint_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"checkpoint step {step} must not be negative")
    return f"step-{int(step):06d}"


def list_checkpoints(directory: str | os.PathLike[str] | None = None) -> list[tuple[int, Path]]:
    """Complete checkpoints (step, path), oldest step first."""
    root = checkpoint_dir(directory)
    found = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return []
    for entry in entries:
        match = _STEP_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def latest_checkpoint(directory: str | os.PathLike[str] | None = None) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1][1] if found else None


def _resume_local() -> Path | None:
    """DLC_RESUME_FROM as a local path: a URI under DLC_CHECKPOINT_URI maps to DLC_CHECKPOINT_DIR."""
    value = os.environ.get("DLC_RESUME_FROM")
    if not value:
        return None
    uri, mounted = os.environ.get("DLC_CHECKPOINT_URI"), os.environ.get("DLC_CHECKPOINT_DIR")
    if uri and mounted and value.rstrip("/").startswith(uri.rstrip("/")) and "://" in uri:
        rest = value.rstrip("/")[len(uri.rstrip("/")) :].lstrip("/")
        return Path(mounted) / rest if rest else Path(mounted)
    return local_path(value)


def checkpoint_metadata(path: str | os.PathLike[str]) -> JSONObject | None:
    """What `save_checkpoint` recorded in a checkpoint: {"job_name", "step", "saved_at"}
    (job_name is the writer's DLC_JOB_NAME, None outside a job; saved_at a Unix time).
    None for a checkpoint without a readable record (written by something else)."""
    try:
        with open(os.path.join(os.fspath(path), METADATA_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_IMPORTED = time.time()


def _process_started() -> float:
    """When this process started (Unix time): from /proc on Linux (to a clock tick, 10 ms,
    rounded down: a checkpoint saved just before the start may count as after it), else
    when this module was first imported (later than the real start)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime, in ticks
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


def _own_latest() -> Path | None:
    """The newest checkpoint in the directory that this job attempt wrote before this
    process started (see resume_path)."""
    attempt = os.environ.get("DLC_JOB_NAME") or None
    started = _process_started()
    for _step, path in reversed(list_checkpoints()):
        meta = checkpoint_metadata(path)
        if meta is None or (meta.get("job_name") or None) != attempt:
            continue
        saved = meta.get("saved_at")
        if isinstance(saved, (int, float)) and saved < started:
            return path
    return None


def resume_path(*, fallback_to_latest: bool = False, report: bool = True) -> str | None:
    """The checkpoint this job starts from, as a local path, or None to start from scratch.

    - DLC_RESUME_FROM (what the pipeline or the job spec's `checkpoint.resume_from` named)
      when it is set: it always wins.
    - Otherwise None, whatever lies in the checkpoint directory: the first interval of a
      lineage starts from scratch on every re-run, even though an earlier attempt left its
      checkpoints in DLC_CHECKPOINT_DIR, and rank 1 never picks up what rank 0 saved a
      moment ago.
    - With `fallback_to_latest=True` (opt-in, for restart recovery), and only when
      DLC_RESUME_FROM is not set: the newest checkpoint in the directory that was written
      by this same job attempt (its `.dlc-checkpoint.json` names this DLC_JOB_NAME; job
      names end in the attempt number, and a cleared re-run gets a new name) and finished
      before this process started. So a replica that crashed and was restarted resumes the
      attempt's own work, while a new attempt (a retry or re-run) or a replica still
      running its first process starts from scratch. Checkpoints without that record
      (written by other code) are never picked. The times are the writer's and this
      host's clocks, so nodes' clocks must agree (NTP); restarts come well after a save.
      Outside a job (no DLC_JOB_NAME) only checkpoints also written outside a job count.

    With `report`, the answer is reported as the output "resumed_from" (the location as
    DLC_RESUME_FROM or the job's checkpoint URI names it, or None), so it reaches the
    task's XCom next to "checkpoint" and can be checked against the lineage manifest.
    """
    explicit = _resume_local()
    found: Path | None = None
    public: str | None = None
    if explicit is not None:
        found, public = explicit, os.environ["DLC_RESUME_FROM"]
    elif fallback_to_latest and (os.environ.get("DLC_CHECKPOINT_DIR") or os.environ.get("DLC_CHECKPOINT_URI")):
        found = _own_latest()
        public = _public_location(checkpoint_dir(), found) if found is not None else None
    if report:
        from dlc_airflow.runtime.metrics import report_output

        report_output("resumed_from", public)
    return str(found) if found is not None else None


def _keep() -> int:
    raw = os.environ.get("DLC_CHECKPOINT_KEEP")
    if not raw:
        return DEFAULT_KEEP
    try:
        keep = int(raw)
    except ValueError:
        raise CheckpointError(f"DLC_CHECKPOINT_KEEP={raw!r} is not an integer") from None
    if keep < 1:
        raise CheckpointError(f"DLC_CHECKPOINT_KEEP={keep} must be at least 1")
    return keep


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_tree(path: Path) -> None:
    # Data first, then the directory entries: after a crash the renamed checkpoint is whole.
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(
    write_fn: Callable[[str], object],
    step: int,
    directory: str | os.PathLike[str] | None = None,
    *,
    keep: int | None = None,
    report: bool = True,
) -> Path | None:
    """Write checkpoint `step` atomically on the coordinator; a no-op (None) elsewhere.

    `write_fn(path)` writes the checkpoint's files into the directory `path` (e.g. with
    torch.save). A record of the writer (DLC_JOB_NAME, step, time) is added as
    `.dlc-checkpoint.json` (what `resume_path(fallback_to_latest=True)` checks). The
    finished checkpoint is renamed to `<root>/step-<step>`; one of the same step is
    replaced. Then older checkpoints beyond `keep` (DLC_CHECKPOINT_KEEP) are deleted,
    except the one DLC_RESUME_FROM names. With `report`, the checkpoint's location is
    reported as the output "checkpoint" (see dlc_airflow.runtime.metrics).
    """
    if not is_coordinator():
        return None
    root = checkpoint_dir(directory)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create checkpoint directory {root}: {exc.strerror}") from None
    name = checkpoint_name(step)
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        write_fn(str(tmp))
        _write_metadata(tmp, step)
        _fsync_tree(tmp)
        if final.exists():
            # os.replace cannot replace a non-empty directory: move the old one aside first.
            old = root / f".old-{name}-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root, keep if keep is not None else _keep(), protect=final)
    if report:
        from dlc_airflow.runtime.metrics import report_output

        report_output("checkpoint", _public_location(root, final))
    return final


def _write_metadata(folder: Path, step: int) -> None:
    record = {"job_name": os.environ.get("DLC_JOB_NAME") or None, "step": int(step), "saved_at": time.time()}
    with open(folder / METADATA_FILE, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


def _public_location(root: Path, final: Path) -> str:
    """The checkpoint as the job's URI names it (s3://.../step-N) when the root is its mount."""
    uri, mounted = os.environ.get("DLC_CHECKPOINT_URI"), os.environ.get("DLC_CHECKPOINT_DIR")
    if uri and mounted and Path(mounted) == root:
        return uri.rstrip("/") + "/" + final.name
    return str(final)


def _prune(root: Path, keep: int, protect: Path) -> None:
    resume = _resume_local()
    keep_paths = {protect.resolve()}
    if resume is not None:
        keep_paths.add(resume.resolve())
    found = list_checkpoints(root)
    for _step, path in found[: max(0, len(found) - keep)]:
        if path.resolve() not in keep_paths:
            shutil.rmtree(path, ignore_errors=True)
    # leftovers of writers that died mid-write (their pid is gone, or it is ours: a restart)
    for entry in os.scandir(root):
        match = _TMP_DIR.match(entry.name)
        if match:
            pid = int(match.group(1))
            if pid == os.getpid() or not _pid_alive(pid):
                shutil.rmtree(entry.path, ignore_errors=True)
