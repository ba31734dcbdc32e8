"""torch_ddp.py: the PyTorch peer of clremat's data-parallel benchmark
(bench/bench.py, section mpi): the models of torch_models.py trained with
DistributedDataParallel (gloo, CPU) in WORLD processes on this machine, the
global batch split evenly, 2 / WORLD intra-op threads per process so that
both peers use the same cores. Prints one JSON line from rank 0:
{"step_ms_median": ..., "world": ..., "threads": ...}."""
import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from torch_models import Block, Embed, Head, mlp_model


def worker(rank, a, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=a.world)
    torch.set_num_threads(max(1, a.threads // a.world))
    torch.manual_seed(1)
    if a.model == "mlp":
        model, batch = mlp_model(), 256
        x = torch.randn(batch, 1024)
        y = torch.randint(0, 10, (batch,))
    else:
        model, batch = nn.Sequential(Embed(), Block(), Block(), Head()), 32
        x = torch.randint(0, 16, (batch, 16))
        y = torch.flip(x, dims=[1])
    lb = batch // a.world
    x, y = x[rank * lb:(rank + 1) * lb], y[rank * lb:(rank + 1) * lb]
    ddp = nn.parallel.DistributedDataParallel(model)
    if a.model == "mlp":
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(ddp.parameters(), lr=1e-3, eps=1e-8)
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = ddp(x)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()  # DDP all-reduces the gradient buckets during backward
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if s >= a.warmup:
            times.append(dt)
    if rank == 0:
        print(json.dumps({"step_ms_median": statistics.median(times), "world": a.world, "threads": a.threads}),
              flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=["mlp", "transformer"])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="threads over all processes")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rendezvous")
        mp.spawn(worker, args=(a, init), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
