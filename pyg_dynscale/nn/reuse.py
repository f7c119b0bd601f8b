r"""ReInc's reuse (§3.1) for PyGT's ``GConvGRU``,
``GConvLSTM``, ``GCLSTM``, ``TGCN`` and ``DCRNN`` (:func:`reuse_for` picks
the implementation; ``GConvGRU`` is explained below, the others are alike:
the input aggregation once per snapshot, the input projections of many steps
in one matrix product, the hidden aggregation once per step for all gates).

``GConvGRU`` computes, per step, six Chebyshev convolutions

.. math::
    Z = \sigma(\Theta_{xz} \star X + \Theta_{hz} \star H), \quad
    R = \sigma(\Theta_{xr} \star X + \Theta_{hr} \star H), \quad
    \tilde H = \tanh(\Theta_{xh} \star X + \Theta_{hh} \star (H \odot R)),

each :math:`\Theta \star X = \sum_{k<K} \bar T_k(\hat L) X\, \Theta_k + b`
with its own normalization and Chebyshev basis :math:`T_k(\hat L) X`. The
basis does not depend on parameters, so:

* **input basis, once**: :math:`T_k(\hat L_t) X_t` of every snapshot is
  computed once (:attr:`ChebReuse.basis`, ``[N, K, F]``: ``K`` times the
  feature storage) instead of by each of the three input gates of every step
  (and, in windowed training, by every window that reads snapshot :math:`t`);
* **input projections, batched**: the input side of every gate does not
  depend on the state either, so :meth:`ChebReuse.project` applies the three
  (four for LSTMs) input projections of any number of rows -- all steps of an
  epoch -- as one product ``[N, K F] @ [K F, G out]`` (:meth:`weights` stacks
  the gates' :math:`\Theta_k` once per forward);
* **hidden basis, shared**: per step, :math:`T_k(\hat L) H` is computed once
  for :math:`Z` and :math:`R` and projected by one product; :math:`\hat L` is
  normalized once per graph instead of six times per step.

Per step only the state-dependent part runs (:meth:`ChebReuse.step_projected`:
two hidden propagations for ``GConvGRU``, one for the LSTMs). The arithmetic
is the cell's up to float rounding (the order of the sums; tested to 1e-9 in
float64 against the cell itself).
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Optional

import torch
from torch import Tensor

from .graph_norm import cheb_norm, gcn_norm
from .reinc_reuse import LAYER_REUSE

__all__ = ["ChebReuse", "GConvGRUReuse", "GConvLSTMReuse", "GCLSTMReuse", "TGCNReuse", "DCRNNReuse", "reuse_for",
           "spread", "Propagation", "static_basis"]


def _grad(keep: bool) -> contextlib.AbstractContextManager:
    """``torch.no_grad()``, or (``keep``) the caller's grad mode: an input basis is parameter-free, but the
    basis of a prediction carries its gradient."""
    return contextlib.nullcontext() if keep else torch.no_grad()


def _is_pygt(module: torch.nn.Module, name: str) -> bool:
    """``module`` is an instance of PyGT's class ``name`` itself (a subclass may change ``forward``)."""
    cls = type(module)
    return cls.__name__ == name and (cls.__module__ or "").startswith("torch_geometric_temporal")


def reuse_for(module: torch.nn.Module) -> Optional[type]:
    """The reuse implementation for ``module`` (``None``: none, the module is called as it is)."""
    if type(module) in LAYER_REUSE:  # ReInc's layers (nn.reinc_models)
        return LAYER_REUSE[type(module)]
    if callable(getattr(module, "reuse_impl", None)):  # a layer that names its own (nn.tgcn.TGCN)
        return module.reuse_impl()
    if _is_pygt(module, "TGCN") and not module.cached:
        return TGCNReuse
    if _is_pygt(module, "DCRNN"):
        return DCRNNReuse
    if getattr(module, "normalization", "sym") != "sym":
        return None
    if _is_pygt(module, "GConvGRU"):
        return GConvGRUReuse
    if _is_pygt(module, "GConvLSTM"):
        return GConvLSTMReuse
    if _is_pygt(module, "GCLSTM"):
        return GCLSTMReuse
    return None


