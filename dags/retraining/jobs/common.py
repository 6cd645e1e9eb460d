"""Shared by the digits jobs: the data stream, the model, file helpers. Runs inside the jobs.

The data is scikit-learn's bundled digits set (1797 8x8 images, no download). A fixed 30%
is held out as the test set every interval is scored on; the rest "arrives" as a stream of
ARRIVALS_PER_DAY samples a day from EPOCH on (cycling after DAYS days), so each daily data
interval has new samples to learn from.
"""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = 8
SEED = 7


def _split():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype("float32")
    y = digits.target.astype("int64")
    order = np.random.default_rng(SEED).permutation(len(y))
    cut = int(len(y) * 0.3)
    test, stream = order[:cut], order[cut:]
    return x, y, test, stream


def test_set() -> tuple[np.ndarray, np.ndarray]:
    x, y, test, _ = _split()
    return x[test], y[test]


def arrivals(start: datetime, end: datetime) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, x, y) of the samples that arrived in [start, end)."""
    x, y, _, stream = _split()
    per_day = len(stream) // DAYS
    ids = []
    day = start
    while day < end:
        index = int((day - EPOCH) // timedelta(days=1)) % DAYS
        lo = index * per_day
        # a partial day takes the matching part of that day's arrivals
        span = min(end, day + timedelta(days=1)) - day
        hi = lo + int(per_day * (span / timedelta(days=1)))
        ids.extend(stream[lo:hi].tolist())
        day += span
    ids = np.asarray(ids, dtype="int64")
    return ids, x[ids], y[ids]


def model():
    import torch

    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def save_npz(path: Path, **arrays) -> None:
    """Write atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    os.close(fd)
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_shards(folder: Path) -> dict[str, np.ndarray]:
    files = sorted(folder.glob("shard-*.npz"))
    if not files:
        raise SystemExit(f"no data shards in {folder}: did the preprocess job run for this interval?")
    parts = [np.load(f) for f in files]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0].files}
