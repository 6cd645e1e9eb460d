"""Batch inference (one replica per shard): score this shard of the interval's data with
the model at DLC_MODEL_URI and write DLC_OUTPUT_URI/shard-<i>.npz."""

from __future__ import annotations

import os

import torch
from common import load_shards, model, save_npz

from dlc_airflow.runtime import log_metrics, pipeline, report_output, shard


def main() -> None:
    index, count = shard()
    torch.set_num_threads(1)
    net = model()
    net.load_state_dict(torch.load(os.path.join(pipeline.model_dir(), "model.pt")))
    net.eval()
    data = load_shards(pipeline.data_dir())
    mine = slice(index, None, count)
    ids, x, y = data["ids"][mine], torch.from_numpy(data["x"][mine]), data["y"][mine]
    with torch.no_grad():
        predicted = net(x).argmax(1).numpy()
    out = pipeline.output_dir() / f"shard-{index}.npz"
    save_npz(out, ids=ids, predicted=predicted, label=y)
    correct = int((predicted == y).sum())
    print(f"shard {index}/{count}: {len(ids)} predictions with {pipeline.model_uri()} -> {out}", flush=True)
    log_metrics(**{f"predictions_shard{index}": len(ids), f"correct_shard{index}": correct})
    report_output("predictions", pipeline.output_uri())


if __name__ == "__main__":
    main()
