r"""Sequence packing for masked temporal fusion (DGC §5.1.2).

The time encoder of a stacked dynamic GNN runs along every vertex's temporal
sequence. Sequences have very different lengths, so padding each one to the
longest wastes most of the work. :func:`pack_sequences` instead concatenates
short sequences into *rows* of length ``row_len`` (first-fit-decreasing bin
packing), and records where each sequence starts, so a mask can reset the
recurrent state (or block attention) at every boundary (DGC Eq. 4-5).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

from ..errors import SignalValidationError


@dataclass
class SequencePacking:
    r"""Where every element of a set of concatenated sequences lives in a
    ``[R, L]`` grid of packed rows. Built once per graph (it depends only on the
    sequence lengths) and reused every epoch.

    Input convention: ``M`` flat rows in *sequence order* (all rows of sequence
    0 in time order, then sequence 1, ...) split by ``seq_ptr`` ``[S+1]``, as
    produced by :attr:`Supergraph.sequence_order` / :attr:`Supergraph.sequence_ptr`.

    Rows are sorted by fill (number of used slots) in decreasing order and the
    padding of a row is at its end, so at step :math:`t` the rows still active
    are a prefix ``0 .. active[t]-1`` and a recurrent scan can shrink its batch
    step by step (no computation on padding at all).

    Attributes:
        num_rows (int): :math:`R`.
        row_len (int): :math:`L`.
        num_sequences (int): :math:`S`.
        num_elements (int): :math:`M`.
        seq_ptr (Tensor): ``[S+1]`` the input offsets.
        gather (Tensor): ``[R, L]`` flat row of each slot, ``-1`` for padding.
        reset (Tensor): ``[R, L]`` bool, ``True`` at the first step of each
            sequence (state reset / attention boundary).
        seq_id (Tensor): ``[R, L]`` sequence of each slot, ``-1`` for padding.
        position (Tensor): ``[R, L]`` position within its sequence, ``-1`` for padding.
        slot (Tensor): ``[M]`` flat slot ``r * L + c`` of every flat row
            (the scatter index of :meth:`pack`).
        row_fill (Tensor): ``[R]`` used slots per row (non-increasing).
        active (Tensor): ``[L]`` rows with ``row_fill > t`` (non-increasing).
        step_ptr (Tensor): ``[L+1]`` offsets of each step in the time-major order.
        time_major (Tensor): ``[M]`` flat row of each element in *time-major*
            order (step 0 of rows 0..active[0]-1, then step 1, ...), the layout
            of a :class:`torch.nn.utils.rnn.PackedSequence`'s ``data``.
        time_major_inv (Tensor): ``[M]`` position in the time-major order of
            every flat row.
        time_major_seq (Tensor): ``[M]`` sequence of each time-major element.
        time_major_reset (Tensor): ``[M]`` bool, reset flag of each time-major element.
    """

    num_rows: int
    row_len: int
    num_sequences: int
    num_elements: int
    seq_ptr: Tensor
    gather: Tensor
    reset: Tensor
    seq_id: Tensor
    position: Tensor
    slot: Tensor
    row_fill: Tensor
    active: Tensor
    step_ptr: Tensor
    time_major: Tensor
    time_major_inv: Tensor
    time_major_seq: Tensor
    time_major_reset: Tensor

    # Python-side copies of the per-step batch sizes / offsets (used by loops)
    @property
    def active_list(self) -> list[int]:
        if not hasattr(self, "_active_list"):
            self._active_list = self.active.tolist()
            self._step_list = self.step_ptr.tolist()
        return self._active_list

    @property
    def step_list(self) -> list[int]:
        self.active_list
        return self._step_list

    @property
    def device(self) -> torch.device:
        return self.gather.device

    @property
    def seq_lengths(self) -> Tensor:
        """``[S]`` length of every sequence."""
        return self.seq_ptr[1:] - self.seq_ptr[:-1]

    @property
    def padded_elements(self) -> int:
        """Unused slots :math:`R L - M` (the padding this layout still holds)."""
        return self.num_rows * self.row_len - self.num_elements

    def to(self, device: torch.device | str) -> "SequencePacking":
        """A copy with every tensor on ``device``."""
        return self.apply_tensors(lambda t: t.to(device))

    def apply_tensors(self, fn: Callable[[Tensor], Tensor]) -> "SequencePacking":
        """A copy with ``fn`` applied to every tensor (e.g. a move to the
        device); the host-side step lists and a computed reset schedule come
        along, so the copy never reads them back from the device."""
        kw = {}
        for name in self.__dataclass_fields__:
            v = getattr(self, name)
            kw[name] = fn(v) if isinstance(v, Tensor) else v
        out = SequencePacking(**kw)
        if hasattr(self, "_active_list"):
            out._active_list, out._step_list = self._active_list, self._step_list
        reset = getattr(self, "_reset_cache", None)
        if reset is not None:
            out._reset_cache = [(fn(a), fn(b)) for a, b in reset]  # type: ignore[attr-defined]
        return out

    def check_rows(self, flat: Tensor, name: str = "x") -> None:
        if flat.dim() < 1 or flat.shape[0] != self.num_elements:
            raise SignalValidationError(
                name,
                f"has {flat.shape[0] if flat.dim() else 0} rows but the sequences hold {self.num_elements} elements.",
                "pass one row per element, in sequence order (seq_ptr[-1] rows).",
            )

    def pack(self, flat: Tensor) -> Tensor:
        r"""``[M, *] -> [R, L, *]``; padding slots are zero. Differentiable."""
        self.check_rows(flat)
        out = flat.new_zeros((self.num_rows * self.row_len,) + tuple(flat.shape[1:]))
        out = out.index_copy(0, self.slot, flat)
        return out.view((self.num_rows, self.row_len) + tuple(flat.shape[1:]))

    def unpack(self, packed: Tensor) -> Tensor:
        r"""``[R, L, *] -> [M, *]`` (drops the padding). Differentiable."""
        if packed.shape[:2] != (self.num_rows, self.row_len):
            raise SignalValidationError(
                "packed", f"has leading shape {list(packed.shape[:2])}, expected [{self.num_rows}, {self.row_len}].",
                "pass a tensor produced in this packing's [R, L] layout.",
            )
        return packed.reshape((self.num_rows * self.row_len,) + tuple(packed.shape[2:])).index_select(0, self.slot)

    def last_index(self) -> Tensor:
        """``[S]`` flat row of the last element of every sequence (``-1`` for an empty one)."""
        last = self.seq_ptr[1:] - 1
        return torch.where(self.seq_lengths > 0, last, torch.full_like(last, -1))


def check_seq_ptr(seq_ptr: Tensor, name: str = "seq_ptr") -> Tensor:
    """Validate a ``[S+1]`` offset tensor (starts at 0, non-decreasing, integer)."""
    if not isinstance(seq_ptr, Tensor):
        seq_ptr = torch.as_tensor(seq_ptr)
    if seq_ptr.dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.bool):
        raise SignalValidationError(name, f"has dtype {seq_ptr.dtype}.", "pass integer offsets (torch.long).")
    seq_ptr = seq_ptr.to(torch.long)
    if seq_ptr.dim() != 1 or seq_ptr.numel() < 1:
        raise SignalValidationError(name, f"must be 1-D [S+1] but has shape {list(seq_ptr.shape)}.", "pass sequence offsets, e.g. Supergraph.sequence_ptr.")
    if int(seq_ptr[0]) != 0 or bool((seq_ptr[1:] < seq_ptr[:-1]).any()):
        raise SignalValidationError(name, "must start at 0 and be non-decreasing.", "build it as a cumulative sum of sequence lengths.")
    return seq_ptr


def _first_fit_decreasing(lengths: Tensor, row_len: int) -> tuple[Tensor, Tensor, int]:
    r"""Exact first-fit-decreasing bin packing of items of size ``lengths`` into
    bins of capacity ``row_len``.

    Items are visited in decreasing size (stable); each goes to the first open
    bin with enough room, else opens a new bin. Equal-size items are handled
    together: bins are visited in opening order and bin :math:`b` takes
    :math:`\lfloor \mathrm{cap}_b / l \rfloor` of them before the next bin is
    tried, which is exactly what placing them one by one does. So the loop runs
    over the *distinct lengths* (at most ``row_len``), never over items.

    Returns ``(row [S], offset [S], num_rows)``; empty items get row ``-1``.
    """
    S = lengths.numel()
    row = torch.full((S,), -1, dtype=torch.long)
    off = torch.zeros(S, dtype=torch.long)
    order = torch.sort(lengths, descending=True, stable=True).indices
    sl = lengths[order]
    uniq, counts = torch.unique_consecutive(sl, return_counts=True)
    caps = torch.empty(0, dtype=torch.long)  # remaining capacity of each open bin
    start = 0
    for l, c in zip(uniq.tolist(), counts.tolist()):
        items = order[start:start + c]
        start += c
        if l == 0:
            continue
        take = caps // l
        cum = torch.cumsum(take, 0)
        n_exist = min(c, int(cum[-1]) if cum.numel() else 0)
        if n_exist > 0:
            j = torch.arange(n_exist)
            b = torch.searchsorted(cum, j, right=True)
            q = j - (cum[b] - take[b])
            row[items[:n_exist]] = b
            off[items[:n_exist]] = (row_len - caps[b]) + q * l
            caps = caps - torch.bincount(b, minlength=caps.numel()) * l
        rest = c - n_exist
        if rest > 0:
            per = row_len // l
            nb = -(-rest // per)
            j = torch.arange(rest)
            row[items[n_exist:]] = caps.numel() + j // per
            off[items[n_exist:]] = (j % per) * l
            new_caps = torch.full((nb,), row_len - per * l, dtype=torch.long)
            new_caps[-1] = row_len - (rest - (nb - 1) * per) * l
            caps = torch.cat([caps, new_caps])
    return row, off, caps.numel()


def pack_sequences(seq_ptr: Tensor, row_len: Optional[int] = None) -> SequencePacking:
    r"""Pack sequences into rows of length ``row_len`` by concatenating short
    ones (first-fit decreasing) instead of zero-padding each to the longest.

    Args:
        seq_ptr: ``[S+1]`` offsets of the sequences in the flat sequence-order
            layout (empty sequences allowed).
        row_len: row length :math:`L` (default: the longest sequence). Must be
            at least the longest sequence: a sequence is never split.

    Returns:
        SequencePacking: on ``seq_ptr``'s device. Bin packing runs on the CPU
        with a loop over distinct lengths only.
    """
    seq_ptr = check_seq_ptr(seq_ptr)
    device = seq_ptr.device
    ptr = seq_ptr.cpu()
    lengths = ptr[1:] - ptr[:-1]
    S = lengths.numel()
    M = int(ptr[-1])
    longest = int(lengths.max()) if S > 0 else 0
    if row_len is None:
        row_len = max(longest, 1)
    row_len = int(row_len)
    if row_len < max(longest, 1):
        raise SignalValidationError(
            "row_len", f"is {row_len} but the longest sequence has {longest} elements.",
            "use row_len >= the longest sequence (or None for exactly that).",
        )
    row, off, R = _first_fit_decreasing(lengths, row_len)
    L = row_len
    # sort rows by fill (descending) so that active rows are a prefix at every step
    fill = torch.zeros(R, dtype=torch.long)
    nonempty = lengths > 0
    fill.index_add_(0, row[nonempty], lengths[nonempty])
    row_order = torch.sort(fill, descending=True, stable=True).indices
    rank = torch.empty(R, dtype=torch.long)
    rank[row_order] = torch.arange(R)
    fill = fill[row_order]
    if R > 0:
        row = torch.where(row >= 0, rank[row.clamp(min=0)], row)

    seq_of = torch.repeat_interleave(torch.arange(S), lengths, output_size=M)
    pos = torch.arange(M) - torch.repeat_interleave(ptr[:-1], lengths, output_size=M)
    r_of = row[seq_of]
    c_of = off[seq_of] + pos
    slot = r_of * L + c_of
    gather = torch.full((R * L,), -1, dtype=torch.long)
    gather[slot] = torch.arange(M)
    seq_id = torch.full((R * L,), -1, dtype=torch.long)
    seq_id[slot] = seq_of
    position = torch.full((R * L,), -1, dtype=torch.long)
    position[slot] = pos
    reset = torch.zeros(R * L, dtype=torch.bool)
    reset[slot] = pos == 0

    # time-major order: by column, then row (rows are fill-sorted so each step is a prefix)
    active = (fill.unsqueeze(0) > torch.arange(L).unsqueeze(1)).sum(1) if R > 0 else torch.zeros(L, dtype=torch.long)
    step_ptr = torch.zeros(L + 1, dtype=torch.long)
    torch.cumsum(active, 0, out=step_ptr[1:])
    time_major_inv = step_ptr[c_of] + r_of
    time_major = torch.empty(M, dtype=torch.long)
    time_major[time_major_inv] = torch.arange(M)
    tm_seq = seq_of[time_major]
    tm_reset = (pos == 0)[time_major]

    out = SequencePacking(
        num_rows=R, row_len=L, num_sequences=S, num_elements=M, seq_ptr=ptr,
        gather=gather.view(R, L), reset=reset.view(R, L), seq_id=seq_id.view(R, L),
        position=position.view(R, L), slot=slot, row_fill=fill, active=active, step_ptr=step_ptr,
        time_major=time_major, time_major_inv=time_major_inv, time_major_seq=tm_seq, time_major_reset=tm_reset,
    )
    return out.to(device) if device.type != "cpu" else out


def as_packing(seq: "Tensor | SequencePacking", name: str = "seq_ptr") -> SequencePacking:
    """Accept a ``seq_ptr`` tensor or a ready :class:`SequencePacking`."""
    if isinstance(seq, SequencePacking):
        return seq
    return pack_sequences(check_seq_ptr(seq, name))