def spread(edge_index: Tensor, weight: Tensor, x: Tensor) -> Tensor:
    r""":math:`\text{out}_i = \sum_{(j, i)} w_{ji} x_j`: the propagation of
    PyG's ``ChebConv``, ``DConv`` and ``GCNConv`` (message ``w * x_j``, sum
    at the target; ``edge_index`` ``[2, E]``, ``weight`` ``[E]``, ``x``
    ``[n, w]``) as three tensor operations, without ``propagate``'s per-call
    bookkeeping (it runs once or twice per step)."""
    return x.new_zeros(x.shape).index_add_(0, edge_index[1], x.index_select(0, edge_index[0]) * weight.unsqueeze(1))


class _CSRProduct(torch.autograd.Function):
    """``A @ x`` with a constant sparse ``A`` whose transpose is given (the backward is ``A^T @ grad``)."""

    @staticmethod
    def forward(ctx, A: Tensor, At: Tensor, x: Tensor) -> Tensor:  # noqa: ANN001
        ctx.At = At
        return A @ x

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple:  # noqa: ANN001
        return None, None, ctx.At @ grad


class Propagation:
    r"""The fixed operator :math:`x \mapsto \sum_{(j, i)} w_{ji} x_j` of one graph
    (:func:`spread`), built once and applied at every step.

    With ``fast=True`` on the CPU it is a CSR matrix product, its transpose
    kept for the backward: one pass over the edges instead of
    :func:`spread`'s gather, multiply and scatter of ``[E, w]`` rows (several
    times faster at a few thousand nodes). Elsewhere (CUDA, where PyG
    scatters too; the fake device of the placement tests) it is
    :func:`spread`. Both sum the same terms (in another order: equal up to
    float rounding). :meth:`apply_tensors` moves it (the CSR form is rebuilt
    on the target device when that is the CPU).

    Args:
        edge_index: ``[2, E]`` (source, target).
        weight: ``[E]``.
        num_nodes: ``n``.
        fast: build the CSR form where it applies.
    """

    def __init__(self, edge_index: Tensor, weight: Tensor, num_nodes: int, fast: bool = False) -> None:
        self.edge_index, self.weight, self.num_nodes, self.fast = edge_index, weight, int(num_nodes), fast
        self._csr: Optional[tuple] = None
        if fast and edge_index.device.type == "cpu" and type(edge_index) is Tensor and type(weight) is Tensor:
            self._csr = (self._matrix(edge_index[1], edge_index[0]), self._matrix(edge_index[0], edge_index[1]))

    def _matrix(self, rows: Tensor, cols: Tensor) -> Tensor:
        n = self.num_nodes
        with warnings.catch_warnings():  # "CSR support is in beta": matrix products with a dense operand are stable
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), self.weight, (n, n), check_invariants=True)
            return coo.coalesce().to_sparse_csr()

    def __call__(self, x: Tensor) -> Tensor:
        if self._csr is not None and x.device.type == "cpu":
            return _CSRProduct.apply(self._csr[0], self._csr[1], x)
        return spread(self.edge_index, self.weight, x)

    def apply_tensors(self, fn) -> "Propagation":  # noqa: ANN001
        return Propagation(fn(self.edge_index), fn(self.weight), self.num_nodes, self.fast)


