r"""DistTGL's static node memory (§3.1): a time-independent per-node vector
added to the dynamic (GRU) memory before the embedding layer.

DistTGL's code (amazon-science/disttgl @ e36777d, ``memorys.py``,
``SmartMemoryUpdater.forward``) combines them as

.. math::
    \mathbf{h}_v = \mathrm{GRU}(\ldots, \mathbf{s}_v) + \mathbf{c}_v, \qquad
    \mathbf{c}_v = \begin{cases} \mathbf{r}_v & d_r = d_{mem} \\
    W \mathbf{r}_v + \mathbf{b} & \text{otherwise (``node_feat_map``)} \end{cases}

where :math:`\mathbf{r}_v` is the pre-trained node feature (``rh``) and
:math:`\mathbf{h}_v` feeds the attention layer; the memory written back is the
GRU output without :math:`\mathbf{c}_v`. Here :math:`\mathbf{s}_v`'s update is
``TGNMemory``'s and :math:`\mathbf{h}_v` is the input ``x`` of the embedding
module (``gnn``).
"""
from __future__ import annotations

from typing import Union

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["StaticMemory"]


class StaticMemory(torch.nn.Module):
    r"""The static memory :math:`\mathbf{c}`: ``forward(n_id [B]) -> [B, memory_dim]``.

    Args:
        num_nodes (int): rows.
        memory_dim (int): the dynamic memory's width.
        init: ``"learnable"``: a trained ``[num_nodes, memory_dim]`` table,
            initialised to zero (so training starts from the model without
            it); a ``[num_nodes, d]`` tensor: fixed (pre-trained) rows, mapped
            by a trained ``Linear(d, memory_dim)`` when ``d != memory_dim``.
    """

    def __init__(self, num_nodes: int, memory_dim: int, init: Union[str, Tensor]) -> None:
        super().__init__()
        self.proj = None
        if isinstance(init, str):
            if init != "learnable":
                raise ModelInputError("static_memory", f"is {init!r}.", "use None, 'learnable' or a [num_nodes, d] tensor.")
            self.weight = torch.nn.Parameter(torch.zeros(num_nodes, memory_dim))
            self.learnable = True
        elif isinstance(init, Tensor):
            if init.dim() != 2 or init.size(0) != num_nodes or not init.is_floating_point():
                raise ModelInputError("static_memory", f"is a {init.dtype} tensor of shape {list(init.shape)}.",
                                      f"give a float tensor of shape [{num_nodes}, d] (one row per node).")
            self.register_buffer("weight", init.detach().clone())
            self.learnable = False
            if init.size(1) != memory_dim:
                self.proj = torch.nn.Linear(init.size(1), memory_dim)
        else:
            raise ModelInputError("static_memory", f"is a {type(init).__name__}.", "use None, 'learnable' or a [num_nodes, d] tensor.")

    def forward(self, n_id: Tensor) -> Tensor:
        w = self.weight[n_id]
        return w if self.proj is None else self.proj(w)
