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

A user's module *around* one such cell (PyGT's example ``RecurrentGCN``:
the cell, then per-node operations such as ReLU and a ``Linear``, returning
``(y, h)``) is wrapped by :class:`ModuleAdapter`: the cell runs decomposed,
and the user's own ``forward`` runs once over all rows with the cell replaced
by the rows it computed (so only its per-node operations execute). The same
self-check against the module's own per-snapshot loop guards it.

Classes whose cell convolves the hidden state (GConvGRU, GConvLSTM, GCLSTM,
DCRNN, EvolveGCN, ...) do not decompose; they raise
:class:`UnsupportedModelError` and run on the black-box path
(:mod:`pyg_dynscale.nn.snapshot_model`).
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
    "ModuleAdapter",
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


class ModuleAdapter(PyGTAdapter):
    r"""A user's module around one adaptable PyGT cell, on the decomposed path.

    The cell (``cell_adapter``) computes the state :math:`H` of every
    vertex-time node decomposed; :meth:`readout` then calls the user's
    ``forward(x, edge_index, edge_weight, h)`` once on all rows with the cell
    returning those rows, so that only the operations around it run:
    :math:`y = f(x, H)` row by row. Valid when ``forward`` returns
    ``(y, h)`` with ``h`` the cell's output and everything else is per node;
    :func:`self_check` verifies it on a tiny graph.
    """

    def __init__(self, module: torch.nn.Module, cell_adapter: PyGTAdapter) -> None:
        super().__init__(module)
        self.cell_adapter = cell_adapter
        self.pygt_class = f"{type(module).__name__}({cell_adapter.pygt_class})"
        self.time_kind = cell_adapter.time_kind
        self.state_width = cell_adapter.state_width

    @property
    def num_blocks(self) -> int:
        return self.cell_adapter.num_blocks

    @property
    def out_channels(self) -> int:
        return int(getattr(self.cell_adapter.module, "out_channels", 0) or self.state_width)

    @property
    def window(self) -> int:
        return int(getattr(self.cell_adapter, "window", 1) or 1)

    def structure_encoder(self, graph: FusedGraph, x: Optional[Tensor] = None, block: int = 0,
                          halo: Optional[Halo] = None) -> Tensor:
        return self.cell_adapter.structure_encoder(graph, x, block, halo)

    def time_encoder(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0) -> Tensor:
        return self.cell_adapter.time_encoder(z, graph, h0, block)

    def time_encoder_with_state(self, z: Tensor, graph: FusedGraph, h0: Optional[Tensor] = None, block: int = 0):
        return self.cell_adapter.time_encoder_with_state(z, graph, h0, block)

    def forward_fused(self, graph: FusedGraph, h0: Optional[Tensor] = None, x: Optional[Tensor] = None) -> Tensor:
        return self.cell_adapter.forward_fused(graph, h0, x)

    def dependency_pattern(self, bytes_per_element: int = 4) -> Any:
        return self.cell_adapter.dependency_pattern(bytes_per_element)

    def readout(self, h: Tensor, x: Tensor) -> Tensor:
        r"""``y`` ``[n, ...]`` of the user's ``forward`` for rows with state
        ``h`` ``[n, H]`` and features ``x`` ``[n, ...]``."""
        cell = self.cell_adapter.module
        batched = self.cell_adapter.pygt_class == "TGCN2"
        cell.forward = lambda *args, **kwargs: h.unsqueeze(0) if batched else h  # type: ignore[method-assign]
        try:
            out = self.module(x, x.new_zeros(2, 0, dtype=torch.long), None, None)
        finally:
            del cell.forward
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise DecompositionMismatchError(f"{type(self.module).__name__} must return (y, h) to run decomposed.")
        return out[0]

    def reference_step(self, x, edge_index, edge_weight, H):  # type: ignore[override]
        return self.module(x, edge_index, edge_weight, H)[1]

    def _tiny_signal(self, gen: torch.Generator) -> Any:
        return self.cell_adapter._tiny_signal(gen)


