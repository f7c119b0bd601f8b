r"""Masked temporal fusion (DGC §5.1.2, Eq. 4-5): time encoders that run over
many variable-length sequences at once and give exactly the per-sequence result.

Sequences are passed as one flat tensor ``x`` ``[M, D]`` in *sequence order*
(all rows of sequence 0 in time order, then sequence 1, ...) plus
``seq_ptr`` ``[S+1]`` -- what :attr:`Supergraph.sequence_order` /
:attr:`Supergraph.sequence_ptr` give -- or a prebuilt
:class:`~pyg_dynscale.nn.packing.SequencePacking` (build it once per graph).

The recurrent encoders scan the packed rows of :func:`pack_sequences`: at a
sequence boundary the state is replaced by that sequence's initial state,

.. math::
    \tilde h_{t-1} = M_{t-1,t}\, h_{t-1} + (1 - M_{t-1,t})\, h^{(0)}_{s(t)},
    \qquad M_{t-1,t} = [\,t-1, t \text{ belong to one sequence}\,],

which is DGC Eq. 4-5 generalized to non-zero initial states (implemented as a
selection, so no gradient leaks across a boundary and ``inf * 0`` cannot occur).
Attention uses a block-diagonal (causal) mask inside each packed row.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..errors import SignalValidationError, UnsupportedOptionError
from ._fused_rnn import FusedGRUScan, FusedLSTMScan
from .packing import SequencePacking, as_packing, check_seq_ptr, pack_sequences

__all__ = [
    "SequencePacking",
    "pack_sequences",
    "masked_recurrent_scan",
    "MaskedGRU",
    "MaskedLSTM",
    "MaskedTemporalAttention",
    "RECURRENT_STRATEGIES",
    "ATTENTION_STRATEGIES",
]

SeqArg = Union[Tensor, SequencePacking]

#: ``packed_rows``: FFD-packed rows, masked state reset, batch shrinking per
#: step, input projection of all rows in one matmul, hand-written BPTT
#: (:mod:`pyg_dynscale.nn._fused_rnn`; the default, fastest in the benchmark).
#: ``padding``: zero-pad every sequence to the longest, run ``torch.nn.GRU/LSTM``.
#: ``pack_padded``: pad, then ``torch.nn.utils.rnn.pack_padded_sequence``.
#: ``packed_rows_autograd``: the same scan written with autograd ops (reference).
RECURRENT_STRATEGIES = ("packed_rows", "packed_rows_autograd", "padding", "pack_padded")
#: ``packed_rows``: block-diagonal causal mask in FFD-packed rows (default).
#: ``padding``: one padded row per sequence with a key-padding mask.
ATTENTION_STRATEGIES = ("packed_rows", "padding")


# --------------------------------------------------------------------- checks
def _check_x(x: Tensor, packing: SequencePacking, name: str = "x") -> None:
    if not isinstance(x, Tensor) or x.dim() != 2:
        raise SignalValidationError(name, f"must be a 2-D [M, D] tensor, got {getattr(x, 'shape', type(x))}.",
                                    "pass one row per element, in sequence order.")
    packing.check_rows(x, name)


def _check_state(h: Optional[Tensor], S: int, H: int, like: Tensor, name: str) -> Tensor:
    """Validate an initial state ``[S, H]`` (or build zeros)."""
    if h is None:
        return like.new_zeros(S, H)
    if not isinstance(h, Tensor):
        raise SignalValidationError(name, f"is a {type(h).__name__}.", f"pass a tensor of shape [{S}, {H}] or None.")
    if h.dim() == 3 and h.shape[0] == 1:  # accept torch.nn.GRU's [1, S, H]
        h = h[0]
    if tuple(h.shape) != (S, H):
        raise SignalValidationError(name, f"has shape {list(h.shape)}, expected [{S}, {H}] (one row per sequence).",
                                    "pass one initial state per sequence (num_sequences = len(seq_ptr) - 1), or None for zeros.")
    if h.device != like.device:
        raise SignalValidationError(name, f"is on {h.device} but the input is on {like.device}.", f"move it with .to({str(like.device)!r}).")
    if h.dtype != like.dtype:
        raise SignalValidationError(name, f"has dtype {h.dtype} but the input has {like.dtype}.", f"cast it with .to({like.dtype}).")
    return h


def _check_strategy(strategy: str, allowed: Sequence[str]) -> str:
    if strategy not in allowed:
        raise SignalValidationError("strategy", f"is {strategy!r}.", f"use one of {tuple(allowed)}.")
    return strategy


def reset_schedule(packing: SequencePacking) -> list[tuple[Tensor, Tensor]]:
    """Per step ``t >= 1``: (rows of the step that start a sequence, their sequence)."""
    cache = getattr(packing, "_reset_cache", None)
    if cache is not None:
        return cache
    steps = packing.step_ptr
    pos = packing.time_major_reset.nonzero().flatten()
    step_of = torch.searchsorted(steps, pos, right=True) - 1
    local = pos - steps[step_of]
    seqs = packing.time_major_seq[pos]
    counts = torch.bincount(step_of, minlength=packing.row_len).tolist() if pos.numel() else [0] * packing.row_len
    loc_parts = torch.split(local, counts)
    seq_parts = torch.split(seqs, counts)
    cache = [(loc_parts[t], seq_parts[t]) for t in range(packing.row_len)]
    packing._reset_cache = cache  # type: ignore[attr-defined]
    return cache


# ----------------------------------------------------------------- the scan
StateT = tuple[Tensor, ...]


def _scan(
    step: Callable[[Tensor, StateT], StateT],
    xs_tm: Tensor,
    packing: SequencePacking,
    h0: StateT,
) -> list[StateT]:
    r"""Run ``step`` over the time-major layout; returns the states after each step.

    Rows are fill-sorted, so step ``t`` works on rows ``0 .. active[t]-1`` only
    (the batch shrinks like ``pack_padded_sequence``'s) and never on padding.
    """
    active, steps = packing.active_list, packing.step_list
    resets = reset_schedule(packing)
    n_steps = next((t for t, a in enumerate(active) if a == 0), packing.row_len)
    # One split instead of a slice per step: the backward of T slices would
    # zero-fill a full-size [M, D] gradient T times; split's backward is one cat.
    sizes = [steps[t + 1] - steps[t] for t in range(n_steps)]
    tail = xs_tm.shape[0] - sum(sizes)
    pieces = xs_tm.split(sizes + ([tail] if tail else []), 0)
    outs: list[StateT] = []
    state: StateT = tuple(h.index_select(0, packing.time_major_seq[: active[0]]) for h in h0)
    for t in range(packing.row_len):
        a = active[t]
        if a == 0:
            break
        if t > 0:
            state = tuple(s[:a] for s in state)
            rows, seqs = resets[t]
            if rows.numel():
                # Eq. 4-5: at a boundary the state is the new sequence's initial state
                state = tuple(s.index_copy(0, rows, h.index_select(0, seqs)) for s, h in zip(state, h0))
        state = step(pieces[t], state)
        outs.append(state)
    return outs


def _gather_flat(outs: list[Tensor], packing: SequencePacking) -> Tensor:
    return torch.cat(outs, 0).index_select(0, packing.time_major_inv)


def _last_states(flat: Tensor, h0: Tensor, packing: SequencePacking) -> Tensor:
    """``[S, H]`` state after each sequence's last element (``h0`` for an empty one)."""
    last = packing.last_index()
    got = flat.index_select(0, last.clamp(min=0)) if flat.shape[0] else h0
    return torch.where((last >= 0).unsqueeze(-1), got, h0)


def masked_recurrent_scan(
    cell: Callable[[Tensor, Tensor], Tensor],
    x: Tensor,
    seq_ptr_or_packing: SeqArg,
    h0: Optional[Tensor] = None,
    *,
    hidden_size: Optional[int] = None,
) -> Tensor:
    r"""Apply a recurrent ``cell`` along every sequence at once (masked fusion).

    .. math::
        h_t = \mathrm{cell}(x_t, h_{t-1}), \qquad h_{\text{start}-1} = h^{(0)}_s,

    for every sequence :math:`s`, computed for all sequences together on the
    packed rows; the state is reset to the sequence's :math:`h^{(0)}_s` at each
    boundary (DGC Eq. 4-5), so the result and its gradients equal running the
    cell separately on each sequence.

    Args:
        cell: ``cell(x_t [B, D], h [B, H]) -> h_new [B, H]``, row-wise
            independent (row ``i`` of the output may depend only on row ``i``
            of the inputs), e.g. a :class:`torch.nn.GRUCell` or T-GCN's gate cell.
        x: ``[M, D]`` inputs in sequence order.
        seq_ptr_or_packing: ``[S+1]`` offsets or a :class:`SequencePacking`.
        h0: ``[S, H]`` initial state per sequence (default zeros).
        hidden_size: :math:`H` when ``h0`` is ``None`` (default ``cell.hidden_size``).

    Returns:
        ``[M, H]``: the state after each step, in sequence order.
    """
    packing = as_packing(seq_ptr_or_packing)
    _check_x(x, packing)
    if h0 is None:
        H = hidden_size if hidden_size is not None else getattr(cell, "hidden_size", None)
        if H is None:
            raise SignalValidationError("h0", "is None and the hidden size is unknown.",
                                        "pass h0 [S, H] or hidden_size=H (or give the cell a hidden_size attribute).")
    else:
        H = h0.shape[-1] if isinstance(h0, Tensor) else 0
    h0 = _check_state(h0, packing.num_sequences, int(H), x, "h0")
    if packing.num_elements == 0:
        return x.new_zeros(0, int(H))
    xs_tm = x.index_select(0, packing.time_major)
    outs = _scan(lambda xt, st: (cell(xt, st[0]),), xs_tm, packing, (h0,))
    return _gather_flat([o[0] for o in outs], packing)


# ------------------------------------------------------------- GRU / LSTM
class _MaskedRNNMixin:
    """Shared machinery of :class:`MaskedGRU` and :class:`MaskedLSTM`."""

    hidden_size: int
    input_size: int
    strategy: str

    def _params(self) -> tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor]]:
        return self.weight_ih_l0, self.weight_hh_l0, getattr(self, "bias_ih_l0", None), getattr(self, "bias_hh_l0", None)  # type: ignore[attr-defined]

    def _padded_forward(self, x: Tensor, packing: SequencePacking, h0: StateT, packed: bool) -> tuple[Tensor, StateT]:
        lengths = packing.seq_lengths.to(x.device)
        S, M = packing.num_sequences, packing.num_elements
        seq_of = torch.repeat_interleave(torch.arange(S, device=x.device), lengths, output_size=M)
        pos = torch.arange(M, device=x.device) - torch.repeat_interleave(packing.seq_ptr[:-1].to(x.device), lengths, output_size=M)
        Lmax = int(lengths.max())
        padded = x.new_zeros(S, Lmax, x.shape[1]).index_put((seq_of, pos), x)
        hx = tuple(h.unsqueeze(0) for h in h0)
        hx_arg = hx[0] if len(hx) == 1 else hx
        if not packed:
            out, hn = getattr(nn, self._torch_base).forward(self, padded, hx_arg)  # type: ignore[attr-defined]
            return out[seq_of, pos], ()
        keep = (lengths > 0).nonzero().flatten()
        ps = pack_padded_sequence(padded.index_select(0, keep), lengths.index_select(0, keep).cpu(),
                                  batch_first=True, enforce_sorted=False)
        hx_k = tuple(h.index_select(1, keep) for h in hx)
        out, _ = getattr(nn, self._torch_base).forward(self, ps, hx_k[0] if len(hx_k) == 1 else hx_k)  # type: ignore[attr-defined]
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=Lmax)
        rank = torch.full((S,), -1, dtype=torch.long, device=x.device)
        rank[keep] = torch.arange(keep.numel(), device=x.device)
        return out[rank[seq_of], pos], ()