def static_basis(obj: object, x: Tensor, T: int, edge_index: Tensor, edge_weight: Optional[Tensor],
                 chunk_bytes: int = 1 << 26) -> Tensor:
    r"""``[T n, K', F]``: ``obj.input_basis`` of ``T`` snapshots that share one
    graph, without their block-diagonal ``[2, T E]`` edge list.

    Every input basis here (:math:`T_k(\hat L) X`, :math:`\hat A X`, the
    forward and backward diffusions of ``DCRNN``) is linear and applies one
    operator of the graph to each feature column alone, so the basis of
    snapshots :math:`X_0 .. X_{T-1}` is that of :math:`[X_0 \| \dots \|
    X_{T-1}]` (``[n, T F]``, column ``t F + f``) on the one graph: the graph
    is normalized once per chunk of ``c`` snapshots and propagated over their
    ``c F`` columns, and the result is written back to the storage layout.
    ``c`` keeps a chunk's temporaries near ``chunk_bytes``: its basis
    (``n K' c F`` entries) and a propagation's gathered messages (``E c F``,
    twice: :func:`spread` gathers, then weighs). Per entry the same
    terms are summed as on the block-diagonal graph.

    Args:
        obj: a reuse object (its ``input_basis``; an object with
            ``graph_free_input`` keeps ``x`` as it is).
        x: ``[T n, F]`` the snapshots' features, snapshot-major.
        T: snapshots.
        edge_index: ``[2, E]`` the one graph (local rows ``< n``).
        edge_weight: ``[E]`` or ``None``.
        chunk_bytes: target size of one chunk's basis.
    """
    if getattr(obj, "graph_free_input", False):
        return obj.input_basis(x, edge_index, edge_weight)
    n, F = x.shape[0] // T, x.shape[1]
    out: Optional[Tensor] = None
    t, c = 0, 1
    with torch.no_grad():
        while t < T:
            c = min(c, T - t)
            xs = x[t * n:(t + c) * n].reshape(c, n, F).transpose(0, 1).reshape(n, c * F)
            b = obj.input_basis(xs, edge_index, edge_weight)  # [n, K', c F]
            K = b.shape[1]
            if out is None:
                out = b.new_empty(T * n, K, F)
            out[t * n:(t + c) * n].view(c, n, K, F).copy_(b.reshape(n, K, c, F).permute(2, 0, 1, 3))
            t += c
            c = max(1, chunk_bytes // max(1, (n * K + 2 * edge_index.shape[1]) * F * b.element_size()))
    return out


def cheb_basis(x: Tensor, prop, K: int) -> list:  # noqa: ANN001
    r"""``[T_0 x, ..., T_{K-1} x]`` as PyG's ``ChebConv.forward`` builds them
    (``prop``: :math:`x \mapsto \hat L x`, a :class:`Propagation`)."""
    out = [x]
    if K > 1:
        tx0, tx1 = x, prop(x)
        out.append(tx1)
        for _ in range(2, K):
            tx2 = 2.0 * prop(tx1) - tx0
            out.append(tx2)
            tx0, tx1 = tx1, tx2
    return out


def cheb_weight(convs: list) -> Tensor:
    r"""``[K in, G out]``: the :math:`\Theta_k` of ``G`` ``ChebConv`` s side by side
    (row block ``k`` multiplies :math:`T_k x`)."""
    return torch.cat(cheb_weights(convs), 0)


def cheb_weights(convs: list) -> list:
    r"""Per order ``k``, ``[in, G out]``: the :math:`\Theta_k` of ``G`` ``ChebConv`` s side by side."""
    return [torch.cat([conv.lins[k].weight.t() for conv in convs], 1) for k in range(len(convs[0].lins))]


def accumulate(out: Tensor, terms: list, weights: list) -> Tensor:
    """``out + sum_k terms[k] @ weights[k]`` as a chain of ``addmm`` (no
    concatenation of the terms)."""
    for t, w in zip(terms, weights):
        out = torch.addmm(out, t, w)
    return out


def _bias(*terms: Optional[Tensor]) -> Optional[Tensor]:
    """The sum of the present bias terms (each ``[out]`` or ``[1, out]``), flattened."""
    out = None
    for b in terms:
        if b is not None:
            out = b.reshape(-1) if out is None else out + b.reshape(-1)
    return out


def _affine(x: Tensor, w: Tensor, b: Optional[Tensor]) -> Tensor:
    return torch.addmm(b, x, w) if b is not None else x @ w


class ChebReuse:
    r"""The reuse shared by PyGT's Chebyshev cells (``normalization="sym"``):
    the input basis of every snapshot, computed once.

    Args:
        cell: the PyGT cell (its own parameters are used).
        x: ``[N_all, F]`` features of every vertex-time node (the storage).
        edge_index: ``[2, E_all]`` edges of all snapshots with global rows
            (the storage's block-diagonal graph).
        edge_weight: ``[E_all]`` or ``None``.

    Use either :meth:`step` per step (``basis`` rows in), or, to batch the
    input projections of many steps: ``w = weights()`` once per forward,
    ``P = project(basis_rows, w)`` for all rows at once, then per step
    :meth:`step_projected` with that step's rows of ``P``.
    """

    #: name of a Chebyshev convolution of the input (its propagation builds the basis)
    input_conv = ""
    #: name of a Chebyshev convolution of the hidden state
    hidden_conv = ""
    #: input convolutions in the column order of :meth:`project` (one per gate)
    input_convs: tuple = ()
    #: carried state components (``H``; ``H, C``)
    num_states = 1

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = len(getattr(cell, self.input_conv).lins)
        #: ``[N_all, K, F]``: the input basis of every snapshot, computed once
        self.basis = self.input_basis(x, edge_index, edge_weight)

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None, grad: bool = False) -> Tensor:
        r"""``[n, K, F]``: :math:`T_k(\hat L) x` on one graph (``loops``: as :meth:`normalize`; ``grad``: keep
        the autograd graph of ``x``, e.g. a fed-back prediction, else none)."""
        with _grad(grad):
            g = self.normalize(edge_index, x.shape[0], edge_weight, x.dtype, loops)
            return torch.stack(cheb_basis(x, self.operators(g), self.K), 1)

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> tuple:
        r"""``(edge_index, norm)`` of :math:`\hat L` (``ChebConv.__norm__`` as the cell's call runs it:
        ``lambda_max=None``, i.e. twice the largest entry of :math:`L`, 2 for non-negative weights);
        ``loops``: host positions of the self-loops of ``edge_index``, if known: nothing is read back
        (:func:`~pyg_dynscale.nn.graph_norm.cheb_norm`)."""
        return cheb_norm(getattr(self.cell, self.hidden_conv), edge_index, n, edge_weight, dtype, loops)

    @staticmethod
    def operators(graph, n: Optional[int] = None, fast: bool = False):  # noqa: ANN001, ANN205
        r"""The :class:`Propagation` of :math:`\hat L` for a :meth:`normalize`
        result (returned as is if it is one already). ``fast``: its CSR form,
        without the entries of weight exactly 0 (the diagonal of :math:`\hat
        L = 2L/\lambda_{max} - I`: they add exactly 0), for a graph used at
        every step."""
        if isinstance(graph, Propagation):
            return graph
        ei, norm = graph
        if fast:
            keep = norm != 0
            ei, norm = ei[:, keep], norm[keep]
        return Propagation(ei, norm, n if n is not None else 0, fast)

    def weights(self) -> tuple:
        """The cell's parameters stacked for :meth:`project` and
        :meth:`step_projected`: build once per forward (after each optimizer
        step; autograd flows to the cell's parameters)."""
        raise NotImplementedError

    def project(self, basis: Tensor, w: tuple) -> Tensor:
        """``[n, G out]``: every gate's input side (with all its biases) for
        ``basis`` rows ``[n, K', F]``, one matrix product."""
        return _affine(basis.flatten(1), w[0], w[1])

    def step_projected(self, proj: Tensor, graph: tuple, states: tuple, w: tuple) -> tuple:
        """One step from its rows of :meth:`project`: ``graph`` =
        :meth:`normalize` of the step's graph, ``states`` the carried ``[n,
        out]`` tensors; returns ``(y, states)``."""
        raise NotImplementedError

    def step(self, basis: Tensor, graph: tuple, states: tuple) -> tuple:
        """One step on a batch graph: ``basis`` ``[n, K, F]`` (gathered rows of
        :attr:`basis`), ``graph`` = :meth:`normalize` of the batch graph,
        ``states`` the carried ``[n, out]`` tensors; returns ``(y, states)``."""
        w = self.weights()
        return self.step_projected(self.project(basis, w), graph, states, w)


