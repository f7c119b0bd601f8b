r"""Training a signal larger than the device's memory: windows streamed from the host (SC'21 §3).

With ``FusedTrainer(..., checkpoint_every=B, stream=True)`` the signal stays in
host memory and only a window of :math:`B` snapshots is resident on the
device at a time:

* every window ``signal[t0:t1]`` is encoded once for **graph-difference
  transfer** (:func:`~pyg_dynscale.data.transfer.diff_encode`: a keyframe,
  then per snapshot the vertices and edges that appeared and the positions of
  those that disappeared, plus all values), in page-locked memory on CUDA;
* the windows run under :func:`torch.utils.checkpoint.checkpoint`: a window
  keeps only the states its sequences end with and its share of the loss, and
  is moved and recomputed again during the backward, in reverse order;
* the copy of the next window (the following one in the forward, the
  previous one in the backward) is issued on a **side stream** while the
  current window computes; a window waits only for its own copy.

The loss decomposes over snapshots (PyGT's per-snapshot means), so each
window computes its part with the global normalizers and nothing of size
:math:`N` stays on the device: the per-vertex state tables
(``[num_vertices, state_width]`` per block) are all that is carried. The
result equals the in-memory run (tested in float64); on the CPU the same
code runs with host-to-host copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from ..data.tensor_maps import to_device
from ..data.transfer import GraphDiff, diff_decode, diff_encode, signal_nbytes
from ..errors import ModelInputError
from ..nn.decomposed import FusedGraph
from .losses import SnapshotMean, link_row_losses, resolve_targets, row_losses

__all__ = ["StreamedWindows", "StreamStats", "StreamedRun"]


@dataclass
class StreamStats:
    """What the last epoch moved and kept.

    Attributes:
        windows (int): windows of the signal.
        transfers (int): window copies issued (forward and recomputation).
        bytes_moved (int): bytes copied host -> device (graph-difference payloads).
        bytes_naive (int): what copying each transferred window whole would move.
        max_resident (int): the most windows on the device at once (the one
            computing plus the one being copied).
    """

    windows: int = 0
    transfers: int = 0
    bytes_moved: int = 0
    bytes_naive: int = 0
    max_resident: int = 0


class StreamedWindows:
    r"""The windows of a host signal, copied to ``device`` on demand.

    Args:
        signal: the whole :class:`~pyg_dynscale.data.DynamicGraphSignal`, on the host.
        every: snapshots per window.
        device: where windows are computed.
        pin: page-locked staging (default: when ``device`` is CUDA).
    """

    def __init__(self, signal: Any, every: int, device: torch.device, pin: Optional[bool] = None) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ModelInputError("checkpoint_every", f"is {every!r}; stream=True moves windows of that many "
                                  "snapshots.", "give a number of snapshots >= 1.")
        if signal.device.type != "cpu":
            raise ModelInputError("signal", f"is on {signal.device}; stream=True keeps the signal in host memory.",
                                  "pass the signal on the CPU (signal.to('cpu')).")
        self.device = torch.device(device)
        cuda = self.device.type == "cuda"
        self.pin = (cuda if pin is None else bool(pin)) and torch.cuda.is_available()
        T = signal.num_snapshots
        ptr = signal.node_ptr.tolist()
        #: ``(t0, t1, first gid, last gid + 1)`` of each non-empty window
        self.ranges: list[tuple[int, int, int, int]] = []
        self._payload: list[GraphDiff] = []
        self._naive: list[int] = []
        self._seq_vertex: list[Tensor] = []
        for t0 in range(0, T, every):
            t1 = min(t0 + every, T)
            if ptr[t1] == ptr[t0]:
                continue
            sub = signal[t0:t1]
            diff = diff_encode(sub, preserve_order=True)
            self._payload.append(diff.pin_memory() if self.pin else diff)
            self._naive.append(signal_nbytes(sub))
            sv = sub.supergraph().sequence_vertex
            self._seq_vertex.append(sv.pin_memory() if self.pin else sv)
            self.ranges.append((t0, t1, ptr[t0], ptr[t1]))
        self.stream = torch.cuda.Stream(self.device) if cuda and torch.cuda.is_available() else None
        self._inflight: dict[int, tuple[GraphDiff, Tensor, Any]] = {}
        self._resident = 0
        self.stats = StreamStats(windows=len(self.ranges))
        #: ``("copy" | "compute" | "done", window)`` in the order they happened (last epoch)
        self.log: list[tuple[str, int]] = []

    def __len__(self) -> int:
        return len(self.ranges)

    def start_epoch(self) -> None:
        self.stats = StreamStats(windows=len(self.ranges))
        self.log = []

    def prefetch(self, i: int) -> None:
        """Issue window ``i``'s copy (on the side stream on CUDA); no-op if
        it is already in flight or out of range."""
        if i < 0 or i >= len(self.ranges) or i in self._inflight:
            return
        diff, sv = self._payload[i], self._seq_vertex[i]
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))  # its buffers may reuse freed memory
            with torch.cuda.stream(self.stream):
                moved = diff.to(self.device, non_blocking=True)
                sv_moved = sv.to(self.device, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.stream)
        else:  # host -> host: the same path, a real copy
            copy = (lambda t: t.clone()) if self.device.type == "cpu" else (lambda t: t.to(self.device))
            moved, sv_moved, event = diff._map(copy), copy(sv), None
        self._inflight[i] = (moved, sv_moved, event)
        self._resident += 1
        self.stats.max_resident = max(self.stats.max_resident, self._resident)
        self.stats.transfers += 1
        self.stats.bytes_moved += diff.nbytes + sv.numel() * sv.element_size()
        self.stats.bytes_naive += self._naive[i]
        self.log.append(("copy", i))

    def _wait(self, i: int) -> tuple[GraphDiff, Tensor]:
        self.prefetch(i)
        moved, sv, event = self._inflight[i]
        if event is not None:
            cur = torch.cuda.current_stream(self.device)
            cur.wait_event(event)
            for t in list(moved.tensors().values()) + [sv]:
                t.record_stream(cur)  # allocated on the side stream, used on this one
            self._inflight[i] = (moved, sv, None)
        return moved, sv

    def sequence_vertex(self, i: int) -> Tensor:
        """``[S_i]`` on the device: the vertex of each sequence of window ``i``
        (copied with the window)."""
        return self._wait(i)[1]

    def take(self, i: int) -> Any:
        """Window ``i`` decoded on the device (waits for its copy only)."""
        moved, _ = self._wait(i)
        del self._inflight[i]
        self.log.append(("compute", i))
        return diff_decode(self._payload[i], self.device, _moved=moved)

    def release(self, i: int) -> None:
        """Window ``i``'s compute is done (its tensors are freed by the caller
        dropping them)."""
        self._resident = max(self._resident - 1, 0)
        self.log.append(("done", i))


class StreamedRun:
    r"""A decomposed model over :class:`StreamedWindows`: the loss of a
    training epoch, or the predictions, window by window (see the module doc).

    Args:
        model: the :class:`~pyg_dynscale.nn.DecomposedModule` (recurrent
            time encoders only: :func:`~pyg_dynscale.runtime.time_blocks.check_windowable`).
        signal: the whole signal, on the host.
        every: snapshots per window.
        device: the training device.
        dtype: the parameters' dtype.
        head: the row-wise head, or ``None``.
        loss: ``"mse"``, ``"mae"``, ``"ce"`` or ``"bce_link"``.
        reduction: ``"mean"`` or ``"sum"`` over snapshots.
        target, link_index, link_label: the signal's target fields.
        h0: ``[S, W]`` initial state of the signal's sequences (block 0).
    """

    def __init__(self, model: Any, signal: Any, every: int, device: torch.device, dtype: torch.dtype,
                 head: Optional[torch.nn.Module], loss: str, reduction: str, target: str, link_index: str,
                 link_label: str, h0: Optional[Tensor] = None) -> None:
        self.model, self.head, self.loss_kind = model, head, loss
        self.device, self.dtype = torch.device(device), dtype
        self.fields = (target, link_index, link_label)
        self.windows = StreamedWindows(signal, every, device)
        self.num_vertices = signal.num_vertices
        self.num_nodes = signal.num_vertex_time_nodes
        T = signal.num_snapshots
        # global normalizers, cut into windows (host work, once; the tiny results live on the device)
        tg = resolve_targets(signal, loss, target, link_index, link_label, dtype)
        seg = tg.label_time if loss == "bce_link" else signal.supergraph().time
        counts = torch.bincount(seg, minlength=T)
        divisor = max(int((counts > 0).sum()), 1)
        move = to_device(self.device)
        self._means = [SnapshotMean(seg[:0], counts[t0:t1], reduction, divisor).apply_tensors(move)
                       for t0, t1, _, _ in self.windows.ranges]
        self.h0 = None
        if h0 is not None:
            table = torch.zeros(self.num_vertices, h0.shape[1], dtype=dtype)
            self.h0 = move(table.index_copy(0, signal.supergraph().sequence_vertex, h0.detach().cpu().to(dtype)))
        self._backward = False

    @property
    def stats(self) -> StreamStats:
        return self.windows.stats

    def _tables(self) -> list[Tensor]:
        W = self.model.state_width
        tables = [torch.zeros(self.num_vertices, W, dtype=self.dtype, device=self.device)
                  for _ in range(self.model.num_blocks)]
        if self.h0 is not None:
            tables[0] = self.h0
        return tables

    def loss(self) -> Tensor:
        """The epoch loss: the windows' parts summed; under autograd each
        window runs checkpointed and is copied and recomputed again in the
        backward."""
        st = self.windows
        st.start_epoch()
        grad = torch.is_grad_enabled()
        self._backward = False
        tables = self._tables()
        total: Optional[Tensor] = None
        for i in range(len(st)):
            sv = st.sequence_vertex(i)
            inits = [t.index_select(0, sv) for t in tables]
            res = (checkpoint(self._window, i, "loss", *inits, use_reentrant=False, preserve_rng_state=True)
                   if grad else self._window(i, "loss", *inits))
            tables = [t.index_copy(0, sv, last) for t, last in zip(tables, res[1:])]
            total = res[0] if total is None else total + res[0]
        if grad:
            self._backward = True
            st.prefetch(len(st) - 1)  # the backward recomputes the last window first
        if total is None:
            return torch.zeros((), dtype=self.dtype, device=self.device, requires_grad=grad)
        return total

    def predict(self) -> Tensor:
        """``[N, *]`` outputs after the head, gathered on the host window by window."""
        st = self.windows
        st.start_epoch()
        self._backward = False
        tables = self._tables()
        outs = []
        for i in range(len(st)):
            sv = st.sequence_vertex(i)
            res = self._window(i, "predict", *[t.index_select(0, sv) for t in tables])
            tables = [t.index_copy(0, sv, last) for t, last in zip(tables, res[1:])]
            outs.append(res[0].cpu())
        return torch.cat(outs, 0) if outs else torch.zeros(0, dtype=self.dtype)

    def _window(self, i: int, what: str, *inits: Tensor) -> tuple:
        """Window ``i``: ``(its loss part | its predictions, *per-block end
        states of its sequences)``."""
        st = self.windows
        sig = st.take(i)
        st.prefetch(i - 1 if self._backward else i + 1)  # overlaps this window's compute
        try:
            g = FusedGraph.from_signal(sig)
            m = self.model
            x = g.x.to(self.dtype)
            h, finals = x, []
            for b in range(m.num_blocks):
                z = m.structure_encoder(g, h, block=b)
                h, last = m.time_encoder_with_state(z, g, inits[b], block=b)
                finals.append(last)
            readout = getattr(m, "readout", None)
            out = readout(h, x) if readout is not None else h
            pred = self.head(out) if self.head is not None else out
            if what == "predict":
                return (pred, *finals)
            return (self._part(i, sig, g, pred), *finals)
        finally:
            st.release(i)

    def _part(self, i: int, sig: Any, g: FusedGraph, pred: Tensor) -> Tensor:
        target, link_index, link_label = self.fields
        tg = resolve_targets(sig, self.loss_kind, target, link_index, link_label, self.dtype)
        mean = self._means[i]
        if self.loss_kind == "bce_link":
            fn = getattr(self.model, "link_logits", None)
            logits = (fn(pred, tg.label_src, tg.label_dst) if fn is not None
                      else (pred.index_select(0, tg.label_src) * pred.index_select(0, tg.label_dst)).sum(-1))
            return mean.of_rows(tg.label_time)(link_row_losses(logits, tg.label))
        return mean.of_rows(g.time)(row_losses(self.loss_kind, pred, tg.target))
