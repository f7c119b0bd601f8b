r"""The black-box path's view of a user's module: how to call it on one
snapshot, what state it carries, and how far its inputs reach (docs/design.md,
"Two runtime paths"; ``docs/blackbox.md``).

A *snapshot model* is any module called once per snapshot the way PyGT's
examples call theirs::

    y, h = model(x, edge_index, edge_weight, h)        # RecurrentGCN-style: (y, h)
    h    = cell(x, edge_index, edge_weight, h)         # a bare cell: y = h
    h, c = cell(x, edge_index, edge_weight, h, c)      # LSTM cells: y = h
    y    = model(x, edge_index, edge_weight)           # no carried state

:class:`SnapshotModel` wraps such a module *without changing it* (its
parameters are the module's) and records

* the call convention (:class:`CellSpec`): PyGT's recurrent classes have
  presets (:data:`PYGT_CELLS`: batched classes get a batch of one, LRGCN
  gets relation ids, ...); any other module is called positionally with its
  state arguments, found by name in its ``forward`` signature;
* the state: number of carried components and their widths, found by one
  probe call on a tiny graph;
* the :class:`~pyg_dynscale.partition.halo_plan.HaloDepth`: the preset of
  a PyGT class, the sum of the presets of the cells (and other message
  passing layers) a user's module contains, or a depth the user declares.
  :func:`~pyg_dynscale.nn.halo_check.check_halo` verifies it numerically.

Modules that keep autograd state *between* calls (EvolveGCN's evolving
weight) are ``evolving``: every rank calls them on every snapshot so that the
evolution is replicated, and the state is detached after each backward.
"""
from __future__ import annotations

import copy
import inspect
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional, Union

import torch
from torch import Tensor

from ..errors import ModelInputError, UnsupportedModelError
from ..partition.halo_plan import HaloDepth

__all__ = ["CellSpec", "SnapshotModel", "PYGT_CELLS", "cell_spec", "infer_spec", "STATE_NAMES"]

#: ``forward`` argument names (after ``x, edge_index, edge_weight``) read as carried state
STATE_NAMES = ("h", "c", "h0", "c0", "h_0", "c_0", "hidden", "hidden_state", "prev_hidden_state", "state",
               "cell", "cell_state", "h_prev", "c_prev", "prev_state", "memory")