class GConvGRUReuse(ChebReuse):
    r"""PyGT's ``GConvGRU``: the hidden basis of :math:`H` once per step for
    :math:`Z` and :math:`R` (projected for both at once), the candidate's of
    :math:`H \odot R`."""

    input_conv, hidden_conv = "conv_x_z", "conv_h_z"
    input_convs = ("conv_x_z", "conv_x_r", "conv_x_h")

    def weights(self) -> tuple:
        c = self.cell
        w_in = cheb_weight([c.conv_x_z, c.conv_x_r, c.conv_x_h])
        b_in = _bias(c.conv_x_z.bias, c.conv_h_z.bias), _bias(c.conv_x_r.bias, c.conv_h_r.bias), _bias(c.conv_x_h.bias, c.conv_h_h.bias)
        b = None if any(v is None for v in b_in) else torch.cat(b_in)
        return w_in, b, cheb_weights([c.conv_h_z, c.conv_h_r]), cheb_weights([c.conv_h_h])

    def step_projected(self, proj: Tensor, graph: tuple, states: tuple, w: tuple) -> tuple:
        (H,) = states
        o = H.shape[1]
        prop = self.operators(graph)
        Z, R = torch.sigmoid(accumulate(proj[:, :2 * o], cheb_basis(H, prop, self.K), w[2])).split(o, 1)
        H_tilde = torch.tanh(accumulate(proj[:, 2 * o:], cheb_basis(H * R, prop, self.K), w[3]))
        H = H_tilde + Z * (H - H_tilde)  # = Z H + (1 - Z) H~
        return H, (H,)


