"""docs/training.md's "Many machines" blocks run, as two agents on localhost (issue 37, item 6).

tests/docs/test_blocks.py runs a page's blocks once, in one process: a command meant for every machine of a job
would wait for the others at its rendezvous. Those blocks are marked ``skip="several machines:
tests/docs/test_many_machines.py runs ..."`` there and run here, each as two "machines" on one: the block started
twice, concurrently, in one working directory (the shared filesystem), ``HEAD=127.0.0.1`` and the rendezvous port
replaced by a free one (:func:`tests.helpers.agents.start_agents`: the first agent hosts the rendezvous). The SLURM
script's ``srun`` line runs as each node's task would: its ``torchrun`` command with ``SLURM_NNODES=2``,
``SLURM_NODEID`` 0 and 1 and ``SLURM_JOB_ID`` set (``srun`` and ``scontrol`` are SLURM's).

Each run must end with status 0 on both agents and one report, from the machine holding rank 0, of a job of
2 x 2 processes.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from pyg_dynscale.training.launch import free_port
from tests.docs.test_blocks import ROOT, Block, block_env, make_workdir, parse_blocks
from tests.helpers.agents import start_agents

PAGE = ROOT / "docs" / "training.md"
MARK = "tests/docs/test_many_machines.py"
PORT = "29500"  # the port the blocks write after $HEAD
TIMEOUT = 420.0

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, /proc: Linux only"),
              # two agents running a job of 4 processes per test, on 2 cores: may pass the suite's 300 s
              pytest.mark.timeout(900)]


def machine_blocks() -> list[Block]:
    return [b for b in parse_blocks(PAGE) if b.skip is not None and MARK in b.skip]


def srun_line(script: str) -> str:
    """The command of a batch script's ``srun`` line (with its continuation lines), without ``srun``."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    cmd = [lines[start][len("srun "):]]
    i = start
    while lines[i].rstrip().endswith("\\"):
        i += 1
        cmd.append(lines[i])
    return "\n".join(cmd) + "\n"


def test_the_section_has_its_three_blocks() -> None:
    blocks = machine_blocks()
    kinds = ["srun " in b.source for b in blocks]
    assert len(blocks) == 3 and kinds == [False, False, True], [b.where for b in blocks]
    for b in blocks:
        assert b.lang == "bash" and f'"$HEAD:{PORT}"' in b.source, b.where
    assert "pyg-dynscale train" in blocks[0].source and "--nnodes 2" in blocks[0].source
    assert blocks[1].source.startswith("torchrun --nnodes 2 ") and "--rdzv-backend c10d" in blocks[1].source
    assert '--nnodes "$SLURM_NNODES"' in srun_line(blocks[2].source)


@pytest.mark.parametrize("index", [0, 1, 2], ids=["pyg-dynscale", "torchrun", "slurm"])
def test_block_runs_on_two_agents(index: int, tmp_path: Path) -> None:
    block = machine_blocks()[index]
    script = srun_line(block.source) if "srun " in block.source else block.source
    port = free_port()
    script = script.replace(f"$HEAD:{PORT}", f"$HEAD:{port}")
    work = make_workdir(tmp_path / "work")
    env = {**block_env(python=False), "HEAD": "127.0.0.1"}
    slurm = [{"SLURM_NNODES": "2", "SLURM_NODEID": str(n), "SLURM_JOB_ID": "4242"} for n in (0, 1)]
    cmd = ["bash", "-euo", "pipefail", "-c", script]
    agents = start_agents([cmd, cmd], port, tmp_path / "logs", env, work, slurm)
    for a in agents:
        a.wait(TIMEOUT)
    for a in agents:
        assert a.proc.returncode == 0, f"{block.where}, {a.name}:\n{a.stderr[-3000:]}"
        if script.startswith("pyg-dynscale "):  # the launcher's own run: its --resume line, nothing else on stderr
            noise = [s for s in a.stderr.splitlines() if s.strip() and "--resume: no complete checkpoint" not in s]
            assert not noise, f"{block.where}, {a.name}:\n{a.stderr[-2000:]}"  # (no torchrun warning, traceback)
    printed = [a.stdout for a in agents if a.stdout.strip()]
    if "--json" in script:
        out = re.search(r'> "?([^"\s]+)"?\s*$', script.strip())
        report = json.loads((work / out.group(1).replace("$SLURM_JOB_ID", "4242")).read_text())
        assert report["world_size"] == 4 and report["epochs"] == 2, report
        assert not printed
    else:
        assert len(printed) == 1, printed
        assert ": 4 process(es), " in printed[0], printed[0]
