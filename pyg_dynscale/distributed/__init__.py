"""Distributed training on ``torch.distributed`` (DGC's decomposed path).

:class:`DistributedTrainer` executes a partition's
:class:`~pyg_dynscale.partition.CommunicationPlan`: halo exchanges inside the
structure encoder, recurrent states across ranks in rounds, attention rows
merged in time order, PSS-TS redistribution, global BatchNorm statistics and
loss normalizers, and a gradient all-reduce.

The plumbing every trainer family shares lives in :mod:`pyg_dynscale.training`
and is re-exported here: :func:`spawn` runs ``N`` local gloo processes (tests,
notebooks; production jobs use ``torchrun``, e.g. ``pyg-dynscale train``);
:func:`save_checkpoint` / :func:`load_checkpoint` write and restore training
state with :mod:`torch.distributed.checkpoint`. The modules' old places
(``pyg_dynscale.distributed.checkpoint``, ``.launch``, ``.failure``,
``.groups``) keep importing for one release, with a :class:`DeprecationWarning`:
they are the modules of :mod:`pyg_dynscale.training` themselves (``groups`` is
:mod:`pyg_dynscale.training.ranks`).
"""
from ..training.checkpoint import CheckpointMismatchError, latest_checkpoint, load_checkpoint, save_checkpoint
from ..training.launch import SpawnError, free_port, spawn
from .exchange import Communicator
from .local import RankLayout
from .shards import read_shard, write_shards
from .trainer import FUSION_MODES, DistributedTrainer

__all__ = ["DistributedTrainer", "FUSION_MODES", "Communicator", "RankLayout", "write_shards", "read_shard", "spawn", "SpawnError", "free_port",
           "save_checkpoint", "load_checkpoint", "latest_checkpoint", "CheckpointMismatchError"]