@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """PyGT cells build some tensors with the default dtype (a missing state,
    DCRNN's degree vectors): run copies in another dtype with that default."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


Call = Callable[[torch.nn.Module, Tensor, Tensor, Optional[Tensor], tuple, dict], Any]


@dataclass(frozen=True)
class CellSpec:
    r"""How the black-box path calls one module on one snapshot.

    Attributes:
        name: class name (for messages).
        depth: its :class:`HaloDepth`.
        num_states: carried state components (0, 1 = ``H``, 2 = ``(H, C)``).
        call: ``call(module, x, edge_index, edge_weight, states, edge_fields)``
            returning the module's raw output.
        returns: ``"state"`` (output is the state: ``H`` or ``(H, C)``, and
            :math:`y = H`), ``"y_state"`` (``(y, H[, C])``), ``"y"`` (no state)
            or ``"dygr"`` (``(y, H, C)``, DyGrEncoder).
        evolving: keeps autograd state between calls (EvolveGCN).
        global_reason: why a snapshot cannot be split across ranks in
            training (``None``: it can).
    """

    name: str
    depth: HaloDepth
    num_states: int
    call: Call
    returns: str = "state"
    evolving: bool = False
    global_reason: Optional[str] = None


# ------------------------------------------------------------------ call conventions
def _call_positional(m: torch.nn.Module, x: Tensor, ei: Tensor, ew: Optional[Tensor], states: tuple, ef: dict) -> Any:
    return m(x, ei, ew, *states)


def _call_batched(m, x, ei, ew, states, ef):  # TGCN2 / A3TGCN2: a snapshot is a batch of one
    out = m(x.unsqueeze(0), ei, ew, *(s.unsqueeze(0) if s is not None else None for s in states))
    return out[0]


def _call_stateless(m, x, ei, ew, states, ef):
    return m(x, ei, ew)


def _call_lrgcn(m, x, ei, ew, states, ef):
    et = ef.get("edge_type")
    if et is None:
        raise ModelInputError("edge_type", "is missing: LRGCN takes relation ids per edge, not weights.",
                              "give the signal an edge-level field edge_type=[E_t] (long) per snapshot.")
    return m(x, ei, et.long(), *states)


def _cheb_hops(m: torch.nn.Module) -> int:
    convs = [c for c in m.modules() if type(c).__name__ == "ChebConv"]
    return max((len(c.lins) - 1 for c in convs), default=0)


def _dconv_hops(m: torch.nn.Module) -> int:
    return max((int(c.weight.shape[1]) - 1 for c in m.modules() if type(c).__name__ == "DConv"), default=0)


_BN_REASON = ("it normalizes with BatchNorm statistics over all nodes of a snapshot; a rank would normalize over "
              "its own rows only. Use the decomposed path (PyGT's MPNNLSTM has an adapter with distributed "
              "BatchNorm), or train on one process.")


def _preset(name: str, m: torch.nn.Module) -> CellSpec:
    if name in ("TGCN", "A3TGCN"):
        return CellSpec(name, HaloDepth(1, (0,)), 1, _call_positional)
    if name in ("TGCN2", "A3TGCN2"):
        return CellSpec(name, HaloDepth(1, (0,)), 1, _call_batched)
    if name == "GConvGRU":
        k = _cheb_hops(m)
        return CellSpec(name, HaloDepth(2 * k, (2 * k,)), 1, _call_positional)
    if name == "GConvLSTM":
        k = _cheb_hops(m)
        return CellSpec(name, HaloDepth(k, (k, 0)), 2, _call_positional)
    if name == "GCLSTM":
        k = _cheb_hops(m)
        return CellSpec(name, HaloDepth(0, (k, 0)), 2, _call_positional)
    if name == "DCRNN":
        k = _dconv_hops(m)
        return CellSpec(name, HaloDepth(2 * k, (2 * k,)), 1, _call_positional)
    if name == "LRGCN":
        return CellSpec(name, HaloDepth(1, (1, 0)), 2, _call_lrgcn)
    if name == "DyGrEncoder":
        layers = int(m.conv_num_layers)
        return CellSpec(name, HaloDepth(layers, (0, 0)), 2, _call_positional, returns="dygr")
    if name == "EvolveGCNO":
        return CellSpec(name, HaloDepth(1, ()), 0, _call_stateless, returns="y", evolving=True)
    if name == "EvolveGCNH":
        return CellSpec(name, HaloDepth(1, (), full_nodes=True), 0, _call_stateless, returns="y", evolving=True)
    if name == "MPNNLSTM":
        return CellSpec(name, HaloDepth(2, ()), 0, _call_stateless, returns="y", global_reason=_BN_REASON)
    if name == "AGCRN":
        raise UnsupportedModelError(
            "AGCRN takes node embeddings E instead of edges (forward(X, E, H)) and its learned adjacency links "
            "every vertex with every other, so it is not a per-snapshot graph module. Wrap it in your own module "
            "forward(x, edge_index, edge_weight, h) that passes your E, and declare depth=None (the whole "
            "snapshot); it then trains on one process (FusedTrainer), and distributed only without a speed-up.")
    raise UnsupportedModelError(f"{name} has no black-box preset.")


#: PyGT recurrent classes with a black-box preset
PYGT_CELLS = ("TGCN", "TGCN2", "A3TGCN", "A3TGCN2", "GConvGRU", "GConvLSTM", "GCLSTM", "DCRNN", "LRGCN",
              "DyGrEncoder", "EvolveGCNO", "EvolveGCNH", "MPNNLSTM", "AGCRN")
#: PyGT classes the black-box path refuses (they run several snapshots inside one call)
_MULTI_STEP = ("BatchedDCRNN", "HeteroGCLSTM")


def _pygt_class(m: torch.nn.Module) -> Optional[str]:
    """The PyGT recurrent class ``m`` is an instance of (``None``: none)."""
    mod = type(m).__module__ or ""
    for cls in type(m).__mro__:
        if cls.__name__ in PYGT_CELLS + _MULTI_STEP and (cls.__module__ or "").startswith("torch_geometric_temporal"):
            return cls.__name__
    return None if not mod.startswith("torch_geometric_temporal") else None


def cell_spec(m: torch.nn.Module) -> Optional[CellSpec]:
    """The preset of a PyGT recurrent instance (``None`` for other modules)."""
    name = _pygt_class(m)
    if name is None:
        return None
    if name in _MULTI_STEP:
        raise UnsupportedModelError(f"{name} runs several snapshots (or node types) inside one call; the black-box "
                                    "path calls a module once per snapshot. Use its per-snapshot sibling "
                                    "(DCRNN, GCLSTM).")
    return _preset(name, m)


def _state_arity(m: torch.nn.Module) -> int:
    try:
        params = list(inspect.signature(m.forward).parameters.values())
    except (TypeError, ValueError):
        return 0
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    n = 0
    for p in pos[3:]:
        if p.name.lower() in STATE_NAMES or p.name.lower().startswith(("hidden", "prev_h", "cell_")):
            n += 1
        else:
            break
    if len(pos) < 3 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        raise ModelInputError("model", f"{type(m).__name__}.forward takes {len(pos)} positional arguments.",
                              "a snapshot model is called as model(x, edge_index, edge_weight[, h[, c]]).")
    return n


def _inner_hops(m: torch.nn.Module) -> tuple[Optional[int], list, bool, bool]:
    """Sum of the hops of the known cells and other message-passing layers
    inside ``m`` (an upper bound for layers applied one after another),
    names of the cells, whether one is evolving, whether one needs full nodes."""
    from torch_geometric.nn import MessagePassing

    total: Optional[int] = 0
    cells: list = []
    evolving = full = False
    covered: set = set()
    for sub in m.modules():
        if sub is m or id(sub) in covered:
            continue
        spec = cell_spec(sub)
        if spec is not None:
            cells.append(spec)
            covered.update(id(s) for s in sub.modules())
            hops = spec.depth.hops
            total = None if (total is None or hops is None) else total + hops
            evolving |= spec.evolving
            full |= spec.depth.full_nodes
        elif isinstance(sub, MessagePassing):
            covered.update(id(s) for s in sub.modules())
            k = len(sub.lins) - 1 if type(sub).__name__ == "ChebConv" else int(getattr(sub, "K", 1) or 1)
            total = None if total is None else total + k
    return total, cells, evolving, full


def infer_spec(module: torch.nn.Module, depth: Union[None, int, HaloDepth, str] = "auto") -> CellSpec:
    """The :class:`CellSpec` of ``module``: its preset if it is a PyGT cell,
    else a positional call whose state arguments are read from its signature
    and whose depth is ``depth`` (``"auto"``: the sum of the contained
    cells' presets; an int: that many hops for features and every state;
    ``None``: the whole snapshot)."""
    spec = cell_spec(module)
    if spec is not None:
        if depth == "auto":
            return spec
        return replace(spec, depth=_as_depth(depth, spec.num_states, spec.depth.full_nodes))
    n = _state_arity(module)
    total, cells, evolving, full = _inner_hops(module)
    reasons = [c.global_reason for c in cells if c.global_reason]
    if any(isinstance(s, torch.nn.modules.batchnorm._BatchNorm) for s in module.modules()):
        reasons.append(_BN_REASON.replace("it normalizes", "it contains BatchNorm, which normalizes"))
    if depth == "auto":
        if not cells and total == 0:
            raise ModelInputError(
                "depth", f"cannot be inferred: {type(module).__name__} contains no PyGT cell or message-passing layer.",
                "declare how many hops its inputs reach: depth=<int> (or a HaloDepth), depth=None for the whole snapshot.")
        d = HaloDepth.uniform(total, n, full)
    else:
        d = _as_depth(depth, n, full)
    return CellSpec(type(module).__name__, d, n, _call_positional, returns="y_state" if n else "y",
                    evolving=evolving, global_reason=reasons[0] if reasons else None)


def _as_depth(depth: Union[None, int, HaloDepth], num_states: int, full: bool) -> HaloDepth:
    if isinstance(depth, HaloDepth):
        if len(depth.state) != num_states:
            raise ModelInputError("depth.state", f"has {len(depth.state)} entries but the module carries {num_states} "
                                  "state component(s).", "give one depth per state component.")
        return depth
    if depth is None or (isinstance(depth, int) and not isinstance(depth, bool)):
        return HaloDepth.uniform(depth, num_states, full)
    raise ModelInputError("depth", f"is {depth!r}.", "use 'auto', an int number of hops, None or a HaloDepth.")


class SnapshotModel(torch.nn.Module):
    r"""A user's per-snapshot module, prepared for the black-box path (its
    parameters are the module's own).

    Args:
        module: the module (a PyGT recurrent instance, or a module such as
            PyGT's example ``RecurrentGCN``).
        depth: ``"auto"`` (the preset, or the sum over the cells it
            contains), an int number of hops, ``None`` (the whole snapshot) or
            a :class:`HaloDepth`.
        num_states: override the number of carried state components read
            from ``forward``'s signature.

    Call :meth:`step` on one snapshot: ``step(x, edge_index, edge_weight,
    states) -> (y, states)``, ``states`` a tuple of ``[n, w_c]`` tensors.
    """

    def __init__(self, module: torch.nn.Module, depth: Union[str, int, None, HaloDepth] = "auto",
                 num_states: Optional[int] = None) -> None:
        super().__init__()
        if isinstance(module, SnapshotModel):
            raise ModelInputError("module", "is already a SnapshotModel.", "pass the inner module.")
        self.module = module
        spec = infer_spec(module, depth)
        if num_states is not None and num_states != spec.num_states:
            d = spec.depth
            st = (d.state + (d.x,) * num_states)[:num_states] if d.state or num_states == 0 else (d.x,) * num_states
            spec = replace(spec, num_states=int(num_states), depth=HaloDepth(d.x, tuple(st), d.full_nodes),
                           returns=spec.returns if num_states else "y")
        self.spec = spec
        #: widths of the carried state components (set by :meth:`probe`)
        self.state_widths: tuple = ()
        #: shape of one row of ``y`` (set by :meth:`probe`)
        self.output_shape: tuple = ()

    @property
    def depth(self) -> HaloDepth:
        return self.spec.depth

    @property
    def num_states(self) -> int:
        return self.spec.num_states

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped module's own forward."""
        return self.module(*args, **kwargs)

    def step(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], states: tuple,
             edge_fields: Optional[dict] = None) -> tuple[Tensor, tuple]:
        """One snapshot: ``(y [n, ...], new states)``. Runs with the default
        dtype set to ``x``'s, since PyGT cells create some tensors with the
        default dtype (DCRNN's degree vectors), which breaks float64 training."""
        if x.is_floating_point() and x.dtype != torch.get_default_dtype():
            with default_dtype(x.dtype):
                out = self.spec.call(self.module, x, edge_index, edge_weight, tuple(states), edge_fields or {})
        else:
            out = self.spec.call(self.module, x, edge_index, edge_weight, tuple(states), edge_fields or {})
        return self._split(out)

    def _split(self, out: Any) -> tuple[Tensor, tuple]:
        n, r = self.spec.num_states, self.spec.returns
        name = type(self.module).__name__
        if r == "dygr":
            y, h, c = out
            return y, (h, c)
        if n == 0:
            if isinstance(out, (tuple, list)):
                raise ModelInputError("model", f"{name} carries no state but returned a {len(out)}-tuple.",
                                      "return y, or declare the state arguments in forward(x, edge_index, edge_weight, h).")
            return out, ()
        if isinstance(out, Tensor):
            if n != 1:
                raise ModelInputError("model", f"{name} takes {n} state arguments but returned one tensor.",
                                      "return (h, c) or (y, h, c).")
            return out, (out,)
        out = tuple(out)
        if len(out) == n and r == "state":
            return out[0], out
        if len(out) == n + 1:
            return out[0], out[1:]
        if len(out) == n:  # (h, c) from a module declared y_state: y is h
            return out[0], out
        raise ModelInputError("model", f"{name} returned {len(out)} values for {n} state argument(s).",
                              "return h, (y, h), (h, c) or (y, h, c).")

    def probe(self, x_like: Tensor, edge_weight: bool = True, edge_fields: Optional[dict] = None) -> tuple:
        """Call a float32 copy of the module once on a ring graph with state
        ``None`` (zeros of a width only the module knows) to learn the state
        widths. ``x_like``: one snapshot's features (the row count is kept:
        some modules need a fixed number of nodes). Returns and stores
        :attr:`state_widths`."""
        # float32: PyGT cells create a missing state with torch.zeros (the default dtype); on a CPU copy, so that
        # probing reads nothing from the training device
        twin = copy.deepcopy(self).float().eval().cpu()
        n = int(x_like.shape[0])
        x = torch.randn((n,) + tuple(x_like.shape[1:]), generator=torch.Generator().manual_seed(0), dtype=torch.float32)
        ring = torch.arange(n)
        ei = torch.cat([torch.stack([ring, (ring + 1) % n]), torch.stack([(ring + 1) % n, ring])], 1)
        ew = torch.ones(ei.shape[1], dtype=x.dtype) if edge_weight else None
        ef = {k: (v[:1].float() if v.is_floating_point() else v[:1]).cpu().expand(ei.shape[1], *v.shape[1:])
              for k, v in (edge_fields or {}).items()}
        try:
            with torch.no_grad(), default_dtype(torch.float32):
                y, states = twin.step(x, ei, ew, (None,) * self.num_states, ef)
        except (ModelInputError, UnsupportedModelError):
            raise
        except Exception as exc:
            raise ModelInputError(
                "model", f"{type(self.module).__name__} failed on a {n}-node test snapshot with features "
                f"{list(x.shape)}: {type(exc).__name__}: {exc}",
                "check that it is called as model(x, edge_index, edge_weight[, h[, c]]) with the signal's features.") from exc
        widths = []
        for i, s in enumerate(states):
            if not isinstance(s, Tensor) or s.dim() != 2 or s.shape[0] != n:
                raise ModelInputError("model", f"state component {i} of {type(self.module).__name__} has shape "
                                      f"{list(getattr(s, 'shape', []))}, not [num_nodes, width].",
                                      "carry per-node state rows [n, w] between snapshots.")
            widths.append(int(s.shape[1]))
        self.state_widths = tuple(widths)
        self.output_shape = tuple(y.shape[1:]) if isinstance(y, Tensor) and y.dim() >= 1 else ()
        return self.state_widths

    def detach_carried(self) -> None:
        """Detach autograd state a module keeps between calls (EvolveGCN's
        ``weight``), as PyGT's EvolveGCN examples do after each step."""
        for sub in self.module.modules():
            for name, v in list(vars(sub).items()):
                if isinstance(v, Tensor) and not isinstance(v, torch.nn.Parameter) and v.grad_fn is not None:
                    setattr(sub, name, v.detach())

    def extra_repr(self) -> str:
        return f"spec={self.spec.name}, depth=({self.spec.depth.describe()}), states={self.spec.num_states}"
