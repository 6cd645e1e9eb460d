"""Atomic checkpoints: rank 0 writes, a half-written checkpoint is never visible.

A checkpoint is a directory `step-000123/` under the checkpoint root (DLC_CHECKPOINT_DIR,
which the job's `checkpoint` section sets). `save_checkpoint` lets the caller write files
into `.tmp-step-000123-<pid>/` next to it, then renames that into place: a reader (or a
restarted job) sees either the whole checkpoint or none. Afterwards only the newest
DLC_CHECKPOINT_KEEP (default 3) are kept, never the one named by DLC_RESUME_FROM.

    from dlc_airflow.runtime import save_checkpoint, resume_path
    start = resume_path()               # None on a fresh start
    if start: model.load_state_dict(torch.load(f"{start}/model.pt"))
    save_checkpoint(lambda d: torch.save(model.state_dict(), f"{d}/model.pt"), step)
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable

from dlc_airflow.runtime.env import is_coordinator

__all__ = [
    "CheckpointError",
    "checkpoint_dir",
    "checkpoint_name",
    "save_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "resume_path",
]

DEFAULT_KEEP = 3
_STEP_DIR = re.compile(r"^step-(\d+)$")
_TMP_DIR = re.compile(r"^\.(?:tmp|old)-step-\d+-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint location that cannot be used; the message says which and why."""


def local_path(location: str | os.PathLike) -> Path:
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


def checkpoint_dir(directory: str | os.PathLike | None = None) -> Path:
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


def list_checkpoints(directory: str | os.PathLike | None = None) -> list[tuple[int, Path]]:
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


def latest_checkpoint(directory: str | os.PathLike | None = None) -> Path | None:
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


def resume_path() -> str | None:
    """Where to resume from: DLC_RESUME_FROM if set, else the newest checkpoint, else None."""
    explicit = _resume_local()
    if explicit is not None:
        return str(explicit)
    if not (os.environ.get("DLC_CHECKPOINT_DIR") or os.environ.get("DLC_CHECKPOINT_URI")):
        return None
    latest = latest_checkpoint()
    return str(latest) if latest else None


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
    directory: str | os.PathLike | None = None,
    *,
    keep: int | None = None,
    report: bool = True,
) -> Path | None:
    """Write checkpoint `step` atomically on the coordinator; a no-op (None) elsewhere.

    `write_fn(path)` writes the checkpoint's files into the directory `path` (e.g. with
    torch.save). The finished checkpoint is renamed to `<root>/step-<step>`; one of the
    same step is replaced. Then older checkpoints beyond `keep` (DLC_CHECKPOINT_KEEP) are
    deleted, except the one DLC_RESUME_FROM names. With `report`, the checkpoint's location
    is reported as the output "checkpoint" (see dlc_airflow.runtime.metrics).
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
