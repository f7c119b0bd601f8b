r"""The black-box path's step loop: a user's module called once per snapshot.

:class:`SnapshotRunner` runs a :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`
over a signal on one rank's share (the whole signal on one process), as
PyGT's own loop does::

    for t in range(T):
        y_t, states = model(x_t, edge_index_t, edge_weight_t, *states)

with the state of vertex :math:`v` at :math:`t` taken from its previous
appearance (zeros at its first), which is PyGT's loop when the vertex set is
fixed (:func:`~pyg_dynscale.nn.reference.per_snapshot_outputs`). On several
ranks each call sees the rank's local subgraph and the state rows its halo
needs, moved by the exchanges of a
:class:`~pyg_dynscale.partition.halo_plan.StatePlan`.

**Gradient checkpointing** (SC'21 §3.1): with ``checkpoint_every=B`` the
steps run in blocks of :math:`B` snapshots under
:func:`torch.utils.checkpoint.checkpoint`; a block keeps only the state rows
it hands on, and its activations are recomputed during the backward, so the
activation memory is that of one block instead of all :math:`T` snapshots
(plus the carried state rows of every step). The rows a block received from
other ranks are kept and reused by the recomputation, which therefore issues
no collective.

**Reuse** (ReInc §3.1, :mod:`~pyg_dynscale.runtime.step_reuse`): for
PyGT's ``GConvGRU``, ``GConvLSTM``, ``GCLSTM``, ``TGCN`` and ``DCRNN``
(``reuse=True``, the default) the module is not called: the runner computes
the input basis of every step once, the input projections of all steps (of
a block, under checkpointing) in one matrix product per forward, and per
step only the state-dependent part of the cell, which is what the call
computes up to float rounding. A module around one such cell (PyGT's
``RecurrentGCN``) is called, and its cell's call on the step's inputs is
answered the same way.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..data.tensor_maps import TensorMap, map_tensors, to_device
from ..errors import ModelInputError
from ..nn.snapshot_model import SnapshotModel
from ..partition.halo_plan import StatePlan, state_phase
from .step_reuse import StepReuse

__all__ = ["SnapshotRunner", "initial_states"]

Exchange = Callable[[tuple, Tensor, list, list], Tensor]


def initial_states(h0: Any, num_sequences: int, widths: tuple, name: str = "h0") -> Optional[tuple]:
    """``h0`` of a black-box module as one ``[S, W_c]`` tensor per state
    component: a tensor for a module with one state, a tuple or list (e.g.
    ``(h, c)`` for ``GConvLSTM``) for several; ``None`` stays ``None``.
    Raises :class:`ModelInputError` naming the expected shapes."""
    if h0 is None:
        return None
    parts = tuple(h0) if isinstance(h0, (tuple, list)) else (h0,)
    want = [[int(num_sequences), int(w)] for w in widths]
    got = [list(p.shape) if isinstance(p, Tensor) else type(p).__name__ for p in parts]
    if len(parts) != len(widths) or any(g != w for g, w in zip(got, want)):
        form = "a tensor" if len(widths) == 1 else f"a tuple of {len(widths)} tensors"
        raise ModelInputError(name, f"is {got} but the module carries {len(widths)} state component(s) of widths "
                              f"{list(widths)} over {num_sequences} temporal sequences.",
                              f"pass {form} of shape(s) {want} (row s: vertex signal.supergraph().sequence_vertex[s]), "
                              "or None for zeros.")
    return parts


class SnapshotRunner:
    r"""One rank's per-snapshot loop.

    Args:
        model: the :class:`SnapshotModel` (``state_widths`` set).
        signal: the :class:`~pyg_dynscale.data.DynamicGraphSignal` (host).
        plan: the :class:`StatePlan` of this rank.
        exchange: ``exchange(key, send, send_splits, recv_splits) -> recv``
            (a :class:`~pyg_dynscale.distributed.exchange.Communicator`'s);
            ``None`` on one process.
        checkpoint_every: snapshots per checkpointed block (``None``: off).
        dtype: floating dtype of features and states.
        device: where the calls run.
        edge_fields: names of edge-level signal fields passed to the module
            (LRGCN's ``edge_type``).
        reuse: ReInc's reuse where the module has an implementation
            (:mod:`~pyg_dynscale.runtime.step_reuse`; ``False``: call the
            module on every step).
        h0: one ``[S, W_c]`` tensor per state component
            (:func:`initial_states`): the state each temporal sequence of
            ``signal`` starts with (row ``s``: vertex
            ``signal.supergraph().sequence_vertex[s]``), given to every local
            node at its vertex's first appearance (owned or halo: every rank
            holds all rows, no exchange); ``None``: zeros.
    """

    def __init__(self, model: SnapshotModel, signal: Any, plan: StatePlan, exchange: Optional[Exchange] = None,
                 checkpoint_every: Optional[int] = None, dtype: torch.dtype = torch.float32,
                 device: Optional[torch.device] = None, edge_fields: tuple = (), reuse: bool = True,
                 h0: Optional[tuple] = None) -> None:
        if not isinstance(reuse, bool):
            raise ModelInputError("reuse", f"is {reuse!r}.", "pass True or False.")
        if checkpoint_every is not None:
            if isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1:
                raise ModelInputError("checkpoint_every", f"is {checkpoint_every!r}.", "give a number of snapshots >= 1, or None.")
            if model.spec.evolving:
                raise ModelInputError("checkpoint_every", f"cannot be used with {model.spec.name}: it keeps an "
                                      "evolving weight between calls, which recomputation would advance twice.",
                                      "train it without checkpointing.")
        self.model, self.plan, self.exchange = model, plan, exchange
        self.checkpoint_every = checkpoint_every
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        x = signal.x.to(dtype)
        ew = signal.edge_weight.to(dtype) if signal.edge_weight is not None else None
        fields = {k: signal.fields[k].values for k in edge_fields}
        node_ptr, edge_ptr = signal.node_ptr.tolist(), signal.edge_ptr.tolist()
        #: per step, on the host: (x, edge_index, edge_weight, edge fields, owned rows, state routes)
        self._host_inputs = []
        for s in plan.steps:
            g0, g1 = node_ptr[s.t], node_ptr[s.t + 1]
            e0, e1 = edge_ptr[s.t], edge_ptr[s.t + 1]
            xs = x[g0:g1] if s.nodes is None else x[g0:g1].index_select(0, s.nodes)
            ws = None if ew is None else (ew[e0:e1] if s.edges is None else ew[e0:e1].index_select(0, s.edges))
            fs = {k: (v[e0:e1] if s.edges is None else v[e0:e1].index_select(0, s.edges)) for k, v in fields.items()}
            self._host_inputs.append((xs, s.edge_index, ws, fs, s.owned, s.routes))
        self._host_h0 = None if h0 is None else tuple(h.detach().to("cpu", dtype) for h in h0)
        #: per step, ``(local rows, sequence ids)`` of the nodes at their vertex's first appearance (``h0``)
        self._host_first: list = []
        if h0 is not None:
            sg = signal.supergraph()
            seq_of = torch.full((sg.num_nodes,), -1, dtype=torch.long)
            seq_of[sg.sequence_order.index_select(0, sg.sequence_ptr[:-1])] = torch.arange(sg.sequence_ptr.numel() - 1)
            for s in plan.steps:
                n = node_ptr[s.t + 1] - node_ptr[s.t]
                seq = seq_of[node_ptr[s.t] + (torch.arange(n) if s.nodes is None else s.nodes)]
                pos = (seq >= 0).nonzero().flatten()
                self._host_first.append((pos, seq.index_select(0, pos)) if pos.numel() else None)
        #: the reused input side (``None``: the module is called on every step)
        self.reuse: Optional[StepReuse] = None
        if reuse:
            self.reuse = StepReuse.build(model, [(xs, ei, ws) for xs, ei, ws, *_ in self._host_inputs], dtype,
                                         tuple(edge_fields))
        self.place(to_device(self.device))
        self._recv_cache: Optional[dict] = None
        #: wall seconds of the last :meth:`outputs` spent in the module calls
        self.call_seconds = 0.0

    def place(self, fn: TensorMap) -> None:
        """(Re)build the per-step inputs and state routes on the device with
        ``fn`` (:func:`~pyg_dynscale.data.tensor_maps.to_device`): moved once,
        so the step loop never copies an index from the host."""
        self.inputs = map_tensors(self._host_inputs, fn)
        self.h0 = None if self._host_h0 is None else map_tensors(self._host_h0, fn)
        self.first = map_tensors(self._host_first, fn)
        if self.reuse is not None:
            self.reuse.place(fn)
            self.reuse.track([inp[0] for inp in self.inputs])

    # ------------------------------------------------------------------ pieces
    def _exchange(self, t: int, c: int, kind: str, send: Tensor, route: Any) -> Tensor:
        key = (t, c, kind)
        cache = self._recv_cache
        if cache is not None and key in cache:  # recomputation inside a checkpointed block: no collective
            rows, grad = cache[key]
            return rows.detach().requires_grad_(grad)  # as in the first pass, so the same tensors are saved
        if self.exchange is None:
            raise RuntimeError("a one-process StatePlan has no exchanges")
        recv = self.exchange((0, state_phase(t, c, kind), kind), send, route.send_splits[kind], route.recv_splits[kind])
        if cache is not None:
            cache[key] = (recv.detach(), recv.requires_grad)
        return recv

    def _step(self, i: int, history: Callable[[int, int], Tensor], proj: Optional[Tensor] = None,
              weights: tuple = ()) -> tuple[Tensor, tuple]:
        """Step ``i``; ``proj``, ``weights``: its rows of the reused input side and
        the stacked weights (``reuse``)."""
        s = self.plan.steps[i]
        x, ei, ew, fs, owned, routes = self.inputs[i]
        states = []
        for c, route in enumerate(routes):
            self_dst, recv_dst = route.self_dst, route.recv_dst
            w = self.model.state_widths[c]
            like = x.new_zeros(0, w)
            rows = route.gather(lambda t, c=c: history(t, c), like)
            if route.identity:
                states.append(rows)
                continue
            srcs, dsts = [rows[:route.num_self]], [self_dst]
            off = route.num_self
            for kind in route.active:
                n_send = sum(route.send_splits[kind])
                srcs.append(self._exchange(s.t, c, kind, rows[off:off + n_send], route).to(x.dtype))
                dsts.append(recv_dst[kind])
                off += n_send
            src = torch.cat(srcs, 0) if len(srcs) > 1 else srcs[0]
            dst = torch.cat(dsts, 0) if len(dsts) > 1 else dsts[0]
            states.append(x.new_zeros(s.num_local, w).index_copy(0, dst, src))
        if self.h0 is not None and self.first[i] is not None:  # first appearances: h0 instead of zeros
            pos, seq = self.first[i]
            states = [st.index_copy(0, pos, h.index_select(0, seq).to(st.dtype)) for st, h in zip(states, self.h0)]
        if s.num_local == 0 and not self.model.spec.evolving:  # nothing to compute here
            y = x.new_zeros((0,) + tuple(self.model.output_shape))
            return y, tuple(x.new_zeros(0, w) for w in self.model.state_widths)
        if proj is not None and self.reuse.inner is None:
            y, new = self.reuse.step(i, proj, tuple(states), weights)
        elif proj is not None:  # the module runs; its cell's calls on this step's inputs are answered by the reuse
            with self.reuse.inside(i, x, ei, ew, proj, weights):
                y, new = self.model.step(x, ei, ew, tuple(states), fs)
        else:
            y, new = self.model.step(x, ei, ew, tuple(states), fs)
        if owned is not None:
            y = y.index_select(0, owned)
            new = tuple(h.index_select(0, owned) for h in new)
        return y, tuple(new)

    # ------------------------------------------------------------------ forward
    def outputs(self) -> Tensor:
        """``[|Q|, ...]`` outputs ``y`` of this rank's owned vertex-time nodes,
        in gid order (``plan.owned_gids``)."""
        T = len(self.plan.steps)
        C = len(self.model.state_widths)
        kept: list[list[Tensor]] = [[None] * T for _ in range(C)]  # type: ignore[list-item]
        ys: list[Tensor] = []
        B = self.checkpoint_every
        use_ckpt = B is not None and torch.is_grad_enabled()
        self._recv_cache = {} if use_ckpt else None
        w = self.reuse.weights() if self.reuse is not None else ()
        if not use_ckpt:
            projs = self.reuse.project(0, T, w) if self.reuse is not None else (None,) * T
            for i in range(T):
                y, new = self._step(i, lambda t, c: kept[c][t], projs[i], w)
                ys.append(y)
                for c in range(C):
                    kept[c][i] = new[c]
        else:
            for a in range(0, T, B):
                b = min(a + B, T)
                outs = checkpoint(self._block, a, b, kept, w, use_reentrant=False, preserve_rng_state=True)
                for i in range(a, b):
                    k = (i - a) * (C + 1)
                    ys.append(outs[k])
                    for c in range(C):
                        kept[c][i] = outs[k + 1 + c]
        if not ys:
            return torch.zeros((0,) + tuple(self.model.output_shape), dtype=self.dtype, device=self.device)
        return torch.cat(ys, 0) if len(ys) > 1 else ys[0]

    def _block(self, a: int, b: int, kept: list, w: tuple) -> tuple:
        """Steps ``a..b-1``; earlier steps' states are read from ``kept``
        (finished blocks), this block's from its own list (so that the
        recomputation does not depend on what the first pass stored). With
        reuse the block's input projections are computed (and recomputed)
        inside it: the activations kept are one block's."""
        own: dict = {}
        projs = self.reuse.project(a, b, w) if self.reuse is not None else (None,) * (b - a)

        def history(t: int, c: int) -> Tensor:
            return own[(t, c)] if t >= a else kept[c][t]

        flat = []
        for i in range(a, b):
            y, new = self._step(i, history, projs[i - a], w)
            flat.append(y)
            for c, h in enumerate(new):
                own[(i, c)] = h
                flat.append(h)
        return tuple(flat)
