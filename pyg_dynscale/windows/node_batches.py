r"""Node mini-batches for :class:`~pyg_dynscale.windows.WindowTrainer`
(``node_batch_size``): each batch step computes the loss of a subset
:math:`S` of the vertices, on the part of every snapshot that the loss of
:math:`S` depends on, instead of on whole snapshots.

**Node batches.** The vertices :math:`0 \ldots V-1` are cut into batches of
``node_batch_size`` :math:`M` vertex ids in id order (``shuffle=True``: a
permutation drawn once per epoch from the generator that shuffles the
windows, after it; each batch is then sorted). The target rows of a window
that count for node batch :math:`S` are the rows of its target snapshot(s)
whose vertex is in :math:`S`.

**Receptive field.** A module with :class:`~pyg_dynscale.partition.halo_plan.HaloDepth`
``x`` :math:`= h_x` and ``state`` :math:`= (d_1, \ldots, d_C)` computes the
outputs of vertex :math:`v` at window step :math:`j` (``y`` and the new
state) from the features within :math:`h_x` hops of :math:`v` in
:math:`G_j` and state component :math:`c` of step :math:`j-1` within
:math:`d_c` hops (undirected hops; :math:`h = \max(h_x, d_c)`). Walking the
window backwards from the outputs that are compared with targets:

.. math::
    C_{L-1} = \emptyset, \qquad
    R_j = (C_j \cap V_j) \cup (S \cap V_j \text{ if } j \ge L - H), \qquad
    C_{j-1} = \mathcal{B}_{d}(R_j, G_j) \cup (C_j \setminus V_j),

with :math:`d = \max_c d_c` (no state: :math:`C_{j-1} = \emptyset`),
:math:`\mathcal{B}_r(R, G)` the vertices within :math:`r` hops of
:math:`R` in :math:`G`, :math:`V_j` the vertices of step :math:`j`'s
snapshot and :math:`C_j` the vertices whose carried state after step
:math:`j` must be exact (a vertex absent at step :math:`j` keeps the state of
its previous appearance, so it passes through). On a fixed vertex set and a
static graph this is :math:`R_j = \mathcal{B}_{(L-1-j)d}(S)`: the
neighbourhood grows backwards in time by :math:`d` hops per step, not only
at the last step. Step :math:`j` runs the module on the vertices within
:math:`h + 1` hops of :math:`R_j` and every edge of :math:`G_j` with an
endpoint within :math:`h` hops: each vertex that can reach an exact output
then has all its edges, so every degree a cell computes (GCN, Chebyshev,
diffusion normalizations) is the snapshot's own. The rows of :math:`R_j` are
exact; the others are computed and dropped. Carried states are compact: only
the rows of :math:`C_j` are kept between steps (zeros where a row outside
:math:`C_{j-1}` enters a step, and at the window's first step). With reuse
(the input basis of every snapshot held, ``cache_bytes=None``) a step
gathers its rows of that basis, computed on whole snapshots. PyGT's
``DConv`` (``DCRNN``) pairs normalizers with edges by position, a per-edge
rule only where every snapshot's edges are symmetric, distinct and grouped by
source (checked; refused elsewhere).

**Sampled neighbourhoods** (``num_neighbors=[k_1, ..., k_m]``, approximate).
Step :math:`j` instead runs on a subgraph drawn by PyG's
:class:`torch_geometric.sampler.NeighborSampler` (the sampler of
``NeighborLoader``, needs ``pyg-lib`` or ``torch-sparse``) from the seeds
:math:`R_j`: up to :math:`k_i` in-edges of each vertex reached at hop
:math:`i` (``-1``: all), only the sampled edges. The vertices within
:math:`d` hops of the seeds in that subgraph are the rows needed from step
:math:`j-1` (:math:`C_{j-1}`, plus the vertices passing through), so this is
neighbour sampling on the window's vertex-time graph whose temporal edges
(a vertex's own previous state) are always kept. It is seeded: each draw
seeds the sampler's generator (pyg-lib: torch's, torch-sparse: the C
library's ``rand``, through ``srand``) with a number from a generator seeded
by ``seed`` and the epoch (evaluation: by ``seed``), so a run repeats
exactly. Nothing is exact here; the module is called as it is (no reuse).

**Steps and loss.** One optimizer step per pair (node batch :math:`S`,
global batch :math:`\mathcal{B}`), with the loss

.. math::
    \mathcal{L}_{\mathcal{B}, S} = \frac{1}{|\mathcal{B}'_S|}
    \sum_{w \in \mathcal{B}'_S} \frac{1}{|T_{w,S}|} \sum_{r \in T_{w,S}}
    \ell(\hat Y_r, Y_r)

(:math:`T_{w,S}`: window :math:`w`'s target rows whose vertex is in
:math:`S`, over its horizon steps; :math:`\mathcal{B}'_S`: the windows where
it is not empty; a pair with no target row is skipped). With one node batch
covering every vertex this is the full batch loss :math:`\mathcal{L}_\mathcal{B}`,
and an epoch is the full epoch. Order (ReInc §3.4.3): ``"seq-first"``
(ReInc's: for each node batch, every global batch of the epoch, then the
next node batch) or ``"node-first"`` (the traditional order: for each global
batch, every node batch).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch import Tensor

from .._optional import PYGT_INSTALL_HINT
from ..errors import MissingDependencyError, ModelInputError, UnsupportedModelError, UnsupportedOptionError
from ..nn.graph_norm import self_loops
from ..nn.snapshot_model import infer_spec
from ..partition.halo_plan import HaloDepth, hop_distance
from ..runtime.losses import row_losses
from .batching import block_batch_parts
from .window_loss import aligned, check_widths, window_mean

__all__ = ["NodeBatches", "StepPlan", "plan_steps", "NeighbourSampling", "ORDERS"]

#: the orders of node batches and global batches (ReInc §3.4.3)
ORDERS = ("seq-first", "node-first")
_LONG = torch.long


@dataclass
class StepPlan:
    r"""What window step :math:`j` computes for one node batch, in the rows of
    the step's union graph (the batch's windows side by side).

    Attributes:
        need: ``[n]`` bool, the rows that must be exact (:math:`R_j`;
            sampled: the seeds).
        nodes: ``[n_loc]`` rows the module runs on (empty: the step is skipped).
        edge_index: ``[2, e_loc]`` its edges in local ids (positions in ``nodes``).
        edges: ``[e_loc]`` their positions in the union's edge list.
        carried_before: sorted vertex keys of the carried state entering the
            step (:math:`C_{j-1}`).
        carried_after: sorted vertex keys of the carried state leaving it
            (:math:`C_j`).
        out: local rows whose outputs are predictions (steps
            :math:`j \ge L-H`), in union-row order.
        state_in: ``[n_loc]`` row of ``cat(carried_before, zero row)`` each
            local node starts from.
        carry_out: ``[|C_j|]`` row of ``cat(new states, carried_before, zero
            row)``.
    """

    need: Tensor
    nodes: Tensor
    edge_index: Tensor
    edges: Tensor
    carried_before: Tensor
    carried_after: Tensor
    out: Tensor
    state_in: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=_LONG))
    carry_out: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=_LONG))

    @property
    def skip(self) -> bool:
        return self.nodes.numel() == 0


def _lookup(keys: Tensor, queries: Tensor) -> tuple:
    """Positions of ``queries`` in the sorted ``keys`` and whether they are there."""
    if keys.numel() == 0:
        return torch.zeros_like(queries), torch.zeros_like(queries, dtype=torch.bool)
    idx = torch.searchsorted(keys, queries).clamp_(max=keys.numel() - 1)
    return idx, keys[idx] == queries


Sampler = Callable[[Tensor, int, Tensor, int], tuple]


def plan_steps(graphs: Sequence[tuple], keys: Sequence[Tensor], targets: Tensor, depth: HaloDepth,
               horizon: int = 1, sampler: Optional[Sampler] = None) -> list:
    r"""The :class:`StepPlan` of every window step (module docstring: the
    recursion for :math:`R_j` and :math:`C_j`).

    Args:
        graphs: per step :math:`j`, ``(edge_index [2, E_j], n_j)`` (CPU).
        keys: per step, ``[n_j]`` vertex key of every row (window-qualified:
            ``window * V + vertex id``).
        targets: sorted keys of the target vertices (:math:`S` in every window).
        depth: the module's :class:`HaloDepth` (not global).
        horizon: :math:`H`; the outputs of steps :math:`L-H \ldots L-1` are
            predictions.
        sampler: ``sampler(edge_index, n, seeds, j) -> (nodes, local
            edge_index, edge positions)`` draws the sampled subgraph of step
            ``j`` (``None``: full neighbourhoods).
    """
    L = len(graphs)
    h = depth.hops
    if h is None:
        raise UnsupportedModelError("node batches need a module whose inputs reach a finite number of hops.")
    d = max(depth.state) if depth.state else None
    carried = torch.zeros(0, dtype=_LONG)
    plans: list = [None] * L
    for j in range(L - 1, -1, -1):
        ei, n = graphs[j]
        key = keys[j]
        present = torch.isin(carried, key)
        need = torch.isin(key, carried)
        if j >= L - horizon:
            need |= torch.isin(key, targets)
        empty = torch.zeros(0, dtype=_LONG)
        if not bool(need.any()):
            plans[j] = StepPlan(need, empty, empty.view(2, 0), empty, carried, carried, empty)
            continue
        if sampler is None:
            dist = hop_distance(ei, n, need.unsqueeze(0), h + 1)[0]
            nodes = (dist <= h + 1).nonzero().flatten()
            edges = ((dist[ei[0]] <= h) | (dist[ei[1]] <= h)).nonzero().flatten()
            pos = torch.full((n,), -1, dtype=_LONG)
            pos[nodes] = torch.arange(nodes.numel())
            local = pos[ei[:, edges]]
            state_rows = nodes[dist[nodes] <= d] if d is not None else empty
        else:
            seeds = need.nonzero().flatten()
            nodes, local, edges = sampler(ei, n, seeds, j)
            if d is not None:
                is_seed = torch.zeros(1, nodes.numel(), dtype=torch.bool)
                is_seed[0, :seeds.numel()] = True
                state_rows = nodes[hop_distance(local, nodes.numel(), is_seed, d)[0] <= d]
            else:
                state_rows = empty
        before = carried[~present]                       # absent at step j: the state passes through
        if d is not None and j > 0:
            before = torch.unique(torch.cat([before, key[state_rows]]))
        elif j == 0:
            before = empty                               # the window starts from zeros
        nk = key[nodes]
        tgt = torch.isin(nk, targets) if j >= L - horizon else torch.zeros(nodes.numel(), dtype=torch.bool)
        out = tgt.nonzero().flatten()
        out = out[torch.argsort(nodes[out])]
        plans[j] = StepPlan(need, nodes, local, edges, before, carried, out)
        carried = before
    for j, p in enumerate(plans):
        if p.skip:
            continue
        nk = keys[j][p.nodes]
        idx, found = _lookup(p.carried_before, nk)
        p.state_in = torch.where(found, idx, torch.full_like(idx, p.carried_before.numel()))
        order = torch.argsort(nk)
        li, lf = _lookup(nk[order], p.carried_after)
        li = order[li] if order.numel() else li
        bi, bf = _lookup(p.carried_before, p.carried_after)
        # neither computed nor carried: a vertex first seen after step 0 (its state is zeros)
        zero = p.nodes.numel() + p.carried_before.numel()
        p.carry_out = torch.where(lf, li, torch.where(bf, bi + p.nodes.numel(), torch.full_like(bi, zero)))
    return plans


@contextlib.contextmanager
def _seeded(value: int) -> Iterator[None]:
    """Seed PyG's sampling backend: torch's CPU generator (pyg-lib) inside
    ``fork_rng`` (the caller's stream is restored) and libc's ``rand``
    (torch-sparse)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(value)
        _srand(value)
        yield


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    name = ctypes.util.find_library("c")   # runs ldconfig: once per process
    return ctypes.CDLL(name) if name else None


def _srand(value: int) -> None:
    libc = _libc()
    if libc is not None:
        libc.srand(ctypes.c_uint(value % (2 ** 32)))


class NeighbourSampling:
    r"""PyG's :class:`~torch_geometric.sampler.NeighborSampler` on one graph at
    a time (the CSC conversion is kept while the graph's key repeats).

    Args:
        num_neighbors: in-edges drawn per vertex at each hop (``-1``: all).
    """

    def __init__(self, num_neighbors: Sequence[int]) -> None:
        import torch_geometric.typing as tgt

        if not (tgt.WITH_PYG_LIB or tgt.WITH_TORCH_SPARSE):
            raise MissingDependencyError("pyg-lib or torch-sparse", "Sampled node batches (num_neighbors)",
                                         PYGT_INSTALL_HINT)
        self.num_neighbors = [int(k) for k in num_neighbors]
        self._key: Any = None
        self._sampler: Any = None

    def sampler(self, edge_index: Tensor, n: int, key: Any = None) -> Any:
        from torch_geometric.data import Data
        from torch_geometric.sampler import NeighborSampler

        if key is None or key != self._key:
            with warnings.catch_warnings():   # PyG advises pyg-lib over torch-sparse
                warnings.simplefilter("ignore")
                self._sampler = NeighborSampler(Data(edge_index=edge_index, num_nodes=n), self.num_neighbors)
            self._key = key
        return self._sampler

    def __call__(self, edge_index: Tensor, n: int, seeds: Tensor, seed: int, key: Any = None) -> tuple:
        """``(nodes, local edge_index, edge positions)`` of the subgraph sampled
        from ``seeds`` (``nodes`` starts with ``seeds``)."""
        from torch_geometric.sampler import NodeSamplerInput

        smp = self.sampler(edge_index, n, key)
        with _seeded(seed):
            out = smp.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        edges = out.edge if smp.perm is None else smp.perm[out.edge]
        return out.node.to(_LONG), torch.stack([out.row, out.col]).to(_LONG), edges.to(_LONG)


def _dconv_local(signal: Any) -> bool:
    """Whether PyGT's ``DConv`` (``DCRNN``) is local on every snapshot and its
    subgraphs: it pairs the in-degree normalizer of input edge ``i``'s source
    with the ``i``-th reverse edge in sorted order, so each reverse edge gets
    its own source's normalizer only where the sources are grouped in
    increasing order and the edges are symmetric and distinct (a node-batch
    subgraph keeps that; its boundary vertices keep an in-edge, so no
    normalizer is infinite)."""
    ei = signal.edge_index.cpu()
    if ei.numel() == 0:
        return True
    off = torch.repeat_interleave(signal.node_ptr[:-1].cpu(), signal.edges_per_snapshot.cpu(), output_size=ei.shape[1])
    row, col = ei[0] + off, ei[1] + off
    N = int(signal.node_ptr[-1])
    by_source, by_target = torch.sort(row * N + col).values, torch.sort(col * N + row).values
    return (bool((row[1:] >= row[:-1]).all()) and bool((by_source[1:] > by_source[:-1]).all())
            and torch.equal(by_source, by_target))


def _ranges(starts: Tensor, counts: Tensor) -> Tensor:
    """``cat(arange(s, s + c) for s, c)``."""
    total = int(counts.sum())
    off = torch.cumsum(counts, 0) - counts
    return torch.repeat_interleave(starts - off, counts, output_size=total) + torch.arange(total)


class NodeBatches:
    r"""Node mini-batches of a :class:`~pyg_dynscale.windows.WindowTrainer`
    (module docstring). Built by the trainer when ``node_batch_size`` is
    given; it reads the trainer's data, model, head and optimizer.

    Args:
        trainer: the :class:`~pyg_dynscale.windows.WindowTrainer`.
        node_batch_size: vertices per node batch :math:`M \ge 1` (more than
            :math:`V`: one batch).
        num_neighbors: ``None`` (full neighbourhoods, exact) or in-edges to
            sample per hop (approximate).
        order: ``"seq-first"`` or ``"node-first"``.
        declared: the trainer's model is the user's own
            :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`, whose
            depth is used as declared; otherwise (the trainer wrapped the
            module with a whole-snapshot depth) the depth is inferred as
            ``SnapshotModel(module)`` infers it (PyGT presets, or the sum over
            the cells and message-passing layers the module contains).
    """

    def __init__(self, trainer: Any, node_batch_size: int, num_neighbors: Optional[Sequence[int]] = None,
                 order: str = "seq-first", declared: bool = False) -> None:
        check_node_batch_args(node_batch_size, num_neighbors, order)
        if trainer.sequence_model:
            raise ModelInputError("node_batch_size", "is given for PyGT's BatchedDCRNN, which takes whole "
                                  "[B, L, N, F] windows.", "use its per-snapshot sibling DCRNN, or node_batch_size=None.")
        spec = trainer.model.spec
        depth = spec.depth
        if not declared:
            try:
                depth = infer_spec(trainer.model.module, "auto").depth
            except ModelInputError as exc:
                raise ModelInputError(
                    "node_batch_size", f"needs the hops {spec.name}'s inputs reach, which cannot be inferred "
                    f"({exc.problem})", "pass the module as SnapshotModel(module, depth=<hops per step>), or "
                    "node_batch_size=None.") from exc
        if depth.is_global or depth.full_nodes:
            raise UnsupportedModelError(
                f"node_batch_size: {spec.name} reads the whole snapshot (depth {depth.describe()}), so a node "
                "batch needs every vertex. Declare how many hops its inputs reach (SnapshotModel(module, depth=k)), "
                "or use node_batch_size=None.")
        if any(type(m).__name__ == "DConv" for m in trainer.model.module.modules()) and not _dconv_local(
                trainer.view.signal):
            raise UnsupportedModelError(
                "node_batch_size: PyGT's DConv (DCRNN) pairs its in-degree normalizers, listed in edge order, with "
                "its reverse edges, listed sorted, by position; a subgraph pairs them as the snapshot does only "
                "where every snapshot's edges are symmetric, distinct and grouped by source in increasing order. "
                "Order the signal's edges so, or use node_batch_size=None.")
        if getattr(trainer, "decoder", None) is not None:
            raise UnsupportedOptionError(
                "node_batch_size", "is given with a decoder: the decoder's steps past the window would need their "
                "own receptive fields.", "decoder=None, or node_batch_size=None (whole snapshots).")
        self.trainer = trainer
        self.size = int(node_batch_size)
        self.order = order
        #: the module's receptive field per step
        self.depth = depth
        sig = trainer.view.signal
        self._ei = sig.edge_index.cpu()
        self._nptr, self._eptr = sig.node_ptr.cpu(), sig.edge_ptr.cpu()
        self._node_id = sig.node_id.cpu()
        self._V = int(sig.num_vertices)
        self.sampling = None if num_neighbors is None else NeighbourSampling(num_neighbors)
        #: the group the ranks' host counts are summed over (a gloo twin of an NCCL group): given by the trainer
        #: after its set-up agreement (made on every rank at the same point: a group is made collectively)
        self.host_group: Any = None
        #: the last epoch's plan: ``{"pairs": (node batch, global batch) pairs, "steps": optimizer steps}``
        self.last_plan: dict = {"pairs": 0, "steps": 0}
        self._plans: dict = {}
        self._seeds: Optional[torch.Generator] = None

    # ------------------------------------------------------------------ batches of vertices
    def node_batches(self, generator: Optional[torch.Generator] = None) -> list:
        """``[M]`` sorted vertex ids of each node batch (``generator``: permute first)."""
        V = self._V
        order = torch.randperm(V, generator=generator) if generator is not None else torch.arange(V)
        return [s.sort().values for s in torch.split(order, self.size)]

    # ------------------------------------------------------------------ graphs and plans
    def _union(self, ts: list) -> tuple:
        """``(edge_index, n, keys, node offsets, edge offsets)`` of the union of
        snapshots ``ts`` (CPU; storage positions, see :meth:`_held`)."""
        t = torch.tensor(ts, dtype=_LONG)
        nc = self._nptr[t + 1] - self._nptr[t]
        ec = self._eptr[t + 1] - self._eptr[t]
        noff = torch.cumsum(nc, 0) - nc
        eoff = torch.cumsum(ec, 0) - ec
        rows = _ranges(self._nptr[t], nc)
        edges = _ranges(self._eptr[t], ec)
        eb = torch.repeat_interleave(torch.arange(len(ts)), ec)
        nb = torch.repeat_interleave(torch.arange(len(ts)), nc)
        ei = self._ei[:, edges] + noff[eb]
        return ei, int(nc.sum()), nb * self._V + self._node_id[rows], noff, eoff

    def _held(self, ts: list) -> list:
        """Storage positions of global snapshots ``ts`` (``placement="blocks"``
        keeps a rank's snapshots only)."""
        return self.trainer.store.positions(ts)

    def plan(self, starts: list, S: Tensor) -> list:
        """The :class:`StepPlan` of every step for windows starting at ``starts`` and node batch ``S``."""
        tr = self.trainer
        L, H, B = tr.view.lags, tr.view.horizon, len(starts)
        static = tr.store.static and self.sampling is None
        cache_key = (B, S.numpy().tobytes()) if static else None
        if cache_key is not None and cache_key in self._plans:
            return self._plans[cache_key]
        targets = (torch.arange(B).unsqueeze(1) * self._V + S.unsqueeze(0)).flatten()
        graphs, keys = [], []
        for j in range(L):
            ei, n, key, _, _ = self._union(self._held([s + j for s in starts]))
            graphs.append((ei, n))
            keys.append(key)
        sampler = None
        if self.sampling is not None:
            draws = [int(torch.randint(2 ** 62, (1,), generator=self._seeds)) for _ in range(L)]
            smp = self.sampling
            key0 = (B,) if tr.store.static else None

            def sampler(ei: Tensor, n: int, seeds: Tensor, j: int) -> tuple:
                return smp(ei, n, seeds, draws[j], key0)
        plans = plan_steps(graphs, keys, targets, self.depth, H, sampler)
        if cache_key is not None:
            self._plans = {k: v for k, v in self._plans.items() if k[0] != B}  # one node batch per batch size
            self._plans[cache_key] = plans
        return plans

    # ------------------------------------------------------------------ forward
    def _global(self, ts: list, local: Tensor, off: Tensor, ptr: Tensor) -> Tensor:
        """Signal positions of union positions ``local`` (rows with ``_nptr``, edges with ``_eptr``)."""
        b = torch.searchsorted(off, local, right=True) - 1
        t = torch.tensor(ts, dtype=_LONG)
        return ptr[t][b] + local - off[b]

    def outputs(self, starts: list, S: Tensor) -> tuple:
        r"""Run the module over the windows ``starts`` for node batch ``S``.

        Returns:
            ``(y, rows, window)``: ``[o, ...]`` outputs of the prediction
            rows ordered (horizon step, window, row), ``[o]`` their positions
            in the full batch's output order, ``[o]`` their window.
        """
        tr = self.trainer
        L, H = tr.view.lags, tr.view.horizon
        plans = self.plan(starts, S)
        dev, dt = tr.device, tr.dtype
        # ReInc's reuse where the input basis of every snapshot is held (exact rows for any subgraph)
        use_reuse = (self.sampling is None and tr.reuse_impl is not None
                     and getattr(tr.reuse_impl, "basis", None) is not None and hasattr(tr.reuse_impl, "step"))
        # zeros before the window (rows: vertices needed later but absent from the first steps)
        c0 = int(plans[0].carried_before.numel())
        carried = tuple(torch.zeros(c0, w, device=dev, dtype=dt) for w in tr.model.state_widths)
        ys, full_rows, wins = [], [], []
        base = 0
        for j, p in enumerate(plans):
            ts = self._held([s + j for s in starts])
            if p.skip:
                if j >= L - H:
                    base += int(sum(self._nptr[t + 1] - self._nptr[t] for t in ts))
                continue
            t = torch.tensor(ts, dtype=_LONG)
            nc = self._nptr[t + 1] - self._nptr[t]
            ec = self._eptr[t + 1] - self._eptr[t]
            noff, eoff = torch.cumsum(nc, 0) - nc, torch.cumsum(ec, 0) - ec
            rows = self._global(ts, p.nodes, noff, self._nptr).to(dev)
            edges = self._global(ts, p.edges, eoff, self._eptr).to(dev)
            ei = p.edge_index.to(dev)
            ew = tr.store.edge_weight.index_select(0, edges) if tr.store.edge_weight is not None else None
            st = tuple(torch.cat([c, c.new_zeros(1, c.shape[1])]).index_select(0, p.state_in.to(dev)) for c in carried)
            if use_reuse:  # the plan's edges are host data: their self-loops are known (nothing read back)
                graph = tr.reuse_impl.normalize(ei, int(p.nodes.numel()), ew, dt, self_loops(p.edge_index))
                y, new = tr.reuse_impl.step(tr.reuse_impl.basis.index_select(0, rows), graph, st)
            else:
                ef = {k: v.index_select(0, edges) for k, v in tr.store.edge_fields.items()}
                y, new = tr.model.step(tr.store.x.index_select(0, rows), ei, ew, st, ef)
            carried = tuple(torch.cat([nw, c, c.new_zeros(1, c.shape[1])]).index_select(0, p.carry_out.to(dev))
                            for nw, c in zip(new, carried))
            if j >= L - H:
                u = p.nodes[p.out]
                ys.append(y.index_select(0, p.out.to(dev)))
                full_rows.append(u + base)
                wins.append(torch.searchsorted(noff, u, right=True) - 1)
                base += int(nc.sum())
        if not ys:
            shape = (0,) + tuple(tr.model.output_shape)
            return torch.zeros(shape, device=dev, dtype=dt), torch.zeros(0, dtype=_LONG), torch.zeros(0, dtype=_LONG)
        return torch.cat(ys), torch.cat(full_rows), torch.cat(wins)

    def _targets(self, starts: list, full_rows: Tensor) -> Tensor:
        """Signal rows of the targets of output rows at positions ``full_rows`` of the full order."""
        tr = self.trainer
        L, H = tr.view.lags, tr.view.horizon
        snaps = torch.tensor(self._held([s + L - 1 + k for k in range(H) for s in starts]), dtype=_LONG)
        nc = self._nptr[snaps + 1] - self._nptr[snaps]
        off = torch.cumsum(nc, 0) - nc
        b = torch.searchsorted(off, full_rows, right=True) - 1
        return self._nptr[snaps][b] + full_rows - off[b]

    def node_batch_loss(self, wins: Tensor, S: Tensor) -> Optional[Tensor]:
        r""":math:`\mathcal{L}_{\mathcal{B}, S}` of windows ``wins`` and node batch
        ``S`` (differentiable; ``None`` where no target row is in ``S``)."""
        means = self.window_terms(wins, S)
        return means.mean() if means.numel() else None

    def window_terms(self, wins: Tensor, S: Tensor) -> Tensor:
        r"""``[|B'_S|]`` each window's mean loss over its target rows in ``S``
        (the windows of ``wins`` that have any, in order; differentiable)."""
        tr = self.trainer
        starts = tr.view.starts.index_select(0, wins).tolist()
        y, full_rows, win = self.outputs(starts, S)
        if full_rows.numel() == 0:
            return torch.zeros(0, device=tr.device, dtype=tr.dtype)
        pred = tr.head(y) if tr.head is not None else y
        check_widths(pred, tr.store.y, tr.loss_kind)
        tgt = tr.store.y.index_select(0, self._targets(starts, full_rows).to(tr.store.y.device)).to(tr.device)
        per = row_losses(tr.loss_kind, aligned(pred, tgt, tr.loss_kind), tgt)
        counts = torch.bincount(win, minlength=len(starts))  # the windows of the rows: host data of the plan
        means, _ = window_mean(per, win.to(tr.device), counts)
        return means

    def predict(self, wins: Tensor) -> tuple:
        """What the trainer's full-batch prediction returns (``(pred, target,
        window, counts)``), assembled from the node batches in id order
        (equal to it with full neighbourhoods)."""
        tr = self.trainer
        starts = tr.view.starts.index_select(0, wins).tolist()
        parts = [self.outputs(starts, S) for S in self.node_batches()]
        L, H = tr.view.lags, tr.view.horizon
        snaps = self._held([s + L - 1 + k for k in range(H) for s in starts])
        total = sum(int(self._nptr[t + 1] - self._nptr[t]) for t in snaps)
        y0 = parts[0][0]
        y = y0.new_zeros((total,) + tuple(y0.shape[1:]))
        for yp, rows, _ in parts:
            y = y.index_copy(0, rows.to(y.device), yp)
        return tr.finish(starts, y)

    # ------------------------------------------------------------------ epochs
    def seed_stream(self, value: int) -> None:
        """Restart the stream of sampler seeds (sampled node batches)."""
        self._seeds = torch.Generator().manual_seed(value)

    def predictor(self) -> Callable[[Tensor], tuple]:
        """:meth:`predict`, with the sampler seeds of an evaluation (the same every time)."""
        self.seed_stream(self.trainer.seed * 1_000_003)
        return self.predict

    def train_epoch(self) -> float:
        """One epoch: one optimizer step per (node batch, global batch) pair in
        :attr:`order`. Returns the mean step loss; the step losses are in the
        trainer's ``batch_losses``. Under a process group each rank computes
        its blocks' windows of the pair and the trainer's
        ``DistributedDataParallel`` sums the gradients (a step as
        ``WindowTrainer``'s, with the node batch's loss)."""
        tr = self.trainer
        tr.model.train()
        if tr.head is not None:
            tr.head.train()
        e = tr.epoch
        g = torch.Generator().manual_seed(tr.seed + e) if tr.shuffle else None
        batches = block_batch_parts(tr.view.split("train"), tr.batch_size, tr.blocks, tr.shuffle, g)
        nodes = self.node_batches(g)
        self.seed_stream(tr.seed * 1_000_003 + 2 * e + 1)
        if self.order == "seq-first":
            pairs = [(S, w) for S in nodes for w in batches]
        else:
            pairs = [(S, w) for w in batches for S in nodes]
        values: list = []  # the step losses, on the device until the epoch's end
        totals = self._windows_with_rows(pairs) if tr.world_size > 1 else None
        self.last_plan = {"pairs": len(pairs), "steps": len(pairs) if totals is None else sum(1 for t in totals if t)}
        for i, (S, parts) in enumerate(pairs):
            if totals is not None:
                if totals[i]:
                    values.append(tr.distributed_step(parts, S, totals[i]))
                continue
            tr.optimizer.zero_grad()
            loss = self.node_batch_loss(torch.cat(parts), S)
            if loss is None:
                continue
            loss.backward()
            tr.optimizer.step()
            values.append(loss.detach())
        tr.batch_losses = tr.read_losses(values)
        tr.epoch += 1
        return sum(tr.batch_losses) / max(len(tr.batch_losses), 1)

    def _windows_with_rows(self, pairs: list) -> list:
        r""":math:`|\mathcal{B}'_S|` of every (node batch, global batch) pair
        of an epoch under a process group: each rank counts its blocks'
        windows with a target row in ``S`` from its host copy of the node ids
        (it holds their snapshots), and one all-reduce of host integers over
        the host group (gloo; 8 bytes per pair, counted as ``"loss"`` bytes)
        sums them for the whole epoch before its first step."""
        import torch.distributed as dist

        tr = self.trainer
        L = tr.view.lags
        counts = torch.zeros(len(pairs), dtype=torch.long)
        for i, (S, parts) in enumerate(pairs):
            n = 0
            for b in tr.my_blocks:
                for s in tr.view.starts.index_select(0, parts[b]).tolist():
                    t = self._held([s + L - 1])[0]   # horizon > 1: fixed vertex sets, every row present
                    ids = self._node_id[self._nptr[t]:self._nptr[t + 1]]
                    n += int(bool(torch.isin(ids, S).any()))
            counts[i] = n
        tr.ledger.add_tensor("loss", counts)
        dist.all_reduce(counts, group=self.host_group)
        return counts.tolist()


def check_node_batch_args(node_batch_size: Optional[int], num_neighbors: Optional[Sequence[int]],
                          order: str) -> None:
    """Typed errors for ``node_batch_size``, ``num_neighbors`` and ``node_order``."""
    if node_batch_size is None:
        if num_neighbors is not None:
            raise ModelInputError("num_neighbors", f"is {list(num_neighbors)!r} without node_batch_size.",
                                  "sampling draws the neighbourhoods of node batches: pass node_batch_size=M too.")
        return
    if isinstance(node_batch_size, bool) or not isinstance(node_batch_size, int) or node_batch_size < 1:
        raise ModelInputError("node_batch_size", f"is {node_batch_size!r}.",
                              "give the number of vertices per node batch, >= 1 (or None: whole snapshots).")
    if num_neighbors is not None:
        ok = isinstance(num_neighbors, (list, tuple)) and len(num_neighbors) > 0 and all(
            isinstance(k, int) and not isinstance(k, bool) and (k >= 1 or k == -1) for k in num_neighbors)
        if not ok:
            raise ModelInputError("num_neighbors", f"is {num_neighbors!r}.",
                                  "give a non-empty list of in-edges to sample per hop, each >= 1 or -1 (all).")
    if order not in ORDERS:
        raise ModelInputError("node_order", f"is {order!r}.", f"use one of {ORDERS}.")