class MaskedGRU(nn.GRU, _MaskedRNNMixin):
    r"""A single-layer GRU run over many variable-length sequences at once with
    masked temporal fusion (DGC §5.1.2); equals :class:`torch.nn.GRU` on each
    sequence separately (outputs and gradients).

    It *is* a :class:`torch.nn.GRU` (``batch_first=True``, one layer), so its
    parameters (``weight_ih_l0``, ``weight_hh_l0``, ``bias_ih_l0``,
    ``bias_hh_l0``) and ``state_dict`` are exactly those of ``torch.nn.GRU``:

    .. math::
        r &= \sigma(W_{ir} x_t + b_{ir} + W_{hr} h + b_{hr}) \\
        z &= \sigma(W_{iz} x_t + b_{iz} + W_{hz} h + b_{hz}) \\
        n &= \tanh(W_{in} x_t + b_{in} + r \odot (W_{hn} h + b_{hn})) \\
        h' &= (1 - z) \odot n + z \odot h

    The input projection :math:`W_i x + b_i` is computed for all :math:`M` rows
    in one matmul; only :math:`W_h h` runs inside the scan.

    Args:
        input_size (int): :math:`D`.
        hidden_size (int): :math:`H`.
        bias (bool): use the biases.
        strategy (str): one of :data:`RECURRENT_STRATEGIES` (same result;
            ``"packed_rows"`` is the fastest, see ``docs/temporal_fusion.md``).

    Shapes:
        input ``x`` ``[M, D]`` (sequence order), ``seq_ptr`` ``[S+1]`` or a
        :class:`SequencePacking`, ``h0`` ``[S, H]`` or ``None``;
        output ``[M, H]`` (and ``h_n`` ``[S, H]`` with ``return_state=True``).
    """

    _torch_base = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, strategy: str = "packed_rows",
                 device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, num_layers=1, bias=bias, batch_first=True, device=device, dtype=dtype)
        self.strategy = _check_strategy(strategy, RECURRENT_STRATEGIES)

    def forward(self, x: Tensor, seq_ptr: SeqArg, h0: Optional[Tensor] = None, *,  # type: ignore[override]
                return_state: bool = False, strategy: Optional[str] = None):
        strategy = _check_strategy(strategy or self.strategy, RECURRENT_STRATEGIES)
        packing = as_packing(seq_ptr)
        _check_x(x, packing)
        if x.shape[1] != self.input_size:
            raise SignalValidationError("x", f"has {x.shape[1]} features but input_size is {self.input_size}.", "match the layer's input_size.")
        h0 = _check_state(h0, packing.num_sequences, self.hidden_size, x, "h0")
        if packing.num_elements == 0:
            out = x.new_zeros(0, self.hidden_size)
        elif strategy.startswith("packed_rows"):
            out = self._packed_rows(x, packing, h0, fused=strategy == "packed_rows")
        else:
            out, _ = self._padded_forward(x, packing, (h0,), packed=strategy == "pack_padded")
        if return_state:
            return out, _last_states(out, h0, packing)
        return out

    def _packed_rows(self, x: Tensor, packing: SequencePacking, h0: Tensor, fused: bool) -> Tensor:
        w_ih, w_hh, b_ih, b_hh = self._params()
        gi = F.linear(x.index_select(0, packing.time_major), w_ih, b_ih)  # all rows at once
        if fused:
            out_tm = FusedGRUScan.apply(gi, h0, w_hh, b_hh, packing, reset_schedule(packing))
            return out_tm.index_select(0, packing.time_major_inv)
        w_hh_t = w_hh.t()

        def step(gi_t: Tensor, st: StateT) -> StateT:
            h = st[0]
            gh = h @ w_hh_t if b_hh is None else torch.addmm(b_hh, h, w_hh_t)
            i_r, i_z, i_n = gi_t.chunk(3, 1)
            h_r, h_z, h_n = gh.chunk(3, 1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            return (n + z * (h - n),)

        outs = _scan(step, gi, packing, (h0,))
        return _gather_flat([o[0] for o in outs], packing)


class MaskedLSTM(nn.LSTM, _MaskedRNNMixin):
    r"""A single-layer LSTM run over many variable-length sequences at once with
    masked temporal fusion; equals :class:`torch.nn.LSTM` on each sequence
    separately (outputs and gradients). It *is* a :class:`torch.nn.LSTM`
    (``batch_first=True``, one layer), so parameters and ``state_dict`` match.

    .. math::
        (i, f, g, o) &= (\sigma, \sigma, \tanh, \sigma)(W_i x_t + b_i + W_h h + b_h) \\
        c' &= f \odot c + i \odot g, \qquad h' = o \odot \tanh(c')

    Shapes:
        input ``x`` ``[M, D]``, ``seq_ptr`` ``[S+1]`` or a
        :class:`SequencePacking`, ``h0`` a pair ``(h0, c0)`` each ``[S, H]``
        or ``None``; output ``[M, H]`` (and ``(h_n, c_n)`` each ``[S, H]`` with
        ``return_state=True``).
    """

    _torch_base = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *, strategy: str = "packed_rows",
                 device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, num_layers=1, bias=bias, batch_first=True, device=device, dtype=dtype)
        self.strategy = _check_strategy(strategy, RECURRENT_STRATEGIES)

    def forward(self, x: Tensor, seq_ptr: SeqArg, h0: Optional[tuple[Tensor, Tensor]] = None, *,  # type: ignore[override]
                return_state: bool = False, strategy: Optional[str] = None):
        strategy = _check_strategy(strategy or self.strategy, RECURRENT_STRATEGIES)
        packing = as_packing(seq_ptr)
        _check_x(x, packing)
        if x.shape[1] != self.input_size:
            raise SignalValidationError("x", f"has {x.shape[1]} features but input_size is {self.input_size}.", "match the layer's input_size.")
        S, H = packing.num_sequences, self.hidden_size
        if h0 is None:
            hc = (x.new_zeros(S, H), x.new_zeros(S, H))
        else:
            if not isinstance(h0, (tuple, list)) or len(h0) != 2:
                raise SignalValidationError("h0", f"is a {type(h0).__name__}.", "pass a pair (h0, c0), each [S, H], or None.")
            hc = (_check_state(h0[0], S, H, x, "h0[0] (h0)"), _check_state(h0[1], S, H, x, "h0[1] (c0)"))
        if packing.num_elements == 0:
            out = x.new_zeros(0, H)
            c_last = hc[1]
        elif strategy.startswith("packed_rows"):
            out, c_flat = self._packed_rows(x, packing, hc, return_state, fused=strategy == "packed_rows")
            c_last = _last_states(c_flat, hc[1], packing) if return_state else None
        else:
            out, _ = self._padded_forward(x, packing, hc, packed=strategy == "pack_padded")
            if return_state:
                raise UnsupportedOptionError("return_state", f"is True with strategy={strategy!r} for an LSTM.",
                                             "strategy='packed_rows' or 'packed_rows_autograd' (they return the final "
                                             "(h, c) per sequence), or return_state=False.")
        if return_state:
            return out, (_last_states(out, hc[0], packing), c_last)
        return out

    def _packed_rows(self, x: Tensor, packing: SequencePacking, hc: StateT, keep_c: bool,
                     fused: bool) -> tuple[Tensor, Optional[Tensor]]:
        w_ih, w_hh, b_ih, b_hh = self._params()
        gi = F.linear(x.index_select(0, packing.time_major), w_ih, b_ih)
        if fused:
            h_tm, c_tm = FusedLSTMScan.apply(gi, hc[0], hc[1], w_hh, b_hh, packing, reset_schedule(packing))
            inv = packing.time_major_inv
            return h_tm.index_select(0, inv), (c_tm.index_select(0, inv) if keep_c else None)
        w_hh_t = w_hh.t()

        def step(gi_t: Tensor, st: StateT) -> StateT:
            h, c = st
            g = gi_t + (h @ w_hh_t if b_hh is None else torch.addmm(b_hh, h, w_hh_t))
            i, f, gg, o = g.chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
            return (torch.sigmoid(o) * torch.tanh(c), c)

        outs = _scan(step, gi, packing, hc)
        h_flat = _gather_flat([o[0] for o in outs], packing)
        c_flat = _gather_flat([o[1] for o in outs], packing) if keep_c else None
        return h_flat, c_flat