def _adapter_of(model: torch.nn.Module) -> Optional[PyGTAdapter]:
    """The adapter of a PyGT instance of a supported class (``None``: none)."""
    try:
        from .._optional import import_pygt

        rec = import_pygt("PyGT adapters").nn.recurrent
    except ImportError:
        return None
    for cls_name, adapter_cls in (
        ("A3TGCN", A3TGCNAdapter), ("TGCN2", TGCN2Adapter), ("TGCN", TGCNAdapter), ("MPNNLSTM", MPNNLSTMAdapter)
    ):
        if isinstance(model, getattr(rec, cls_name)):
            return adapter_cls(model)
    return None


def _module_adapter(model: torch.nn.Module) -> Optional[ModuleAdapter]:
    """A :class:`ModuleAdapter` when ``model`` holds exactly one adaptable
    cell and no other message-passing layer, and ``forward`` takes
    ``(x, edge_index, edge_weight, h)``."""
    from torch_geometric.nn import MessagePassing

    inner = [(m, _adapter_of(m)) for m in model.modules() if m is not model]
    cells = [(m, a) for m, a in inner if a is not None]
    if len(cells) != 1:
        return None
    cell, adapter = cells[0]
    in_cell = {id(m) for m in cell.modules()}
    if any(isinstance(m, MessagePassing) and id(m) not in in_cell for m in model.modules()):
        return None
    if adapter.time_kind != "recurrent" or not adapter.state_width:
        return None
    import inspect

    try:
        n = len([p for p in inspect.signature(model.forward).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        return None
    return ModuleAdapter(model, adapter) if n == 4 else None


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

    twin = copy.deepcopy(adapter).double().eval().cpu()  # checked on the host, whatever the training device
    gen = torch.Generator().manual_seed(12345)
    signal = twin._tiny_signal(gen)
    try:
        with torch.no_grad():
            ref = per_snapshot_outputs(twin.reference_step, signal, twin.state_width)
            graph = FusedGraph.from_signal(signal)
            fused = twin.forward_fused(graph)
            if isinstance(twin, ModuleAdapter):  # the user's y as well as the carried state
                ref_y = per_snapshot_outputs(_y_step(twin.module), signal, twin.state_width, y_only=True)
                y = twin.readout(fused, graph.x)
                if ref_y.shape != y.shape or float((ref_y - y).abs().max()) > atol:
                    ref, fused = ref_y, y
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
            "on the black-box path (path='blackbox'), which calls its forward unchanged."
        )
    return diff


def _y_step(module: torch.nn.Module) -> Callable:
    def step(x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], H: Optional[Tensor]) -> tuple:
        return module(x, edge_index, edge_weight, H)

    return step


def adapt(model: torch.nn.Module, check: bool = True) -> DecomposedModule:
    """Wrap a PyGT layer for the decomposed/fused path, sharing its parameters.

    Args:
        model: an instance of PyGT's ``TGCN``, ``TGCN2``, ``A3TGCN`` or
            ``MPNNLSTM`` (or a subclass), a module around exactly one of
            them with ``forward(x, edge_index, edge_weight, h) -> (y, h)``
            and per-node operations otherwise (:class:`ModuleAdapter`), or a
            :class:`DecomposedModule` (returned unchanged).
        check: run :func:`self_check` (recommended; a few milliseconds).

    Raises:
        UnsupportedModelError: no adapter exists for the class.
        DecompositionMismatchError: the instance does not compute what its class declares.
    """
    if isinstance(model, DecomposedModule):
        return model
    adapter: Optional[PyGTAdapter] = _adapter_of(model)
    if adapter is None:
        adapter = _module_adapter(model)
    if adapter is None:
        name = type(model).__name__
        hint = (
            f"{name}'s cell convolves the hidden state, so it has no structure/time decomposition; "
            if name in BLACK_BOX_ONLY else ""
        )
        raise UnsupportedModelError(
            f"No decomposed-path adapter for {name}. {hint}Adapters exist for PyGT's "
            f"{', '.join(SUPPORTED_PYGT_CLASSES)}; pyg_dynscale.nn also has TGCN, MPNNLSTM and DySAT. "
            "Other models (GConvGRU, DCRNN, EvolveGCN, ...) run on the black-box path: pass path='blackbox' "
            "(or 'auto') to FusedTrainer / DistributedTrainer."
        )
    if check:
        self_check(adapter)
    return adapter
