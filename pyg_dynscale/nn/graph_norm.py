r"""PyG's graph normalizations without reading a value back to the host,
where the self-loops of the graph are known on the host.

``ChebConv.__norm__`` (via ``get_laplacian``'s ``remove_self_loops``) and
``gcn_norm`` (via ``add_remaining_self_loops``) find the self-loops of
``edge_index`` with boolean masks: the size of their output depends on
values, so on a GPU every call waits for the device to catch up (four
read-backs per ``ChebConv`` normalization, three or four per ``gcn_norm``).
A trainer whose batch graphs are cut from host-side edge lists knows where
those self-loops are before the step. :func:`cheb_norm` and :func:`gcn_norm`
take that knowledge as ``loops`` -- a host ``LongTensor`` of the positions
:math:`i` with ``edge_index[0, i] == edge_index[1, i]`` (empty: none) -- and
run PyG's own operations in PyG's order on position lists instead of masks,
so their results are PyG's bit for bit (tested against the installed PyG).
``loops=None`` (not known) calls PyG's function itself.

Only the dense ``edge_index`` form is covered (PyG's sparse-tensor inputs go
to PyG).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

__all__ = ["self_loops", "cheb_norm", "gcn_norm"]


def self_loops(edge_index: Tensor) -> Tensor:
    """Host ``[L]`` positions of the self-loops of a **host** ``[2, E]`` edge list."""
    return (edge_index[0] == edge_index[1]).nonzero().flatten()


def _kept(loops: Tensor, num_edges: int, device: torch.device) -> Optional[Tensor]:
    """The positions that are not self-loops (on ``device``), ``None`` if every edge is kept."""
    if loops.numel() == 0:
        return None
    keep = torch.ones(num_edges, dtype=torch.bool)
    keep[loops] = False
    return keep.nonzero().flatten().to(device)


def cheb_norm(conv: torch.nn.Module, edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor],
              dtype: Optional[torch.dtype], loops: Optional[Tensor] = None) -> tuple:
    r"""``conv.__norm__(edge_index, num_nodes, edge_weight, conv.normalization,
    lambda_max=None, dtype=dtype, batch=None)`` of a PyG ``ChebConv``:
    :math:`\hat L = 2L/\lambda_{max} - I` with :math:`\lambda_{max}` twice the
    largest entry of the Laplacian :math:`L` (``"sym"``: :math:`I - D^{-1/2}
    A D^{-1/2}`, ``"rw"``: :math:`I - D^{-1} A`, ``None``: :math:`D - A`),
    the input's self-loops dropped and one loop per node appended.

    Args:
        conv: the ``ChebConv`` (its ``normalization``).
        edge_index: ``[2, E]``.
        num_nodes: :math:`n`.
        edge_weight: ``[E]`` or ``None`` (ones).
        dtype: of the ones when ``edge_weight`` is ``None``.
        loops: host positions of the self-loops in ``edge_index`` (``None``:
            PyG's own function, which finds them on the device).

    Returns:
        ``(edge_index [2, E' + n], weight [E' + n])``, :math:`E'` the edges
        that are not self-loops, then the ``n`` loops.
    """
    normalization = conv.normalization
    if loops is None:
        return conv.__norm__(edge_index, num_nodes, edge_weight, normalization, None, dtype=dtype, batch=None)
    from torch_geometric.utils import add_self_loops, scatter

    if normalization is not None and normalization not in ("sym", "rw"):
        raise ValueError(f"ChebConv normalization {normalization!r}")
    # get_laplacian, its remove_self_loops done with the known positions
    keep = _kept(loops, edge_index.shape[1], edge_index.device)
    if keep is not None:
        edge_index = edge_index.index_select(1, keep)
        edge_weight = None if edge_weight is None else edge_weight.index_select(0, keep)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    row, col = edge_index[0], edge_index[1]
    deg = scatter(edge_weight, row, 0, dim_size=num_nodes, reduce="sum")
    if normalization is None:
        edge_index, _ = add_self_loops(edge_index, num_nodes=num_nodes)
        edge_weight = torch.cat([-edge_weight, deg], dim=0)
    elif normalization == "sym":
        deg_inv_sqrt = deg.pow_(-0.5)
        deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float("inf"), 0)
        edge_weight = deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]
        edge_index, edge_weight = add_self_loops(edge_index, -edge_weight, fill_value=1., num_nodes=num_nodes)
    else:
        deg_inv = 1.0 / deg
        deg_inv.masked_fill_(deg_inv == float("inf"), 0)
        edge_weight = deg_inv[row] * edge_weight
        edge_index, edge_weight = add_self_loops(edge_index, -edge_weight, fill_value=1., num_nodes=num_nodes)
    # ChebConv.__norm__ with lambda_max=None
    lambda_max = 2.0 * edge_weight.max()
    edge_weight = (2.0 * edge_weight) / lambda_max
    edge_weight.masked_fill_(edge_weight == float("inf"), 0)
    # its loop mask: after get_laplacian the only self-loops are the n appended last
    e = edge_weight.shape[0] - num_nodes
    edge_weight[e:] -= 1
    return edge_index, edge_weight


def gcn_norm(conv: torch.nn.Module, edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor],
             dtype: Optional[torch.dtype], loops: Optional[Tensor] = None) -> tuple:
    r"""PyG's ``gcn_norm(edge_index, edge_weight, num_nodes, conv.improved,
    conv.add_self_loops, conv.flow, dtype)`` for a ``GCNConv`` ``conv``:
    :math:`\hat A = D^{-1/2} (A + \hat I) D^{-1/2}`, with ``add_self_loops``
    each node's self-loop weight kept where it has one (the last, as PyG's
    assignment leaves it) and ``fill_value`` (1, 2 if ``improved``)
    elsewhere, the loops moved to the end.

    Args:
        conv: the ``GCNConv`` (its ``improved``, ``add_self_loops``, ``flow``).
        edge_index: ``[2, E]``.
        num_nodes: :math:`n`.
        edge_weight: ``[E]`` or ``None`` (ones).
        dtype: of the ones when ``edge_weight`` is ``None``.
        loops: host positions of the self-loops in ``edge_index`` (``None``:
            PyG's own function).

    Returns:
        ``(edge_index, weight)`` as PyG's ``gcn_norm``.
    """
    from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm

    improved, add_loops, flow = conv.improved, conv.add_self_loops, conv.flow
    if loops is None:
        return pyg_gcn_norm(edge_index, edge_weight, num_nodes, improved, add_loops, flow, dtype)
    from torch_geometric.utils import scatter

    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"GCNConv flow {flow!r}")
    fill_value = 2. if improved else 1.
    if add_loops:
        # add_remaining_self_loops, its masks replaced by the known positions
        device = edge_index.device
        keep = _kept(loops, edge_index.shape[1], device)
        loop_index = torch.arange(0, num_nodes, device=device).view(1, -1).repeat(2, 1)
        if edge_weight is not None:
            loop_attr = edge_weight.new_full((num_nodes,) + edge_weight.size()[1:], fill_value)
            if loops.numel():
                at = loops.to(device)
                loop_attr[edge_index[0].index_select(0, at)] = edge_weight.index_select(0, at)
            kept = edge_weight if keep is None else edge_weight.index_select(0, keep)
            edge_weight = torch.cat([kept, loop_attr], dim=0)
        if keep is not None:
            edge_index = edge_index.index_select(1, keep)
        edge_index = torch.cat([edge_index, loop_index], dim=1)
    if edge_weight is None:
        edge_weight = torch.ones((edge_index.size(1),), dtype=dtype, device=edge_index.device)
    row, col = edge_index[0], edge_index[1]
    idx = col if flow == "source_to_target" else row
    deg = scatter(edge_weight, idx, dim=0, dim_size=num_nodes, reduce="sum")
    deg_inv_sqrt = deg.pow_(-0.5)
    deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float("inf"), 0)
    edge_weight = deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]
    return edge_index, edge_weight
