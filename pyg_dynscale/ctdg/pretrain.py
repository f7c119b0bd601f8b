r"""Pre-training of DistTGL's static node memory on the same task (§3.1, §4.0.1:
"the same GNN architecture with static information only", 10 epochs)."""
from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.data import TemporalData

from ..errors import ModelInputError
from .models import TGN
from .trainer import MemoryTrainer

__all__ = ["pretrain_static_memory"]


def pretrain_static_memory(
    data: TemporalData,
    memory_dim: int = 100,
    *,
    time_dim: int = 100,
    embedding_dim: int = 100,
    epochs: int = 10,
    batch_size: int = 200,
    lr: float = 1e-4,
    num_neighbors: int = 10,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    r"""Learn a ``[num_nodes, memory_dim]`` static memory on the link-prediction task.

    A fresh :class:`~pyg_dynscale.ctdg.TGN` of the given sizes is trained by
    :class:`~pyg_dynscale.ctdg.MemoryTrainer` with
    ``static_memory="learnable"`` and ``dynamic_memory=False``: the embedding
    layer sees the learnable table only (same attention layer over the last
    neighbours, same loss, the training events only, so nothing from the
    validation or test events leaks into it). The learned table is returned, to
    be passed as ``MemoryTrainer(..., static_memory=table)`` (fixed rows, as
    DistTGL loads ``learned_node_feats.pt``).

    Differences from DistTGL: mini-batches are chronological (DistTGL samples
    them "stochastically"; here the neighbour loader needs time order) and the
    model is PyG's TGN rather than DGL's.

    The global random generator is re-seeded (``torch.manual_seed(seed)``).
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ModelInputError("epochs", f"is {epochs!r}.", "use an integer >= 1.")
    torch.manual_seed(seed)
    model = TGN(data.num_nodes, data.msg.size(-1), memory_dim, time_dim, embedding_dim).to(dtype)
    trainer = MemoryTrainer(model, data, batch_size=batch_size, lr=lr, num_neighbors=num_neighbors, seed=seed,
                            static_memory="learnable", dynamic_memory=False)
    for _ in range(epochs):
        trainer.train_epoch()
    return trainer.static.weight.detach().clone()
