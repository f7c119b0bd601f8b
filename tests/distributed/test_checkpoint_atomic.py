"""A process killed while writing a checkpoint leaves the previous one
complete and loadable (checkpoints are written aside and renamed into place).

A subprocess saves epoch 1, takes a step, and is SIGKILLed while saving
epoch 2: in the middle of DCP's shard writing, while writing the JSON
record, or right after the rename. The newest complete checkpoint must then
be epoch 1 (the first two) or epoch 2 (the last), and loading it must give
exactly the parameters saved then."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, os, signal, sys
    import torch, torch.distributed as dist
    from pyg_dynscale.training import checkpoint as ck

    where, directory = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    module = torch.nn.ModuleDict({"model": torch.nn.Linear(4, 3)})
    opt = torch.optim.Adam(module.parameters(), lr=0.1)

    def step():
        opt.zero_grad()
        module["model"](torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()

    def params():
        return [p.detach().tolist() for p in module.parameters()]

    step()
    ck.save_checkpoint(directory, 1, module, opt, {"run": "x"}, {"losses": [1.0]})
    json.dump(params(), open(os.path.join(directory, "params-1.json"), "w"))
    step()
    json.dump(params(), open(os.path.join(directory, "params-2.json"), "w"))
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    if where == "shards":  # DCP wrote its files; one of them is cut short, then the process dies
        real = ck.dcp.save
        def save(state, checkpoint_id, process_group=None):
            real(state, checkpoint_id=checkpoint_id, process_group=process_group)
            files = sorted(f for f in os.listdir(checkpoint_id) if f.endswith(".distcp"))
            with open(os.path.join(checkpoint_id, files[0]), "r+b") as f:
                f.truncate(max(os.path.getsize(f.name) // 2, 1))
            die()
        ck.dcp.save = save
    elif where == "record":  # half of the JSON record is on disk
        def dump(obj, f):
            f.write(json.dumps(obj)[:20]); f.flush(); die()
        ck.json.dump = dump
    elif where == "after_rename":
        real_replace = ck.os.replace
        def replace(a, b):
            real_replace(a, b); die()
        ck.os.replace = replace
    ck.save_checkpoint(directory, 2, module, opt, {"run": "x"}, {"losses": [1.0, 0.5]})
    print("not killed")
''')


def _load(path: str) -> list:
    import torch.distributed as dist

    from pyg_dynscale.training import checkpoint as ck

    torch.manual_seed(1)  # other initial values: loading must overwrite them
    module = torch.nn.ModuleDict({"model": torch.nn.Linear(4, 3)})
    opt = torch.optim.Adam(module.parameters(), lr=0.1)
    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        ck.load_checkpoint(path, module, opt, {"run": "x"})
    finally:
        if created:
            dist.destroy_process_group()
    return [p.detach().tolist() for p in module.parameters()]


@pytest.mark.parametrize("where,expect", [("shards", 1), ("record", 1), ("after_rename", 2)])
def test_a_kill_while_writing_leaves_a_loadable_checkpoint(tmp_path, where, expect):
    from pyg_dynscale.training.checkpoint import latest_checkpoint

    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, where, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    epoch, path = latest_checkpoint(str(tmp_path))
    assert epoch == expect
    want = json.loads((tmp_path / f"params-{expect}.json").read_text())
    assert _load(path) == want
