"""Processes of local jobs: who is alive, and killing whole process groups.

Each replica runs in its own session (process group), as a container's processes share a
fate: stopping a replica kills whatever it spawned. A pid alone is not an identity (pids
are reused), so a recorded process is (pid, start time); the start time comes from
/proc/<pid>/stat where there is a /proc, and is None elsewhere (pid only).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks since boot (Linux), else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after the last ')'
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall
    except (IndexError, ValueError):
        return None


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()[0].decode()


def alive(pid: int | None, started: int | None = None) -> bool:
    """True if `pid` runs and is the process that started at `started` (when known).

    A zombie (exited, not yet reaped by its parent) counts as dead.
    """
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if os.path.isdir("/proc"):
        state = _state(pid)
        if state is None or state in ("Z", "X"):
            return False
        if started is not None and start_time(pid) != started:
            return False
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_groups(pgids: Iterable[int], grace: float, poll: Callable[[], object] | None = None) -> None:
    """SIGTERM every group, wait up to `grace` seconds for them to go, then SIGKILL the rest.

    `poll()` is called while waiting, so a parent can reap its children (a zombie leader
    keeps its group alive).
    """
    groups = [g for g in pgids if g and g > 1]
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if poll is not None:
            poll()
        if not any(group_alive(g) for g in groups):
            break
        time.sleep(0.02)
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)
    if poll is not None:
        poll()

