"""A job folder: what the local and Slurm backends keep of a job on a file system.

    <folder>/
      spec.json                 the spec as submitted (dlc_airflow.specpack: no secret values)
      logs/<role>-<i>.log       stdout+stderr of each replica
      outputs/<role>-<i>.json   what each replica reported (DLC_OUTPUT_FILE, dlc_airflow.runtime)

Each backend adds its own files (local/jobdir.py: the supervisor's state; slurm/backend.py:
exit codes and the batch script's result). The writers are the local supervisor and the Slurm
prelude; the readers here serve both runners the same way: logs by byte offsets, whole lines
only while the job runs, and the replicas' reports merged with rank 0's last (its values win).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlc_airflow.jsonvalue import JSONDict
from dlc_airflow.runner import LogLine, LogPositions, Outputs, merge_outputs

SPEC = "spec.json"
LOGS = "logs"
OUTPUTS = "outputs"
MAX_LOG_READ = 1 << 20  # bytes per replica per read

# A replica's key (the file's stem: "master-0", "worker-2") -> its place in rank order.
RankOf = Callable[[str], Any]


def read_logs(folder: Path, positions: LogPositions | None, ended: bool,
              rank: RankOf) -> tuple[list[LogLine], LogPositions]:
    """New lines of every replica's log since `positions` (byte offsets by replica), in rank
    order, and the positions to pass next time. Only whole lines while the job runs; a last
    line without a newline comes once it has `ended`."""
    offsets = dict(positions or {})
    logs = folder / LOGS
    if not logs.is_dir():
        return [], offsets
    lines: list[LogLine] = []
    for path in sorted(logs.glob("*.log"), key=lambda p: rank(p.stem)):
        replica = path.stem
        offset = offsets.get(replica)
        start = offset if isinstance(offset, int) else 0
        try:
            with open(path, "rb") as handle:
                handle.seek(start)
                data = handle.read(MAX_LOG_READ)
        except OSError:
            continue
        if not data:
            continue
        cut = len(data) if (ended and len(data) < MAX_LOG_READ) else data.rfind(b"\n") + 1
        if cut <= 0:
            continue
        lines.extend(LogLine(replica, line) for line in data[:cut].decode("utf-8", errors="replace").splitlines())
        offsets[replica] = start + cut
    return lines, offsets


def read_outputs(folder: Path, rank: RankOf) -> Outputs:
    """What the replicas reported, merged so that rank 0's values win."""
    from dlc_airflow.runtime.metrics import read_outputs as read_report

    reports = folder / OUTPUTS
    if not reports.is_dir():
        return merge_outputs([])
    paths = sorted(reports.glob("*.json"), key=lambda p: rank(p.stem), reverse=True)
    return merge_outputs(read_report(path) for path in paths)


def read_spec(folder: Path) -> JSONDict | None:
    """spec.json, where this process sees the folder; None without one (or a damaged one)."""
    try:
        data = read_json(folder / SPEC, None)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Any) -> None:
    """Replace `path` atomically with `data` as JSON: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, separators=(",", ":"), default=str)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path, default: Any = None) -> Any:
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default
    except ValueError:
        # only replaced whole, so this is a file someone edited by hand: say so
        raise ValueError(f"{path} is not valid JSON; the job folder is damaged") from None