class GConvLSTMReuse(ChebReuse):
    """PyGT's ``GConvLSTM``: one hidden basis of :math:`H` per step for all
    four gates, projected by one product (eight Chebyshev convolutions become
    one basis and two products, the input one batched over steps)."""

    input_conv, hidden_conv = "conv_x_i", "conv_h_i"
    input_convs = ("conv_x_i", "conv_x_f", "conv_x_c", "conv_x_o")
    num_states = 2

    def weights(self) -> tuple:
        c = self.cell
        b = [_bias(getattr(c, f"conv_x_{g}").bias, getattr(c, f"conv_h_{g}").bias, getattr(c, f"b_{g}")) for g in "ifco"]
        w_h = cheb_weights([getattr(c, f"conv_h_{g}") for g in "ifco"])
        return cheb_weight([getattr(c, n) for n in self.input_convs]), torch.cat(b), w_h

    def step_projected(self, proj: Tensor, graph: tuple, states: tuple, w: tuple) -> tuple:
        c = self.cell
        H, C = states
        pi, pf, pc, po = accumulate(proj, cheb_basis(H, self.operators(graph), self.K), w[2]).chunk(4, 1)
        I = torch.sigmoid(pi + c.w_c_i * C)
        F = torch.sigmoid(pf + c.w_c_f * C)
        T = torch.tanh(pc)
        C = F * C + I * T
        O = torch.sigmoid(po + c.w_c_o * C)
        H = O * torch.tanh(C)
        return H, (H, C)


class GCLSTMReuse(ChebReuse):
    """PyGT's ``GCLSTM``: its input side is a plain projection (no graph
    operation to share; :attr:`basis` is a view of ``x``), its four gates
    convolve :math:`H` with one Chebyshev basis computed once per step."""

    hidden_conv = "conv_i"
    num_states = 2
    #: the input basis is ``x`` itself (no graph operation): :func:`static_basis` keeps it a view
    graph_free_input = True

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = len(cell.conv_i.lins)
        self.basis = self.input_basis(x, edge_index, edge_weight)

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None, grad: bool = False) -> Tensor:
        """``[n, 1, F]``: ``x`` itself."""
        return x.unsqueeze(1)

    def weights(self) -> tuple:
        c = self.cell
        w_in = torch.cat([c.W_i, c.W_f, c.W_c, c.W_o], 1)
        b = torch.cat([_bias(getattr(c, f"b_{g}"), getattr(c, f"conv_{g}").bias) for g in "ifco"])
        return w_in, b, cheb_weights([c.conv_i, c.conv_f, c.conv_c, c.conv_o])

    def step_projected(self, proj: Tensor, graph: tuple, states: tuple, w: tuple) -> tuple:
        H, C = states
        pi, pf, pc, po = accumulate(proj, cheb_basis(H, self.operators(graph), self.K), w[2]).chunk(4, 1)
        I, F, O = torch.sigmoid(pi), torch.sigmoid(pf), torch.sigmoid(po)
        C = F * C + I * torch.tanh(pc)
        H = O * torch.tanh(C)
        return H, (H, C)


