"""Train (PyTorch DDP over gloo, one process per worker replica): resume from the
predecessor's checkpoint, train on this interval's data, save a checkpoint atomically.

Env: DLC_DATA_URI (the preprocessed data), DLC_RESUME_FROM (set by the pipeline when an
earlier interval succeeded), DLC_CHECKPOINT_DIR; EPOCHS and LR (optional).

resume_path() returns DLC_RESUME_FROM, or None: the first interval starts from scratch on
every run, re-runs included, whatever an earlier attempt left in DLC_CHECKPOINT_DIR. Every
worker reports what it resumed from as the output "resumed_from" (the demo checks it
against the lineage).
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist
from common import load_shards, model, test_set
from torch.nn.parallel import DistributedDataParallel as DDP

from dlc_airflow.runtime import (
    is_coordinator,
    log_metrics,
    pipeline,
    rank,
    resume_path,
    save_checkpoint,
    world_size,
)


def accuracy(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((net(x).argmax(1) == y).float().mean())


def main() -> None:
    dist.init_process_group("gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE from the job's wiring
    torch.set_num_threads(1)
    epochs, lr = int(os.environ.get("EPOCHS", "12")), float(os.environ.get("LR", "0.05"))
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    step = 0
    start = resume_path()  # the predecessor's checkpoint, or None (never "the newest in the directory")
    if start:
        net.load_state_dict(torch.load(os.path.join(start, "model.pt")))
        optimizer.load_state_dict(torch.load(os.path.join(start, "optimizer.pt")))
        with open(os.path.join(start, "meta.json")) as handle:
            step = json.load(handle)["step"]
    ddp = DDP(net)

    data = load_shards(pipeline.data_dir())
    x_all, y_all = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    x, y = x_all[rank()::world_size()], y_all[rank()::world_size()]  # this worker's half
    tx, ty = (torch.from_numpy(a) for a in test_set())
    resumed_accuracy = accuracy(net, tx, ty)
    if is_coordinator():
        print(f"interval {pipeline.interval_key()}: {len(y_all)} samples, {world_size()} workers, "
              f"resumed from {start or 'scratch'} (test accuracy {resumed_accuracy:.3f})", flush=True)
    g = torch.Generator().manual_seed(step)
    loss, first_epoch_accuracy = torch.tensor(0.0), None
    for epoch in range(1, epochs + 1):
        ddp.train()
        for batch in torch.randperm(len(y), generator=g).split(16):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(x[batch]), y[batch])
            loss.backward()  # gradients are averaged over the workers (gloo all-reduce)
            optimizer.step()
            step += 1
        total = loss.detach().clone()
        dist.all_reduce(total)
        acc = accuracy(net, tx, ty)
        if is_coordinator():
            log_metrics(step=step, epoch=epoch, loss=float(total) / world_size(), accuracy=acc)
        first_epoch_accuracy = acc if first_epoch_accuracy is None else first_epoch_accuracy
    final = accuracy(net, tx, ty)
    if is_coordinator():
        log_metrics(step=step, loss=float(total) / world_size(), accuracy=final, resumed_accuracy=resumed_accuracy,
                    first_epoch_accuracy=first_epoch_accuracy, samples=len(y_all))

        def write(folder: str) -> None:
            torch.save(net.state_dict(), os.path.join(folder, "model.pt"))
            torch.save(optimizer.state_dict(), os.path.join(folder, "optimizer.pt"))
            with open(os.path.join(folder, "meta.json"), "w") as handle:
                json.dump({"step": step, "interval": pipeline.interval_key(), "accuracy": final}, handle)

        save_checkpoint(write, step)  # rank 0, write then rename; reports output "checkpoint"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