# --------------------------------------------------------------- attention
PastArg = Optional[Union[tuple[Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]]


class MaskedTemporalAttention(nn.Module):
    r"""Multi-head self-attention along every sequence at once (DySAT-style
    temporal attention), with attention blocked across sequence boundaries.

    For each sequence :math:`s` with rows :math:`x_1..x_n`:

    .. math::
        \hat x_k = x_k + P_{p_k}, \qquad
        \mathrm{out}_k = \mathrm{MHA}\big(\hat x_k,\ \{\hat x_j : j \le k\}\big)

    (:math:`j \le k` only with ``causal=True``); :math:`p_k` is the position of
    :math:`x_k` within its sequence (or the ``positions`` given). The sequences
    are packed into rows (:func:`pack_sequences`) and a block-diagonal causal
    mask keeps each row's sequences apart, so the output equals
    :class:`torch.nn.MultiheadAttention` on each sequence separately. The
    parameters are a :class:`torch.nn.MultiheadAttention` (``self.attn``) and a
    :class:`torch.nn.Embedding` (``self.position_embedding``).

    Args:
        embed_dim (int): :math:`D`.
        num_heads (int): heads (must divide :math:`D`).
        causal (bool): attend to earlier (and the same) steps only.
        max_positions (int): size of the position table.
        position_embedding (bool): add learned position embeddings.
        dropout (float): attention-weight dropout (as ``MultiheadAttention``).
        strategy (str): one of :data:`ATTENTION_STRATEGIES`.

    Forward arguments:

    * ``x``: ``[M, D]`` rows in sequence order.
    * ``seq_ptr``: ``[S+1]`` or a :class:`SequencePacking` of the *local* rows.
    * ``past``: earlier rows of the same sequences held elsewhere, used as
      extra keys/values: ``(past_x [P, D], past_ptr [S+1])`` in sequence
      order, all of sequence :math:`s`'s past rows coming *before* its local
      rows in time; optionally a third element ``past_positions [P]``.
      Without ``positions``, local positions are shifted by each sequence's
      number of past rows. Gradients flow into ``past_x``. (The distributed
      runtime does not use it: it merges received rows in time order, which
      also handles ownership that interleaves in time.)
    * ``positions``: ``[M]`` explicit positions (e.g. snapshot indices)
      instead of the position within the sequence.

    Returns:
        ``[M, D]``.
    """

    def __init__(self, embed_dim: int, num_heads: int, *, causal: bool = True, max_positions: int = 1024,
                 position_embedding: bool = True, dropout: float = 0.0, bias: bool = True,
                 strategy: str = "packed_rows", device=None, dtype=None) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.causal = causal
        self.max_positions = max_positions
        self.dropout = dropout
        self.strategy = _check_strategy(strategy, ATTENTION_STRATEGIES)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, bias=bias, batch_first=True,
                                          device=device, dtype=dtype)
        self.position_embedding = nn.Embedding(max_positions, embed_dim, device=device, dtype=dtype) if position_embedding else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.attn._reset_parameters()
        if self.position_embedding is not None:
            nn.init.xavier_uniform_(self.position_embedding.weight)

    # -- helpers ---------------------------------------------------------
    def _merge_past(self, x: Tensor, packing: SequencePacking, past: PastArg, positions: Optional[Tensor]):
        """Interleave past and local rows per sequence; returns (all_x, all_ptr, all_pos, local_index)."""
        S, M = packing.num_sequences, packing.num_elements
        dev = x.device
        loc_ptr = packing.seq_ptr.to(dev)
        loc_len = loc_ptr[1:] - loc_ptr[:-1]
        if past is None:
            if positions is None:
                positions = torch.arange(M, device=dev) - torch.repeat_interleave(loc_ptr[:-1], loc_len, output_size=M)
            return x, None, positions, None
        if not isinstance(past, (tuple, list)) or len(past) not in (2, 3):
            raise SignalValidationError("past", f"is a {type(past).__name__}.", "pass (past_x [P, D], past_ptr [S+1]) or (past_x, past_ptr, past_positions [P]).")
        past_x, past_ptr = past[0], check_seq_ptr(past[1], "past[1] (past_ptr)").to(dev)
        if past_ptr.numel() != S + 1:
            raise SignalValidationError("past[1] (past_ptr)", f"has {past_ptr.numel() - 1} sequences but seq_ptr has {S}.", "give past rows for the same S sequences (empty ranges allowed).")
        if not isinstance(past_x, Tensor) or past_x.dim() != 2 or past_x.shape[0] != int(past_ptr[-1]) or past_x.shape[1] != x.shape[1]:
            raise SignalValidationError("past[0] (past_x)", f"has shape {list(getattr(past_x, 'shape', []))}, expected [{int(past_ptr[-1])}, {x.shape[1]}].", "pass one row per past element, in sequence order.")
        if past_x.dtype != x.dtype or past_x.device != x.device:
            raise SignalValidationError("past[0] (past_x)", f"is {past_x.dtype} on {past_x.device}, the input {x.dtype} on {x.device}.", "match dtype and device.")
        P = past_x.shape[0]
        past_len = past_ptr[1:] - past_ptr[:-1]
        tot_len = past_len + loc_len
        tot_ptr = torch.zeros(S + 1, dtype=torch.long, device=dev)
        torch.cumsum(tot_len, 0, out=tot_ptr[1:])
        p_pos = torch.arange(P, device=dev) - torch.repeat_interleave(past_ptr[:-1], past_len, output_size=P)
        l_pos = torch.arange(M, device=dev) - torch.repeat_interleave(loc_ptr[:-1], loc_len, output_size=M)
        past_dst = torch.repeat_interleave(tot_ptr[:-1], past_len, output_size=P) + p_pos
        loc_dst = torch.repeat_interleave(tot_ptr[:-1] + past_len, loc_len, output_size=M) + l_pos
        all_x = x.new_zeros(P + M, x.shape[1]).index_copy(0, past_dst, past_x).index_copy(0, loc_dst, x)
        if positions is None:
            all_pos = torch.arange(P + M, device=dev) - torch.repeat_interleave(tot_ptr[:-1], tot_len, output_size=P + M)
        else:
            if len(past) != 3:
                raise SignalValidationError("past", "has no past_positions but explicit positions were given.", "pass past=(past_x, past_ptr, past_positions).")
            all_pos = torch.empty(P + M, dtype=torch.long, device=dev)
            all_pos[past_dst] = torch.as_tensor(past[2], device=dev).long()
            all_pos[loc_dst] = positions
        return all_x, tot_ptr, all_pos, loc_dst

    def _attend(self, q_in: Tensor, allowed: Tensor) -> Tensor:
        """``q_in`` ``[B, L, D]``, ``allowed`` ``[B, L, L]`` bool (True = may attend)."""
        B, L, D = q_in.shape
        a = self.attn
        h = self.num_heads
        q, k, v = F.linear(q_in, a.in_proj_weight, a.in_proj_bias).chunk(3, -1)
        q, k, v = (t.reshape(B, L, h, D // h).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.unsqueeze(1),
                                             dropout_p=self.dropout if self.training else 0.0)
        out = out.transpose(1, 2).reshape(B, L, D)
        return a.out_proj(out)

    def forward(self, x: Tensor, seq_ptr: SeqArg, past: PastArg = None, positions: Optional[Tensor] = None, *,
                strategy: Optional[str] = None, max_position: Optional[int] = None) -> Tensor:
        """``max_position``: an upper bound of the (non-negative) positions
        known to the caller (e.g. the number of snapshots - 1): the range
        check then reads nothing back from the device."""
        strategy = _check_strategy(strategy or self.strategy, ATTENTION_STRATEGIES)
        packing = as_packing(seq_ptr)
        _check_x(x, packing)
        if x.shape[1] != self.embed_dim:
            raise SignalValidationError("x", f"has {x.shape[1]} features but embed_dim is {self.embed_dim}.", "match the layer's embed_dim.")
        if positions is not None:
            positions = torch.as_tensor(positions, device=x.device).long()
            if positions.shape != (packing.num_elements,):
                raise SignalValidationError("positions", f"has shape {list(positions.shape)}.", f"pass one position per row ([{packing.num_elements}]).")
        if packing.num_elements == 0:
            return x.new_zeros(0, self.embed_dim)
        all_x, all_ptr, pos, loc_index = self._merge_past(x, packing, past, positions)
        if all_ptr is not None:
            packing = pack_sequences(all_ptr)
        if self.position_embedding is not None:
            if max_position is not None:  # a bound known on the host: nothing read back
                if max_position >= self.max_positions:
                    raise SignalValidationError("positions", f"range up to {max_position} but max_positions is "
                                                f"{self.max_positions}.", "raise max_positions.")
            elif pos.numel() and (int(pos.min()) < 0 or int(pos.max()) >= self.max_positions):
                raise SignalValidationError("positions", f"range over [{int(pos.min())}, {int(pos.max())}] but max_positions is {self.max_positions}.",
                                            "raise max_positions (or pass smaller explicit positions).")
            all_x = all_x + self.position_embedding(pos)
        if strategy == "packed_rows":
            seq = packing.seq_id  # [R, L], -1 padding (padding rows attend among themselves: no empty softmax)
            allowed = seq.unsqueeze(2) == seq.unsqueeze(1)
            if self.causal:
                allowed = allowed & torch.ones(packing.row_len, packing.row_len, dtype=torch.bool, device=x.device).tril()
            out = packing.unpack(self._attend(packing.pack(all_x), allowed))
        else:
            lengths = packing.seq_lengths.to(x.device)
            S, Mt = packing.num_sequences, all_x.shape[0]
            Lmax = int(lengths.max())
            seq_of = torch.repeat_interleave(torch.arange(S, device=x.device), lengths, output_size=Mt)
            p = torch.arange(Mt, device=x.device) - torch.repeat_interleave(packing.seq_ptr[:-1].to(x.device), lengths, output_size=Mt)
            padded = all_x.new_zeros(S, Lmax, all_x.shape[1]).index_put((seq_of, p), all_x)
            valid = torch.arange(Lmax, device=x.device).unsqueeze(0) < lengths.unsqueeze(1)  # [S, Lmax]
            eye = torch.eye(Lmax, dtype=torch.bool, device=x.device)
            allowed = valid.unsqueeze(1) | eye  # padding queries see themselves only through eye
            allowed = allowed & (valid.unsqueeze(2) | eye)
            if self.causal:
                allowed = allowed & torch.ones(Lmax, Lmax, dtype=torch.bool, device=x.device).tril()
            out = self._attend(padded, allowed)[seq_of, p]
        return out if loc_index is None else out.index_select(0, loc_index)
