r"""Adapters: run a user's PyGT layer on the decomposed/fused path.

:func:`adapt` wraps an instance of PyGT's ``TGCN``, ``TGCN2``, ``A3TGCN`` or
``MPNNLSTM``. The adapter holds the instance itself as its submodule
``module``, so its parameters *are* the instance's parameter tensors:
training the adapter trains the user's object, and ``model.state_dict()`` of
the user's model is unchanged. At wrap time the adapter runs a tiny random
dynamic graph (float64, on a copy) through the instance's own ``forward``
(the per-snapshot loop, state carried along each vertex's sequence) and
through the decomposition, and raises :class:`DecompositionMismatchError` if
they differ: a subclass that changed ``forward`` is caught before it can
silently train a different model.

Classes whose cell convolves the hidden state (GConvGRU, GConvLSTM, GCLSTM,
DCRNN, EvolveGCN, ...) do not decompose; they raise
:class:`UnsupportedModelError` (they need the black-box path).
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Optional

import torch
from torch import Tensor

from ..errors import DecompositionMismatchError, ModelInputError, UnsupportedModelError
from .decomposed import DecomposedModule, FusedGraph, Halo
from .mpnn_lstm import mpnn_pygt_pattern, mpnn_structure, mpnn_time
from .tgcn import tgcn_fused, tgcn_structure, tgcn_time

__all__ = [
    "adapt",
    "PyGTAdapter",
    "TGCNAdapter",
    "TGCN2Adapter",
    "A3TGCNAdapter",
    "MPNNLSTMAdapter",
    "SUPPORTED_PYGT_CLASSES",
    "self_check",
]

SUPPORTED_PYGT_CLASSES = ("TGCN", "TGCN2", "A3TGCN", "MPNNLSTM")
BLACK_BOX_ONLY = (
    "GConvGRU", "GConvLSTM", "GCLSTM", "LRGCN", "DCRNN", "BatchedDCRNN", "EvolveGCNH", "EvolveGCNO",
    "DyGrEncoder", "AGCRN", "A3TGCN2", "HeteroGCLSTM",
)


class PyGTAdapter(DecomposedModule):
    """Base of the adapters: ``self.module`` is the user's PyGT instance."""

    pygt_class = ""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def reference_step(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], H: Optional[Tensor]) -> Tensor:
        """One call of the wrapped instance's own ``forward`` on one snapshot."""
        raise NotImplementedError

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Calling the adapter like the PyGT layer calls the layer itself."""
        return self.module(*args, **kwargs)

    def _tiny_signal(self, gen: torch.Generator) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.module!r})"


class TGCNAdapter(PyGTAdapter):
    r"""PyGT ``TGCN``: structure encoder = the three gate GCNs, time encoder =
    the gated recurrence (:func:`~pyg_dynscale.nn.tgcn.tgcn_time`)."""

    pygt_class = "TGCN"
    time_kind = "recurrent"

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__(module)
        self.state_width = int(module.out_channels)

    def _base(self) -> Any:
        return self.module

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        x = graph.x if x is None else x
        if x.dim() == 2:  # the one-pass path with the folded input projection
            return tgcn_fused(self._base(), graph, x, h0)
        return super().forward_fused(graph, h0, x)

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        return tgcn_structure(self._base(), graph, graph.x if x is None else x, halo=halo, block=block)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        return tgcn_time(self._base(), z, graph, h0)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        """One GCN layer per gate on ``X`` (``in`` wide), recurrent state ``H``,
        structure output ``3H`` (the preset ``"tgcn"``)."""
        from ..partition.pattern import DependencyPattern

        b = self._base()
        return DependencyPattern.preset("tgcn", int(b.in_channels), int(b.out_channels), bytes_per_element=bytes_per_element)

    def reference_step(self, x, edge_index, edge_weight, H):  # type: ignore[override]
        return self.module(x, edge_index, edge_weight, H)

    def _tiny_signal(self, gen: torch.Generator) -> Any:
        return _random_signal(gen, int(self._base().in_channels), changing=True)


class TGCN2Adapter(TGCNAdapter):
    """PyGT ``TGCN2`` (batched T-GCN, same parameters as ``TGCN``); a snapshot
    is run as a batch of one: ``TGCN2(X[None], ..., H[None])[0]``."""

    pygt_class = "TGCN2"

    def reference_step(self, x, edge_index, edge_weight, H):  # type: ignore[override]
        return self.module(x.unsqueeze(0), edge_index, edge_weight, None if H is None else H.unsqueeze(0))[0]


class A3TGCNAdapter(TGCNAdapter):
    r"""PyGT ``A3TGCN``: node features ``[N, F, periods]``; the step is
    :math:`H' = \sum_p \mathrm{softmax}(a)_p\, \mathrm{TGCN}(X_{:,:,p}, H)`
    with the same :math:`H` for every period (PyGT's semantics)."""

    pygt_class = "A3TGCN"

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__(module)
        self.state_width = int(module.out_channels)

    def _base(self) -> Any:
        return self.module._base_tgcn

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        x = graph.x if x is None else x
        if x.dim() != 3 or x.shape[2] != self.module.periods:
            raise ModelInputError(
                "x", f"has shape {list(x.shape)}; A3TGCN needs [N, F, periods={self.module.periods}].",
                "store the lagged features as a [N, F, periods] node field.",
            )
        return tgcn_structure(self._base(), graph, x.transpose(1, 2), halo=halo, block=block)  # [N, P, 3H]

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        return DecomposedModule.forward_fused(self, graph, h0, x)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        probs = torch.softmax(self.module._attention, dim=0).to(z.dtype)
        return tgcn_time(self._base(), z, graph, h0, periods_weight=probs)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        """As T-GCN, with every row carrying the ``periods`` axis: input rows
        ``in * periods``, structure output ``3H * periods``."""
        from ..partition.pattern import BlockPattern, DependencyPattern

        b, P = self._base(), int(self.module.periods)
        H = int(b.out_channels)
        return DependencyPattern((BlockPattern((int(b.in_channels) * P,), "recurrent", H, 3 * H * P),),
                                 bytes_per_element=bytes_per_element, name="a3tgcn")

    def _tiny_signal(self, gen: torch.Generator) -> Any:
        return _random_signal(gen, int(self.module.in_channels), changing=True, periods=int(self.module.periods))


class MPNNLSTMAdapter(PyGTAdapter):
    """PyGT ``MPNNLSTM``: GCN/BatchNorm structure encoder (statistics per
    snapshot = per PyGT call), LSTMs over the window as time encoder. One
    snapshot of the signal = one PyGT call (``window * num_nodes`` rows per
    stacked batch element)."""

    pygt_class = "MPNNLSTM"
    time_kind = "none"

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        return mpnn_structure(self.module, graph, graph.x if x is None else x, halo, block)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        return mpnn_pygt_pattern(int(self.module.in_channels), int(self.module.hidden_size), bytes_per_element)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        if h0 is not None:
            raise ModelInputError("h0", "MPNN-LSTM carries no state across snapshots.", "pass h0=None.")
        return mpnn_time(self.module, z, graph.node_ptr)

    def reference_step(self, x, edge_index, edge_weight, H):  # type: ignore[override]
        return self.module(x, edge_index, edge_weight)

    def _tiny_signal(self, gen: torch.Generator) -> Any:
        m = self.module
        return _random_signal(gen, int(m.in_channels), changing=False, num_nodes=int(m.window) * int(m.num_nodes))


# ------------------------------------------------------------------ self-check
def _random_signal(gen: torch.Generator, F: int, changing: bool, periods: int = 0, num_nodes: int = 5) -> Any:
    from ..data.signal import DynamicGraphSignal

    T, V = 3, num_nodes
    eis, ws, xs, ids = [], [], [], []
    for t in range(T):
        if changing:
            keep = torch.randperm(V, generator=gen)[: V - (t % 2)].sort().values
        else:
            keep = torch.arange(V)
        n = keep.numel()
        E = 3 * n
        eis.append(torch.randint(0, n, (2, E), generator=gen))
        ws.append(torch.rand(E, generator=gen, dtype=torch.float64) + 0.5)
        shape = (n, F, periods) if periods else (n, F)
        xs.append(torch.randn(*shape, generator=gen, dtype=torch.float64))
        ids.append(keep)
    return DynamicGraphSignal(eis, ws, xs, None, node_ids=ids, num_vertices=V, dtype=torch.float64)


def self_check(adapter: PyGTAdapter, atol: float = 1e-8) -> float:
    """Compare the adapter's decomposition with the wrapped instance's own
    per-snapshot loop on a tiny random dynamic graph (float64, eval mode, on a
    deep copy so the user's object is untouched). Returns the max abs
    difference; raises :class:`DecompositionMismatchError` above ``atol``."""
    from .reference import per_snapshot_outputs

    twin = copy.deepcopy(adapter).double().eval()
    gen = torch.Generator().manual_seed(12345)
    signal = twin._tiny_signal(gen)
    try:
        with torch.no_grad():
            ref = per_snapshot_outputs(twin.reference_step, signal, twin.state_width)
            fused = twin.forward_fused(FusedGraph.from_signal(signal))
    except (DecompositionMismatchError, ModelInputError):
        raise
    except Exception as exc:  # the model's own forward cannot run as its class declares
        raise DecompositionMismatchError(
            f"{type(adapter.module).__name__} could not be checked against its declared {adapter.pygt_class} "
            f"decomposition: {type(exc).__name__}: {exc}"
        ) from exc
    diff = float((ref - fused).abs().max()) if ref.numel() else 0.0
    if not (ref.shape == fused.shape and diff <= atol):
        raise DecompositionMismatchError(
            f"{type(adapter.module).__name__} does not match the {adapter.pygt_class} decomposition "
            f"(structure encoder per snapshot, then time encoder per vertex sequence): max abs difference "
            f"{diff:.3g} on a tiny test graph. Its forward was probably changed (e.g. a subclass). Train it "
            "with the per-snapshot loop, or with the general black-box path (planned for a later release)."
        )
    return diff


def adapt(model: torch.nn.Module, check: bool = True) -> DecomposedModule:
    """Wrap a PyGT layer for the decomposed/fused path, sharing its parameters.

    Args:
        model: an instance of PyGT's ``TGCN``, ``TGCN2``, ``A3TGCN`` or
            ``MPNNLSTM`` (or a subclass), or a :class:`DecomposedModule`
            (returned unchanged).
        check: run :func:`self_check` (recommended; a few milliseconds).

    Raises:
        UnsupportedModelError: no adapter exists for the class.
        DecompositionMismatchError: the instance does not compute what its class declares.
    """
    if isinstance(model, DecomposedModule):
        return model
    adapter: Optional[PyGTAdapter] = None
    try:
        from .._optional import import_pygt

        rec = import_pygt("PyGT adapters").nn.recurrent
        for cls_name, adapter_cls in (
            ("A3TGCN", A3TGCNAdapter), ("TGCN2", TGCN2Adapter), ("TGCN", TGCNAdapter), ("MPNNLSTM", MPNNLSTMAdapter)
        ):
            if isinstance(model, getattr(rec, cls_name)):
                adapter = adapter_cls(model)
                break
    except ImportError:
        pass
    if adapter is None:
        name = type(model).__name__
        hint = (
            f"{name}'s cell convolves the hidden state, so it has no structure/time decomposition; "
            if name in BLACK_BOX_ONLY else ""
        )
        raise UnsupportedModelError(
            f"No decomposed-path adapter for {name}. {hint}Adapters exist for PyGT's "
            f"{', '.join(SUPPORTED_PYGT_CLASSES)}; pyg_dynscale.nn also has TGCN, MPNNLSTM and DySAT. "
            "Models like GConvGRU, DCRNN or EvolveGCN need the general black-box path (vertex partition + "
            "per-step halo exchange), planned for a later release; until then train them with PyGT's own loop."
        )
    if check:
        self_check(adapter)
    return adapter