class TGCNReuse:
    r"""PyGT's ``TGCN`` (``cached=False``): its three GCN convolutions read only
    :math:`X`, so :math:`\hat A X` of every snapshot is computed once, and
    each gate's input side :math:`\text{lin}_g([\text{conv}_g(X), \cdot])`
    is the product :math:`\hat A X\, W_g^\top L_{g,x}^\top` (the two weights
    multiplied once per forward); per step only :math:`H L_{g,h}^\top`
    runs (:math:`Z, R` in one product). No graph operation runs in the step."""

    num_states = 1

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        #: ``[N_all, 1, F]``: :math:`\hat A_t X_t` of every snapshot
        self.basis = self.input_basis(x, edge_index, edge_weight)

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None, grad: bool = False) -> Tensor:
        r"""``[n, 1, F]``: :math:`\hat A x` on one graph (GCN's normalization; ``loops``: host positions of
        the self-loops of ``edge_index`` if known, :func:`~pyg_dynscale.nn.graph_norm.gcn_norm`; ``grad``:
        keep the autograd graph of ``x``)."""
        ei, w = gcn_norm(self.cell.conv_z, edge_index, x.shape[0], edge_weight, x.dtype, loops)
        with _grad(grad):
            return spread(ei, w, x).unsqueeze(1)

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> None:
        """No graph operation runs inside the step."""
        return None

    @staticmethod
    def operators(graph: None, n: Optional[int] = None, fast: bool = False) -> None:
        return None

    def weights(self) -> tuple:
        c = self.cell
        o = c.out_channels
        w_in, b_in, w_h = [], [], []
        for conv, lin in ((c.conv_z, c.linear_z), (c.conv_r, c.linear_r), (c.conv_h, c.linear_h)):
            lx = lin.weight[:, :o].t()
            w_in.append(conv.lin.weight.t() @ lx)
            b_in.append(_bias(None if conv.bias is None else conv.bias @ lx, lin.bias))
            w_h.append(lin.weight[:, o:].t())
        b = None if any(v is None for v in b_in) else torch.cat(b_in)
        return torch.cat(w_in, 1), b, torch.cat(w_h[:2], 1), w_h[2]

    project = ChebReuse.project

    def step_projected(self, proj: Tensor, graph: None, states: tuple, w: tuple) -> tuple:
        (H,) = states
        o = H.shape[1]
        Z, R = torch.sigmoid(torch.addmm(proj[:, :2 * o], H, w[2])).split(o, 1)
        H_tilde = torch.tanh(torch.addmm(proj[:, 2 * o:], H * R, w[3]))
        H = H_tilde + Z * (H - H_tilde)  # = Z H + (1 - Z) H~
        return H, (H,)

    step = ChebReuse.step


