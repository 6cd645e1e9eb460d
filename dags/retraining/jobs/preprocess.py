"""Preprocess (a batch job, one replica per shard): select this interval's arrivals and
write this shard's part to DLC_OUTPUT_URI/shard-<i>.npz."""

from __future__ import annotations

from common import arrivals, save_npz

from dlc_airflow.runtime import log_metrics, pipeline, report_output, shard


def main() -> None:
    index, count = shard()
    start, end = pipeline.interval()
    ids, x, y = arrivals(start, end)
    mine = slice(index, None, count)
    out = pipeline.output_dir() / f"shard-{index}.npz"
    save_npz(out, ids=ids[mine], x=x[mine], y=y[mine])
    print(f"shard {index}/{count}: {len(ids[mine])} of {len(ids)} samples of "
          f"[{start:%Y-%m-%d %H:%M}, {end:%Y-%m-%d %H:%M}) -> {out}", flush=True)
    log_metrics(**{f"rows_shard{index}": len(ids[mine])})
    report_output("data", pipeline.output_uri())


if __name__ == "__main__":
    main()
