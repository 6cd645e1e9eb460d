"""`make demo` / `python -m dlc_airflow.demo`: three days of incremental retraining on a laptop.

From a fresh clone: makes its own Airflow home under demo-output/ (SQLite, `airflow db
migrate`), points the dags folder at the repo's dags/, and runs three consecutive daily
intervals of dags/retraining_digits.py with dag.test on the local backend - real PyTorch
DDP training, 2 worker processes over gloo on CPU, each interval resuming from the one
before. Then prints a table and writes demo-output/accuracy.png.

    python -m dlc_airflow.demo [--output DIR] [--days N] [--keep] [--cluster]

--cluster (`make demo-cluster`) runs the same chain in pods on the local cluster's real node
(dags/retraining_digits_cluster.py on the native backend; dlc_airflow.demo_cluster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dlc_airflow.jsonvalue import JSONObject

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "retraining_digits"
CLUSTER_DAG_ID = "retraining_digits_cluster"
FIRST_DAY = datetime(2026, 1, 1, tzinfo=UTC)


def _setup(out: Path, keep: bool, dag_id: str) -> Path:
    dags = REPO / "dags"
    if not (dags / f"{dag_id}.py").exists():
        raise SystemExit(f"cannot find {dags / (dag_id + '.py')}: run the demo from a clone of dlc-airflow "
                         "(pip install -e '.[demo]')")
    home = out / "airflow"
    if not keep:
        for sub in ("airflow", "lineage", "jobs"):
            shutil.rmtree(out / sub, ignore_errors=True)
        (out / "demo.log").unlink(missing_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    print(f"demo: Airflow and job output goes to {out / 'demo.log'}", flush=True)
    os.environ.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "False",
        "DLC_LINEAGE_ROOT": f"file://{out / 'lineage'}",
        "DLC_LOCAL_ROOT": str(out / "jobs"),
        # The demo's Airflow is yours, so you are its admin: its jobs mount the DAG's code
        # folder (read-only) and the lineage folder as host paths, which the default policy
        # denies (README, Security).
        "AIRFLOW__DLC_AIRFLOW__POLICY": json.dumps({"host_paths": [
            {"prefix": str(dags / "retraining")}, {"prefix": str(out / "lineage"), "writable": True}]}),
    })
    print(f"demo: Airflow home {home} (SQLite); migrating the metadata DB...", flush=True)
    airflow = Path(sys.executable).parent / "airflow"
    done = subprocess.run([str(airflow), "db", "migrate"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"`airflow db migrate` failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return dags


@contextlib.contextmanager
def _quiet(log: Path):
    """Send Airflow's (and the jobs') chatter to `log` instead of the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _load_dag(dags: Path, dag_id: str) -> Any:
    import importlib.util

    sys.path.insert(0, str(dags))
    spec = importlib.util.spec_from_file_location(dag_id, dags / f"{dag_id}.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"demo: cannot load {dags / f'{dag_id}.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


def _xcom(dag_id: str, run_id: str, task_id: str) -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id,
                                                 key="return_value").one_or_none()
        return None if row is None else XComModel.deserialize_value(row)


def _epochs(job_dir: Path) -> list[JSONObject]:
    """The per-epoch DLC_METRICS lines rank 0 printed."""
    from dlc_airflow.runtime.metrics import parse_metric_line

    rows = []
    for line in (job_dir / "logs" / "worker-0.log").read_text(errors="replace").splitlines():
        record = parse_metric_line(line)
        if record and "epoch" in record:
            rows.append(record)
    return rows


def _predictions(uri: str) -> int:
    import numpy as np

    folder = Path(uri.removeprefix("file://"))
    return sum(len(np.load(f)["predicted"]) for f in folder.glob("shard-*.npz"))


def run(out: Path, days: int, keep: bool, cluster: bool = False) -> list[JSONObject]:
    dag_id = CLUSTER_DAG_ID if cluster else DAG_ID
    dags = _setup(out, keep, dag_id)
    if cluster:
        from dlc_airflow import demo_cluster

        demo_cluster.prepare(out)
    dag = _load_dag(dags, dag_id)
    rows = []
    for day in range(days):
        start = FIRST_DAY + timedelta(days=day)
        began = time.monotonic()
        print(f"demo: interval [{start:%Y-%m-%d}, {start + timedelta(days=1):%Y-%m-%d}) ... ", end="", flush=True)
        # A manual run of a data-interval timetable covers the last interval that ended by
        # its logical date: the interval [start, start + 1 day) is the run at its end.
        with _quiet(out / "demo.log"):
            dag_run = dag.test(logical_date=start + timedelta(days=1))
        seconds = time.monotonic() - began
        states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
        print(f"{dag_run.state} in {seconds:.0f}s", flush=True)
        if str(dag_run.state) != "success":
            raise SystemExit(f"demo: the run for {start:%Y-%m-%d} ended {dag_run.state}: {states}; "
                             f"see {out / 'demo.log'}; task logs are under {out / 'airflow' / 'logs'}"
                             + ("" if cluster else f", job logs under {out / 'jobs'}"))
        lineage = _xcom(dag_id, dag_run.run_id, "retrain.lineage")
        train = _xcom(dag_id, dag_run.run_id, "retrain.train")
        promote = _xcom(dag_id, dag_run.run_id, "retrain.promote") or {}
        # what the training job itself resumed from (resume_path reports it) is what the
        # lineage named: the predecessor's checkpoint, or nothing for the first interval
        reported = (train.get("outputs") or {}).get("resumed_from")
        if reported != (lineage["resume_from"] or None):
            raise SystemExit(f"demo: the training job for {start:%Y-%m-%d} resumed from {reported or 'scratch'}, "
                             f"but the lineage named {lineage['resume_from'] or 'scratch'}; see {out / 'demo.log'}")
        rows.append({
            "interval": lineage["interval"],
            "start": start,
            "resumed_from": lineage["resumed_from"],
            "metrics": train["metrics"],
            "epochs": (demo_cluster.epochs(train["job_name"]) if cluster
                       else _epochs(Path(os.environ["DLC_LOCAL_ROOT"]) / train["job_name"])),
            "promoted": promote.get("promoted"),
            "predictions": _predictions(lineage["predictions_uri"]),
            "seconds": seconds,
        })
    return rows


def table(rows: list[JSONObject]) -> str:
    head = (f"{'interval':<12} {'resumed from':<14} {'train loss':>10} {'acc at start':>12} "
            f"{'acc epoch 1':>11} {'accuracy':>9} {'promoted':>8} {'predictions':>11} {'time':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        m = r["metrics"]
        resumed = (datetime.strptime(r["resumed_from"][:8], "%Y%m%d").strftime("%Y-%m-%d")
                   if r["resumed_from"] else "(scratch)")
        lines.append(
            f"{r['start']:%Y-%m-%d}   {resumed:<14} {m['loss']:>10.4f} {m['resumed_accuracy']:>12.3f} "
            f"{m['first_epoch_accuracy']:>11.3f} {m['accuracy']:>9.3f} {str(bool(r['promoted'])).lower():>8} "
            f"{r['predictions']:>11} {r['seconds']:>5.0f}s")
    return "\n".join(lines)


def plot(rows: list[JSONObject], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    offset = 0
    for r in rows:
        epochs = r["epochs"]
        xs = [offset] + [offset + e["epoch"] for e in epochs]
        ys = [r["metrics"]["resumed_accuracy"]] + [e["accuracy"] for e in epochs]
        ax.plot(xs, ys, marker="o", markersize=3, label=f"{r['start']:%Y-%m-%d}"
                + (" (resumed)" if r["resumed_from"] else " (from scratch)"))
        ax.axvline(offset, color="grey", linewidth=0.5, linestyle=":")
        offset = xs[-1]
    ax.set_xlabel("epoch (cumulative over intervals; each interval starts at its resumed accuracy)")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1)
    ax.set_title("dlc-airflow demo: incremental retraining, DDP (2 workers, gloo)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dlc_airflow.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=os.environ.get("DLC_DEMO_OUTPUT", "demo-output"),
                        help="folder for the Airflow home, lineage, job folders and the plot (default: demo-output)")
    parser.add_argument("--days", type=int, default=3, help="consecutive daily intervals to run (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep an earlier demo's state instead of starting fresh")
    parser.add_argument("--cluster", action="store_true",
                        help="run the jobs in pods on the local cluster's real node (make cluster first)")
    args = parser.parse_args(argv)
    out = Path(args.output).resolve()
    began = time.monotonic()
    rows = run(out, args.days, args.keep, cluster=args.cluster)
    print()
    print(table(rows))
    png = out / "accuracy.png"
    plot(rows, png)
    (out / "results.json").write_text(json.dumps(
        [{**r, "start": r["start"].isoformat()} for r in rows], indent=1, default=str))
    carried = all(r["metrics"]["resumed_accuracy"] >= rows[i - 1]["metrics"]["accuracy"] - 1e-6
                  for i, r in enumerate(rows) if i)
    print()
    print(f"Each interval resumed from the one before: its accuracy at start equals the previous final "
          f"accuracy ({'yes' if carried else 'NO'}).")
    print(f"plot: {png}")
    print(f"lineage manifest: {out / 'lineage' / (CLUSTER_DAG_ID if args.cluster else DAG_ID) / 'lineage.json'}")
    print(f"demo: done in {time.monotonic() - began:.0f}s")
    return 0 if carried else 1


if __name__ == "__main__":
    sys.exit(main())