class DCRNNReuse:
    r"""PyGT's ``DCRNN``: each gate diffuses :math:`[X, H]` forwards
    (:math:`P_o`, out-degree normalized) and backwards (:math:`P_i`) ``K - 1``
    times. Diffusion is linear per column, so the basis of :math:`[X, H]` is
    that of :math:`X` next to that of :math:`H`: the :math:`X` part of every
    snapshot is computed once (and projected for the three gates in one
    product), the :math:`H` part once per step for the update and reset gates
    (one product), and :math:`P_o, P_i` are built sparsely once per graph
    instead of PyGT's dense ``N x N`` adjacency per gate and step.

    It follows ``DConv`` literally, including its pairing of the in-degree
    normalizers (listed in input edge order, indexed by source) with the
    reverse edges in sorted order, and its recurrence
    :math:`T_k = 2 P T_{k-1} - T_0`. It applies only where every snapshot's
    edges are distinct with non-zero weights (elsewhere ``DConv`` itself fails
    or drops edges; the cell is then called as it is)."""

    num_states = 1

    def __init__(self, cell: torch.nn.Module, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor]) -> None:
        self.cell = cell
        self.K = int(cell.conv_x_z.weight.shape[1])
        self.F = int(x.shape[1])
        #: ``[N_all, 2K, F]``: forward then backward diffusion basis of every snapshot's ``X``
        self.basis = self.input_basis(x, edge_index, edge_weight)

    def input_basis(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor],
                    loops: Optional[Tensor] = None, grad: bool = False) -> Tensor:
        """``[n, 2K, F]``: the diffusion basis of ``x`` on one graph (``grad``: keep the autograd graph of
        ``x``)."""
        with _grad(grad):
            o, i = self._basis(x, self.normalize(edge_index, x.shape[0], edge_weight, x.dtype))
            return torch.stack(o + i, 1)

    @staticmethod
    def applies(edge_index: Tensor, n: int, edge_weight: Optional[Tensor]) -> bool:
        """Every edge distinct (per snapshot: rows are global) and every weight non-zero."""
        key = edge_index[0] * n + edge_index[1]
        if int(torch.unique(key).numel()) != int(key.numel()):
            return False
        return edge_weight is None or bool((edge_weight != 0).all())

    def normalize(self, edge_index: Tensor, n: int, edge_weight: Optional[Tensor], dtype: torch.dtype,
                  loops: Optional[Tensor] = None) -> tuple:
        """``(edge_index, norm_out, reverse_edge_index, norm_in)`` as ``DConv`` computes them (no value
        is read back: ``loops`` is not needed)."""
        row, col = edge_index
        w = edge_weight.to(dtype) if edge_weight is not None else torch.ones(row.numel(), dtype=dtype, device=row.device)
        deg_out = torch.zeros(n, dtype=dtype, device=row.device).index_add_(0, row, w)
        deg_in = torch.zeros(n, dtype=dtype, device=row.device).index_add_(0, col, w)
        norm_out = torch.reciprocal(deg_out)[row]
        norm_in = torch.reciprocal(deg_in)[row]
        perm = torch.argsort(col * n + row)
        rev = torch.stack([col[perm], row[perm]])
        return edge_index, norm_out, rev, norm_in

    @staticmethod
    def operators(graph, n: Optional[int] = None, fast: bool = False):  # noqa: ANN001, ANN205
        """``(P_o, P_i)`` as :class:`Propagation` s for a :meth:`normalize`
        result (returned as is if it is that pair already); ``fast``: their
        CSR forms, for a graph used at every step."""
        if len(graph) == 2:
            return graph
        ei, n_out, rev, n_in = graph
        n = n if n is not None else 0
        return Propagation(ei, n_out, n, fast), Propagation(rev, n_in, n, fast)

    def _basis(self, y: Tensor, g: tuple) -> tuple:
        po, pi = self.operators(g)
        o, i = [y], [y]
        if self.K > 1:
            o.append(po(y))
            i.append(pi(y))
        for _ in range(2, self.K):
            o.append(2.0 * po(o[-1]) - y)
            i.append(2.0 * pi(i[-1]) - y)
        return o, i

    def weights(self) -> tuple:
        c, F, K = self.cell, self.F, self.K
        convs = (c.conv_x_z, c.conv_x_r, c.conv_x_h)
        # DConv.weight [2, K, F + out, out]: direction, order, input row; rows (d K + k) F + f match ``basis``
        w_in = torch.cat([cv.weight[:, :, :F].reshape(2 * K * F, -1) for cv in convs], 1)
        bs = [cv.bias for cv in convs]
        b = None if any(v is None for v in bs) else torch.cat(bs)

        def hidden(group: tuple) -> list:
            # per term of [H, P_o^k H (k >= 1), P_i^k H (k >= 1)]: H appears in both directions at k = 0
            ws = [torch.cat([cv.weight[d, k, F:] for cv in group], 1) for d in range(2) for k in range(K)]
            return [ws[0] + ws[K]] + ws[1:K] + ws[K + 1:]

        return w_in, b, hidden(convs[:2]), hidden(convs[2:])

    project = ChebReuse.project

    def step_projected(self, proj: Tensor, graph: tuple, states: tuple, w: tuple) -> tuple:
        (H,) = states
        o = H.shape[1]
        ho, hi = self._basis(H, graph)
        Z, R = torch.sigmoid(accumulate(proj[:, :2 * o], ho + hi[1:], w[2])).split(o, 1)
        ro, ri = self._basis(H * R, graph)
        H_tilde = torch.tanh(accumulate(proj[:, 2 * o:], ro + ri[1:], w[3]))
        H = H_tilde + Z * (H - H_tilde)  # = Z H + (1 - Z) H~
        return H, (H,)

    step = ChebReuse.step
