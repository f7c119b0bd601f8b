"""Executing a CommunicationPlan with torch.distributed.all_to_all_single (gloo, 3 processes)."""
from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

from tests.helpers.signals import make_dynamic_signal
from tests.helpers.fast_spawn import spawn_context
from pyg_dynscale.partition import CommunicationPlan, DependencyPattern, partition

R = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, q) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=R)
    try:
        sig = make_dynamic_signal(seed=8, T=8, V=16)
        pattern = DependencyPattern.preset("dysat", 2, 3, num_blocks=2)
        results = []
        for scheme in ("pts", "pss", "pss-ts"):
            part = partition(sig, scheme, R)
            plan = CommunicationPlan.build(sig, part, pattern)
            for ex in plan:
                send, send_splits = ex.send_list(rank)
                recv, recv_splits = ex.recv_list(rank)
                # each row's payload is (gid, gid*10): what a rank holds for the nodes it owns
                rows = torch.stack([send, send * 10], 1).double()
                out = torch.empty(sum(recv_splits), 2, dtype=torch.double)
                dist.all_to_all_single(out, rows, recv_splits, send_splits)
                ok = torch.equal(out[:, 0].long(), recv) and torch.equal(out[:, 1].long(), recv * 10)
                # the sender holds what it sends: rank == the row's owner for this phase
                src_owner = part.owner if ex.phase.startswith("spatial") or ex.phase == "redistribution" else part.temporal_owner
                ok = ok and bool((src_owner[send] == rank).all())
                results.append((scheme, ex.block, ex.phase, ok))
        q.put((rank, results))
    finally:
        dist.destroy_process_group()


def test_plan_runs_on_all_to_all_single():
    ctx = spawn_context()  # the suite's fork server (tests/helpers/fast_spawn.py), as spawn()'s ranks
    q = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, port, q)) for r in range(R)]
    for p in procs:
        p.start()
    got = [q.get(timeout=120) for _ in range(R)]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for rank, results in got:
        assert results and all(ok for *_, ok in results), (rank, [r for r in results if not r[-1]])
