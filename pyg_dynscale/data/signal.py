r"""The snapshot-graph container :class:`DynamicGraphSignal`."""
from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from ..errors import SignalValidationError
from . import normalize as nz
from .fields import FIELD_LEVELS, SnapshotField, default_cat_dim, gather_ranges, ptr_from_counts
from .io import load_signal, save_signal
from .pygt import from_pygt, to_pygt
from .stats import SignalStatistics
from .supergraph import Supergraph

ArrayLike = Any  # numpy array, torch tensor or nested list


class DynamicGraphSignal:
    r"""A discrete-time dynamic graph :math:`\mathcal{G} = \{G_1, \ldots, G_T\}`
    whose vertex sets, edges, features and targets may all change over time.

    Snapshot :math:`t` holds the vertices :math:`V_t` (global vertex ids, which
    may differ between snapshots), their features :math:`X_t \in
    \mathbb{R}^{|V_t| \times F}`, edges :math:`E_t` given as local row indices
    into :math:`V_t`, optional edge weights, targets and extra attributes.

    Internally all snapshots are concatenated: vertex-time node :math:`(i, t)`
    has the global id (DGC Eq. 1)

    .. math::
        \mathrm{gid}(i, t) = \mathrm{offset}[t] + \mathrm{local\_index}_t(i),
        \qquad \mathrm{offset}[t] = \sum_{t' < t} |V_{t'}|,

    which is ``node_ptr[t] + row``. :meth:`supergraph` exposes the graph on
    these ids with spatial and temporal edges.

    **A static graph is stored once.** When every snapshot has the same edges
    (one ``[2, E]`` ``edge_indices`` array, with one ``[E]`` weight array or
    none), the signal keeps that one edge list, :attr:`static_edge_index`
    ``[2, E]`` and :attr:`static_edge_weight` ``[E]``, beside the per-snapshot
    features and targets, instead of :math:`T` copies (a 52,116-step road
    graph of 2,600 edges would otherwise hold 2.2 GB of edge indices).
    Snapshots, slicing, :meth:`select`, :meth:`sort_edges`, :meth:`to`,
    :meth:`save` / :meth:`load`, :meth:`fingerprint` and :meth:`supergraph`
    work on the one list. The concatenated attributes :attr:`edge_index`
    ``[2, T E]`` and :attr:`edge_weight` ``[T E]`` stay available to readers
    that need them: each is expanded at its first access and kept
    (:attr:`edges_expanded` tells whether that happened). An expansion edited
    in place (``signal.edge_weight[-1] += 1``), or an assignment to
    :attr:`edge_index` / :attr:`edge_weight` / :attr:`edge_ptr`, makes the
    signal one with edges per snapshot from then on, so every reader sees the
    edit; an edit of the one list drops the stale expansion.
    :attr:`edge_ptr` (``[T+1]``, :math:`t E`) is computed, never saved.
    Readers that only ask whether edges are weighted use :attr:`weighted`.

    **Local vertex ids are implicit.** When each snapshot's rows are the
    vertices :math:`0 \ldots |V_t|-1` in order (``node_ids=None``, the
    default; :attr:`local_ids`), :attr:`node_id` is not stored: it is built at
    its first access, like an edge expansion (and an edit of it in place makes
    the ids explicit). A 52,116-step graph of 325 vertices saves 135 MB.

    Iterating yields one :class:`torch_geometric.data.Data` per snapshot with
    ``x``, ``edge_index``, ``edge_attr`` (the edge weight, as PyGT names it),
    ``edge_weight``, ``y``, ``n_id`` (global vertex ids) and the extras, so a
    PyTorch Geometric Temporal training loop runs on it unchanged. Unlike
    PyGT's signals, iteration is re-entrant: every ``iter()`` is independent.

    Args:
        edge_indices: per snapshot a ``[2, E_t]`` integer array of local node
            rows, as a list; or one ``[2, E]`` array shared by all snapshots.
        edge_weights: per snapshot an ``[E_t]`` array (or one ``[E]`` array
            with a shared ``edge_indices``), or ``None``.
        features: per snapshot ``[|V_t|, F]`` (a list, or an array with time on
            dim 0), or with ``static_features=True`` one array for all snapshots.
        targets: per snapshot ``[|V_t|, ...]`` node targets (or graph-level
            targets with ``field_levels={"y": "graph"}``), or ``None``.
        node_ids: per snapshot the ``[|V_t|]`` global ids of the vertices present,
            in row order. Default: ``0 .. |V_t|-1`` (a fixed vertex set).
        num_vertices: size of the global vertex id space. Default: largest id + 1.
        static_features: treat ``features`` as one array shared by all snapshots.
        field_levels: override the level (``"node"``, ``"edge"``, ``"graph"``,
            ``"ragged"``) of ``"x"``, ``"y"`` or an extra. Extras default to
            ``"ragged"`` when their name contains ``index`` (``[2, L_t]``), else
            the first of node/edge/graph whose row count fits every snapshot.
        allow_nonfinite: accept NaN/inf in floating fields.
        dtype: floating dtype of features, weights and float targets
            (default ``torch.float32``, as PyGT; ``None`` keeps the input's).
        **extras: further per-snapshot attributes.

    Raises:
        SignalValidationError: on any inconsistent input; the message names the
            field and the fix.
    """

    node_ptr: Tensor
    fields: dict[str, SnapshotField]
    num_vertices: int

    def __init__(
        self,
        edge_indices: Union[Sequence[ArrayLike], ArrayLike],
        edge_weights: Union[Sequence[ArrayLike], ArrayLike, None] = None,
        features: Union[Sequence[ArrayLike], ArrayLike, None] = None,
        targets: Union[Sequence[ArrayLike], ArrayLike, None] = None,
        *,
        node_ids: Optional[Sequence[ArrayLike]] = None,
        num_vertices: Optional[int] = None,
        static_features: bool = False,
        field_levels: Optional[Mapping[str, str]] = None,
        allow_nonfinite: bool = False,
        dtype: Optional[torch.dtype] = torch.float32,
        **extras: Any,
    ) -> None:
        levels = dict(field_levels or {})
        for name, lvl in levels.items():
            if lvl not in FIELD_LEVELS:
                raise SignalValidationError(
                    f"field_levels[{name!r}]", f"is {lvl!r}.", f"use one of {FIELD_LEVELS}."
                )

        # ---- number of snapshots: every per-snapshot input must agree --------
        static_edges = not nz.is_per_snapshot_sequence(edge_indices) and nz.as_tensor(
            edge_indices, "edge_indices"
        ).dim() == 2
        lengths: dict[str, int] = {}
        if not static_edges:
            edge_list = nz.per_snapshot(edge_indices, "edge_indices", None)
            lengths["edge_indices"] = len(edge_list)
        if edge_weights is not None and not (static_edges and not nz.is_per_snapshot_sequence(edge_weights)):
            w_list = nz.per_snapshot(edge_weights, "edge_weights", None)
            lengths["edge_weights"] = len(w_list)
        per_time: dict[str, list[Any]] = {}
        if features is not None and not static_features:
            per_time["x"] = nz.per_snapshot(features, "features", None)
            lengths["features"] = len(per_time["x"])
        if targets is not None:
            per_time["y"] = nz.per_snapshot(targets, "targets", None)
            lengths["targets"] = len(per_time["y"])
        for name, value in extras.items():
            if value is None:
                continue
            if name in ("x", "y", "edge_index", "edge_attr", "edge_weight", "n_id", "num_nodes"):
                raise SignalValidationError(
                    name, "is a reserved attribute name.", "pass it through the named argument instead."
                )
            per_time[name] = nz.per_snapshot(value, name, None)
            lengths[name] = len(per_time[name])
        if node_ids is not None:
            id_list = nz.per_snapshot(node_ids, "node_ids", None)
            lengths["node_ids"] = len(id_list)
        if not lengths:
            raise SignalValidationError(
                "edge_indices",
                "no per-snapshot input was given, so the number of snapshots is unknown.",
                "pass per-snapshot features, targets or edge indices (lists with one entry per snapshot).",
            )
        if len(set(lengths.values())) > 1:
            detail = ", ".join(f"{k}={v}" for k, v in lengths.items())
            majority = max(set(lengths.values()), key=list(lengths.values()).count)
            raise SignalValidationError(
                next(k for k, v in lengths.items() if v != majority),
                f"the inputs disagree on the number of snapshots ({detail}).",
                "give every per-snapshot input exactly one entry per snapshot.",
            )
        T = next(iter(lengths.values()))
        if T == 0:
            raise SignalValidationError(
                next(iter(lengths)), "has zero snapshots.", "a signal needs at least one snapshot."
            )

        # ---- edges -----------------------------------------------------------
        # One [2, E] array with one [E] weight array (or none) is a static graph: stored once
        # (class docstring). With per-snapshot weights the edges are repeated, as each weight is its own.
        stored_once = static_edges and (edge_weights is None or not nz.is_per_snapshot_sequence(edge_weights))
        if static_edges:
            ei, _ = nz.stack_edge_indices([edge_indices], "edge_indices")
            edge_list = ei if stored_once else ei * T
        edge_tensors, edge_counts = nz.stack_edge_indices(edge_list, "edge_indices")
        if stored_once:
            edge_counts = edge_counts.expand(T).clone()
        edge_ptr = ptr_from_counts(edge_counts)
        weight: Optional[Tensor] = None
        if edge_weights is not None:
            if stored_once:
                w_list = [edge_weights]
            for t, w in enumerate(w_list):
                if w is not None and nz.as_tensor(w, f"edge_weights[{t}]").dim() > 1:
                    raise SignalValidationError(
                        f"edge_weights[{t}]",
                        f"must be 1-D [num_edges] but has shape {list(nz.as_tensor(w, 'w').shape)}.",
                        "pass one scalar weight per edge; put multi-dimensional edge features in an extra.",
                    )
            if all(w is None for w in w_list):
                weight = None
            else:
                weight = nz.to_float(
                    nz.concat_rows(w_list, "edge_weights", edge_counts[:len(w_list)], "edges"), "edge_weights", dtype
                )

        # ---- vertex sets -----------------------------------------------------
        if node_ids is not None:
            ids = [nz.to_index(nz.as_tensor(v, f"node_ids[{t}]"), f"node_ids[{t}]").reshape(-1) for t, v in enumerate(id_list)]
            node_counts = torch.tensor([v.numel() for v in ids], dtype=torch.long)
            node_id = torch.cat(ids)
        else:  # rows 0 .. |V_t|-1: implicit (class docstring)
            node_counts = self._infer_node_counts(per_time, levels, edge_tensors, num_vertices, T)
            node_id = None
        node_ptr = ptr_from_counts(node_counts)

        # ---- fields ----------------------------------------------------------
        fields: dict[str, SnapshotField] = {}
        if features is not None and static_features:
            x0 = nz.as_tensor(features, "features")
            if x0.dim() == 1:
                x0 = x0.unsqueeze(-1)
            per_time["x"] = [x0] * T
        for name, parts in per_time.items():
            display = {"x": "features", "y": "targets"}.get(name, name)
            if all(p is None for p in parts):
                continue
            level = levels.get(name) or self._infer_level(name, parts, node_counts, edge_counts)
            fields[name] = self._build_field(
                display, name, parts, level, node_counts, edge_counts, dtype
            )

        if stored_once:
            self._set_storage(node_id, node_ptr, edge_tensors[0], None, weight, fields, num_vertices)
        else:
            self._set_storage(node_id, node_ptr, torch.cat(edge_tensors, dim=1) if edge_tensors else torch.empty(2, 0, dtype=torch.long),
                              edge_ptr, weight, fields, num_vertices)
        self.validate(allow_nonfinite=allow_nonfinite)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _infer_node_counts(
        per_time: dict[str, list[Any]],
        levels: Mapping[str, str],
        edge_tensors: list[Tensor],
        num_vertices: Optional[int],
        T: int,
    ) -> Tensor:
        # The first node-level field defines |V_t|; else num_vertices; else max id + 1.
        for name in ["x", "y"] + [k for k in per_time if k not in ("x", "y")]:
            if name not in per_time or levels.get(name, "node") != "node" or "index" in name:
                continue
            parts = per_time[name]
            if any(p is None for p in parts):
                continue
            rows = []
            display = {"x": "features", "y": "targets"}.get(name, name)
            for t, p in enumerate(parts):
                v = nz.as_tensor(p, f"{display}[{t}]")
                rows.append(v.shape[0] if v.dim() > 0 else 1)
            if name in ("x", "y") or num_vertices is None:
                return torch.tensor(rows, dtype=torch.long)
        if num_vertices is None:
            num_vertices = max((int(e.max()) + 1 for e in edge_tensors if e.numel() > 0), default=0)
        return torch.full((T,), int(num_vertices), dtype=torch.long)

    @staticmethod
    def _infer_level(name: str, parts: list[Any], node_counts: Tensor, edge_counts: Tensor) -> str:
        if name in ("x", "y"):
            return "node"
        if "index" in name:
            return "ragged"
        rows = []
        shapes = set()
        for t, p in enumerate(parts):
            v = nz.as_tensor(p, f"{name}[{t}]")
            rows.append(v.shape[0] if v.dim() > 0 else -1)
            shapes.add(tuple(v.shape))
        r = torch.tensor(rows)
        if torch.equal(r, node_counts):
            return "node"
        if torch.equal(r, edge_counts):
            return "edge"
        if len(shapes) == 1:
            return "graph"
        return "ragged"

    @staticmethod
    def _build_field(
        display: str,
        name: str,
        parts: list[Any],
        level: str,
        node_counts: Tensor,
        edge_counts: Tensor,
        dtype: Optional[torch.dtype],
    ) -> SnapshotField:
        convert = nz.to_float if name == "x" else nz.to_value
        if level in ("node", "edge"):
            expected = node_counts if level == "node" else edge_counts
            what = "vertices" if level == "node" else "edges"
            values = nz.concat_rows(parts, display, expected, what)
            return SnapshotField(level, convert(values, display, dtype))  # type: ignore[arg-type]
        if level == "graph":
            tensors = [nz.as_tensor(p, f"{display}[{t}]") for t, p in enumerate(parts)]
            shape = tensors[0].shape
            for t, v in enumerate(tensors):
                if v.shape != shape:
                    raise SignalValidationError(
                        f"{display}[{t}]",
                        f"has shape {list(v.shape)} but snapshot 0 has {list(shape)}.",
                        "graph-level attributes need the same shape in every snapshot; use level 'ragged' otherwise.",
                    )
            return SnapshotField("graph", convert(torch.stack(tensors), display, dtype))
        cat_dim = default_cat_dim(name)
        tensors = []
        for t, p in enumerate(parts):
            v = nz.as_tensor(p, f"{display}[{t}]")
            if v.dim() == 0:
                v = v.reshape(1)
            if cat_dim == 1 and (v.dim() != 2):
                if v.numel() == 0:
                    v = v.reshape(2, 0)
                else:
                    raise SignalValidationError(
                        f"{display}[{t}]", f"must be [2, L] but has shape {list(v.shape)}.", "pass a [2, L] array."
                    )
            tensors.append(v)
        counts = torch.tensor([v.shape[cat_dim] for v in tensors], dtype=torch.long)
        values = torch.cat(tensors, dim=cat_dim)
        if cat_dim == 1:
            values = nz.to_index(values, display)
        else:
            values = convert(values, display, dtype)
        return SnapshotField("ragged", values, ptr_from_counts(counts), cat_dim)  # type: ignore[arg-type]

    @classmethod
    def from_storage(
        cls,
        node_id: Optional[Tensor],
        node_ptr: Tensor,
        edge_index: Tensor,
        edge_ptr: Optional[Tensor],
        edge_weight: Optional[Tensor],
        fields: dict[str, SnapshotField],
        num_vertices: Optional[int],
    ) -> "DynamicGraphSignal":
        """A signal over storage that is already in the packed layout (gid rows,
        ``node_ptr`` / ``edge_ptr`` per snapshot, local edge ids): no copy and
        no validation -- call :meth:`validate` when the storage comes from
        outside (a file). ``edge_ptr=None``: ``edge_index`` ``[2, E]`` and
        ``edge_weight`` ``[E]`` are a static graph's one edge list, shared by
        every snapshot (stored once, class docstring). ``node_id=None``: each
        snapshot's rows are the vertices ``0 .. |V_t|-1`` (implicit ids)."""
        obj = cls.__new__(cls)
        obj._set_storage(node_id, node_ptr, edge_index, edge_ptr, edge_weight, fields, num_vertices)
        return obj

    def _set_storage(
        self,
        node_id: Optional[Tensor],
        node_ptr: Tensor,
        edge_index: Tensor,
        edge_ptr: Optional[Tensor],
        edge_weight: Optional[Tensor],
        fields: dict[str, SnapshotField],
        num_vertices: Optional[int],
    ) -> None:
        self.node_ptr = node_ptr
        #: the vertex of each row, or (``_local_ids``) its build on demand of the implicit ids ``0 .. |V_t|-1``
        self._node_id: Optional[Tensor] = node_id
        self._local_ids = node_id is None
        #: the concatenated edges: the storage (edges per snapshot), or a static graph's expansions (built on demand)
        self._edge_index: Optional[Tensor] = None
        self._edge_ptr: Optional[Tensor] = None
        self._edge_weight: Optional[Tensor] = None
        #: a static graph's one list (``None``: edges per snapshot)
        self._static_ei: Optional[Tensor] = None
        self._static_ew: Optional[Tensor] = None
        #: per expansion (``"index"``, ``"weight"``, ``"node"``): the versions of the one list and of the expansion when it was
        #: built, to tell an edit of either (:meth:`_settle`)
        self._expanded_at: dict[str, tuple[int, int]] = {}
        if edge_ptr is None:  # a static graph: one edge list; the concatenated form is derived on demand
            self._static_ei, self._static_ew = edge_index, edge_weight
        else:
            self._edge_index, self._edge_ptr, self._edge_weight = edge_index, edge_ptr, edge_weight
        self.fields = fields
        if num_vertices is None:
            if node_id is None:
                num_vertices = int(self.nodes_per_snapshot.max()) if node_ptr.numel() > 1 else 0
            else:
                num_vertices = int(node_id.max()) + 1 if node_id.numel() > 0 else 0
        self.num_vertices = int(num_vertices)
        self._supergraph = None

    # ------------------------------------------------------------- fast path
    @classmethod
    def from_tensors(
        cls,
        *,
        node_ptr: Tensor,
        edge_index: Tensor,
        edge_ptr: Optional[Tensor] = None,
        node_id: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
        x: Optional[Tensor] = None,
        y: Optional[Tensor] = None,
        fields: Optional[Mapping[str, SnapshotField]] = None,
        num_vertices: Optional[int] = None,
        allow_nonfinite: bool = False,
    ) -> "DynamicGraphSignal":
        r"""Build a signal directly from concatenated tensors (no per-snapshot
        lists; used by loaders and the synthetic generator at scale).

        Args:
            node_ptr: ``[T+1]`` offsets of each snapshot's vertex-time nodes.
            edge_index: ``[2, E]`` local row indices, snapshots concatenated;
                with ``edge_ptr=None`` the one edge list of every snapshot (a
                static graph, stored once).
            edge_ptr: ``[T+1]`` offsets of each snapshot's edges, or ``None``
                for a static graph.
            node_id: ``[N]`` global vertex ids (default: ``0..|V_t|-1`` per
                snapshot, implicit: :attr:`local_ids`).
            edge_weight: ``[E]`` (matching ``edge_index``) or ``None``.
            x, y: node-level ``[N, ...]`` tensors, or ``None``.
            fields: further :class:`SnapshotField` attributes.

        The result is validated exactly like the list constructor.
        """
        node_ptr = nz.to_index(nz.as_tensor(node_ptr, "node_ptr"), "node_ptr")
        edge_index = nz.to_index(nz.as_tensor(edge_index, "edge_index"), "edge_index")
        if node_ptr.dim() != 1 or node_ptr.numel() < 2:
            raise SignalValidationError("node_ptr", "must be [T+1] with T >= 1.", "pass snapshot offsets starting at 0.")
        static = edge_ptr is None
        if static:  # checked here, never stored (edge_ptr of a static graph is derived)
            edge_ptr = (torch.arange(node_ptr.numel(), device=node_ptr.device) * (
                edge_index.shape[-1] if edge_index.dim() == 2 else 0))
        edge_ptr = nz.to_index(nz.as_tensor(edge_ptr, "edge_ptr"), "edge_ptr")
        if edge_ptr.shape != node_ptr.shape:
            raise SignalValidationError(
                "edge_ptr",
                f"has {edge_ptr.numel() - 1} snapshots but node_ptr has {node_ptr.numel() - 1}.",
                "give both offset arrays T+1 entries.",
            )
        for name, ptr, total in (("node_ptr", node_ptr, None), ("edge_ptr", edge_ptr, None if static else edge_index.shape[-1])):
            if int(ptr[0]) != 0 or bool((ptr[1:] < ptr[:-1]).any()):
                raise SignalValidationError(name, "must start at 0 and be non-decreasing.", "build it as a cumulative sum of counts.")
            if total is not None and int(ptr[-1]) != total:
                raise SignalValidationError(name, f"ends at {int(ptr[-1])} but there are {total} entries.", "make its last entry the total count.")
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise SignalValidationError("edge_index", f"must be [2, E] but has shape {list(edge_index.shape)}.", "pass a [2, E] tensor.")
        if node_id is not None:  # None: rows 0 .. |V_t|-1 of every snapshot, implicit
            node_id = nz.to_index(nz.as_tensor(node_id, "node_id"), "node_id")
        if node_id is not None and node_id.numel() != int(node_ptr[-1]):
            raise SignalValidationError("node_id", f"has {node_id.numel()} entries but node_ptr ends at {int(node_ptr[-1])}.", "give one id per vertex-time node.")
        all_fields: dict[str, SnapshotField] = {}
        if x is not None:
            all_fields["x"] = SnapshotField("node", nz.to_float(x, "x", None))
        if y is not None:
            all_fields["y"] = SnapshotField("node", nz.to_value(y, "y", None))
        all_fields.update(fields or {})
        obj = cls.from_storage(
            node_id, node_ptr, edge_index, None if static else edge_ptr,
            None if edge_weight is None else nz.to_float(edge_weight, "edge_weight", None),
            all_fields, num_vertices,
        )
        obj.validate(allow_nonfinite=allow_nonfinite)
        return obj

    # -------------------------------------------------------------- validation
    def validate(self, allow_nonfinite: bool = False) -> None:
        """Check every invariant with tensor operations; raise
        :class:`SignalValidationError` naming the first violation."""
        T = self.num_snapshots
        node_counts = self.nodes_per_snapshot
        edge_counts = self.edges_per_snapshot
        N = int(self.node_ptr[-1])
        if self.local_ids:  # ids 0 .. |V_t|-1: distinct, non-negative; the largest must fit num_vertices
            hi = int(node_counts.max()) - 1 if T else -1
            if hi >= self.num_vertices:
                raise SignalValidationError(
                    "num_vertices", f"is {self.num_vertices} but a vertex id {hi} occurs.", "raise num_vertices or remap the ids."
                )
        elif self.node_id.numel() != N:
            raise SignalValidationError("node_ids", f"has {self.node_id.numel()} entries for {N} vertex-time nodes.", "give one id per row.")
        if N > 0 and not self.local_ids:
            lo = int(self.node_id.min())
            if lo < 0:
                snap = self._snapshot_of(self.node_ptr, int((self.node_id < 0).nonzero()[0]))
                raise SignalValidationError(f"node_ids[{snap}]", f"contains negative vertex id {lo}.", "use ids in 0 .. num_vertices-1.")
            hi = int(self.node_id.max())
            if hi >= self.num_vertices:
                raise SignalValidationError(
                    "num_vertices", f"is {self.num_vertices} but a vertex id {hi} occurs.", "raise num_vertices or remap the ids."
                )
            # duplicates inside one snapshot: sort (t, id) keys and compare neighbours, a bounded chunk of
            # snapshots at a time (duplicates never span snapshots; chunks in time order find the first one)
            V = max(self.num_vertices, 1)
            for lo_t, hi_t in _snapshot_chunks(self.node_ptr):
                a, b = int(self.node_ptr[lo_t]), int(self.node_ptr[hi_t])
                t_of = torch.repeat_interleave(torch.arange(lo_t, hi_t, device=self.node_id.device),
                                               node_counts[lo_t:hi_t], output_size=b - a)
                skey, _ = torch.sort(t_of * V + self.node_id[a:b])
                dup = (skey[1:] == skey[:-1]).nonzero()
                if dup.numel() > 0:
                    snap, vid = divmod(int(skey[int(dup[0])]), V)
                    raise SignalValidationError(
                        f"node_ids[{snap}]", f"lists vertex {vid} more than once.", "each vertex may appear once per snapshot; merge the duplicates."
                    )
        E = self.num_edges
        if self.static_edge_index is not None:
            self._validate_static_edges(node_counts, allow_nonfinite)
        elif E > 0:
            neg = (self.edge_index < 0).any(dim=0)
            if bool(neg.any()):
                e = int(neg.nonzero()[0])
                snap = self._snapshot_of(self.edge_ptr, e)
                raise SignalValidationError(
                    f"edge_indices[{snap}]", f"contains a negative node index ({int(self.edge_index[:, e].min())}).", "edge indices are rows 0 .. |V_t|-1 of the snapshot."
                )
            limit = torch.repeat_interleave(node_counts, edge_counts, output_size=E)
            over = (self.edge_index >= limit.unsqueeze(0)).any(dim=0)
            if bool(over.any()):
                e = int(over.nonzero()[0])
                snap = self._snapshot_of(self.edge_ptr, e)
                raise SignalValidationError(
                    f"edge_indices[{snap}]",
                    f"refers to node row {int(self.edge_index[:, e].max())} but snapshot {snap} has only {int(node_counts[snap])} vertices.",
                    "edge indices are local rows of the snapshot (0 .. |V_t|-1); pass node_ids/features covering every endpoint.",
                )
        if self.static_edge_index is None and self.edge_weight is not None:
            if self.edge_weight.dim() != 1 or self.edge_weight.numel() != E:
                raise SignalValidationError("edge_weights", f"has shape {list(self.edge_weight.shape)} for {E} edges.", "give one weight per edge.")
            nz.check_finite(self.edge_weight, "edge_weights", self.edge_ptr, allow_nonfinite)
        for name, f in self.fields.items():
            display = {"x": "features", "y": "targets"}.get(name, name)
            if f.level == "node" and f.values.shape[0] != N:
                raise SignalValidationError(display, f"has {f.values.shape[0]} rows for {N} vertex-time nodes.", "give one row per vertex per snapshot.")
            if f.level == "edge" and f.values.shape[0] != E:
                raise SignalValidationError(display, f"has {f.values.shape[0]} rows for {E} edges.", "give one row per edge.")
            if f.level == "graph" and f.values.shape[0] != T:
                raise SignalValidationError(display, f"has {f.values.shape[0]} entries for {T} snapshots.", "give one entry per snapshot.")
            if f.level == "ragged" and (f.ptr is None or f.ptr.numel() != T + 1):
                raise SignalValidationError(display, "needs a [T+1] ptr.", "build it from per-snapshot counts.")
            ptr = self.node_ptr if f.level == "node" else self.edge_ptr if f.level == "edge" else None
            nz.check_finite(f.values, display, ptr, allow_nonfinite)
            if f.level == "ragged" and f.cat_dim == 1 and f.values.numel() > 0:
                # *_index attributes index local node rows, like edge_index
                L = f.values.shape[1]
                counts = f.ptr[1:] - f.ptr[:-1]
                limit = torch.repeat_interleave(node_counts, counts, output_size=L)
                bad = ((f.values < 0) | (f.values >= limit.unsqueeze(0))).any(dim=0)
                if bool(bad.any()):
                    snap = self._snapshot_of(f.ptr, int(bad.nonzero()[0]))
                    raise SignalValidationError(f"{name}[{snap}]", "holds node rows outside 0 .. |V_t|-1.", "index the snapshot's own rows.")

    def _validate_static_edges(self, node_counts: Tensor, allow_nonfinite: bool) -> None:
        """:meth:`validate` of a static graph's one edge list: the checks of
        the per-snapshot form, on ``[2, E]`` (an index fits every snapshot
        when it fits the smallest one), with the same messages."""
        ei, w = self.static_edge_index, self.static_edge_weight
        assert ei is not None
        if ei.dim() != 2 or ei.shape[0] != 2:
            raise SignalValidationError("edge_indices", f"must have shape [2, num_edges] but has shape {list(ei.shape)}.",
                                        "pass a [2, num_edges] array.")
        E = int(ei.shape[1])
        if E > 0:
            lo, hi = int(ei.min()), int(ei.max())
            if lo < 0:
                raise SignalValidationError(
                    "edge_indices[0]", f"contains a negative node index ({lo}).", "edge indices are rows 0 .. |V_t|-1 of the snapshot."
                )
            short = (node_counts <= hi).nonzero()
            if short.numel() > 0:
                snap = int(short[0])
                raise SignalValidationError(
                    f"edge_indices[{snap}]",
                    f"refers to node row {hi} but snapshot {snap} has only {int(node_counts[snap])} vertices.",
                    "edge indices are local rows of the snapshot (0 .. |V_t|-1); pass node_ids/features covering every endpoint.",
                )
        if w is not None:
            if w.dim() != 1 or w.numel() != E:
                raise SignalValidationError("edge_weights", f"has shape {list(w.shape)} for {E} edges.", "give one weight per edge.")
            nz.check_finite(w, "edge_weights", None, allow_nonfinite)

    @staticmethod
    def _snapshot_of(ptr: Tensor, pos: int) -> int:
        return int(torch.searchsorted(ptr, torch.tensor(pos, device=ptr.device), right=True)) - 1

    # ------------------------------------------------------------ properties
    @property
    def num_snapshots(self) -> int:
        """Number of snapshots :math:`T`."""
        return self.node_ptr.numel() - 1

    @property
    def snapshot_count(self) -> int:
        """Alias of :attr:`num_snapshots` (PyGT's name)."""
        return self.num_snapshots

    @property
    def num_vertex_time_nodes(self) -> int:
        r""":math:`\sum_t |V_t|`."""
        return int(self.node_ptr[-1])

    @property
    def num_edges(self) -> int:
        r""":math:`\sum_t |E_t|` (spatial edges; :math:`T E` for a static graph)."""
        if self._static_ei is not None:
            return self.num_snapshots * int(self._static_ei.shape[1])
        return int(self._edge_ptr[-1])  # type: ignore[index]

    def storage_bytes(self) -> int:
        """Bytes of the distinct tensor storages the signal holds: vertex
        ids, offsets, edges (the one list, and any expansion built) and
        fields; a storage shared by several tensors (``x`` and ``y`` as views
        of one series) counts once."""
        seen: dict[int, int] = {}
        tensors = [self.node_ptr, self._node_id, self._edge_index, self._edge_ptr, self._edge_weight,
                   self._static_ei, self._static_ew]
        for f in self.fields.values():
            tensors += [f.values, f.ptr]
        for t in tensors:
            if t is not None:
                st = t.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    # ------------------------------------------------------------ vertex ids
    @property
    def local_ids(self) -> bool:
        """Whether each snapshot's rows are the vertices ``0 .. |V_t|-1`` in
        order, held implicitly (class docstring)."""
        self._settle()
        return self._local_ids

    @property
    def node_id(self) -> Tensor:
        """``[N]`` global vertex id of each vertex-time row; implicit local ids
        are built at the first access and kept (:attr:`local_ids`)."""
        self._settle()
        if self._node_id is None:
            self._node_id = _local_ids(self.node_ptr)
            self._expanded_at["node"] = (0, self._node_id._version)
        return self._node_id

    @node_id.setter
    def node_id(self, value: Tensor) -> None:
        self._node_id, self._local_ids = value, False
        self._expanded_at.pop("node", None)

    def _stored_ids(self) -> Optional[Tensor]:
        """The ids as stored: ``None`` for implicit local ids."""
        return None if self.local_ids else self._node_id

    def _ids_for_reading(self) -> Tensor:
        """The ids, built anew (not kept) where implicit."""
        return self._node_id if not self.local_ids or self._node_id is not None else _local_ids(self.node_ptr)

    def _detect_local_ids(self) -> None:
        """Make explicit ids that are ``0 .. |V_t|-1`` in every snapshot
        implicit (compared a bounded chunk of snapshots at a time)."""
        if self.local_ids:
            return
        ids, ptr = self._node_id, self.node_ptr
        assert ids is not None
        for lo, hi in _snapshot_chunks(ptr):
            a, b = int(ptr[lo]), int(ptr[hi])
            if not torch.equal(ids[a:b], _local_ids(ptr[lo:hi + 1]).to(ids.device)):
                return
        self._node_id, self._local_ids = None, True

    # ------------------------------------------------------------ edges
    @property
    def static_edge_index(self) -> Optional[Tensor]:
        """A static graph's one edge list ``[2, E]`` (local rows, shared by
        every snapshot); ``None`` when the edges are stored per snapshot."""
        self._settle()
        return self._static_ei

    @property
    def static_edge_weight(self) -> Optional[Tensor]:
        """A static graph's one weight vector ``[E]`` (``None``: unweighted, or
        edges stored per snapshot)."""
        self._settle()
        return self._static_ew

    @property
    def is_static(self) -> bool:
        """Whether the edges are one list shared by every snapshot, stored once
        (:attr:`static_edge_index`; class docstring)."""
        return self.static_edge_index is not None

    @property
    def weighted(self) -> bool:
        """Whether the edges carry weights (asks nothing of the storage: use it
        rather than ``edge_weight is not None``, which expands a static graph's
        weights)."""
        if self._static_ei is not None:
            return self._static_ew is not None
        return self._edge_weight is not None

    @property
    def edges_expanded(self) -> bool:
        """Whether a static graph's concatenated :attr:`edge_index` or
        :attr:`edge_weight` (:math:`T` copies) has been built and is held;
        always ``False`` for edges stored per snapshot."""
        return self.is_static and (self._edge_index is not None or self._edge_weight is not None)

    def _settle(self) -> None:
        """Reconcile a static graph with its expansions: an expansion edited in
        place becomes the storage (edges per snapshot); an expansion whose one
        list was edited since is dropped (rebuilt on demand)."""
        if not self._expanded_at:
            return
        at = self._expanded_at.get("node")
        if at is not None and self._node_id is not None and self._node_id._version != at[1]:
            self._local_ids = False  # the implicit ids' expansion was edited: explicit ids from now on
            del self._expanded_at["node"]
        if self._static_ei is None:
            return
        current = {"index": (self._static_ei, self._edge_index), "weight": (self._static_ew, self._edge_weight)}
        for key, (one, exp) in current.items():
            at = self._expanded_at.get(key)
            if at is None or exp is None or one is None:
                continue
            if exp._version != at[1]:  # the expansion was edited: it is the truth now
                self._to_per_snapshot()
                return
        for key, (one, exp) in current.items():
            at = self._expanded_at.get(key)
            if at is not None and one is not None and one._version != at[0]:  # the one list was edited
                if key == "index":
                    self._edge_index = None
                else:
                    self._edge_weight = None
                del self._expanded_at[key]

    @property
    def edge_ptr(self) -> Tensor:
        """``[T+1]`` offsets of each snapshot's edges in :attr:`edge_index`
        (:math:`t E` for a static graph: computed, kept, never saved)."""
        if self._edge_ptr is None:
            ei = self._static_ei
            assert ei is not None
            self._edge_ptr = torch.arange(self.num_snapshots + 1, device=self.node_ptr.device) * int(ei.shape[1])
        return self._edge_ptr

    @edge_ptr.setter
    def edge_ptr(self, value: Tensor) -> None:
        self._to_per_snapshot()
        self._edge_ptr = value

    @property
    def edge_index(self) -> Tensor:
        """``[2, sum_t E_t]`` local row indices, snapshots concatenated. A static
        graph's is its one list tiled :math:`T` times, built at the first
        access and kept (the hot paths -- snapshots, slicing, windows, save,
        the supergraph -- never ask for it; class docstring)."""
        self._settle()
        if self._edge_index is None:
            ei = self._static_ei
            assert ei is not None
            self._edge_index = ei.repeat(1, self.num_snapshots)
            self._expanded_at["index"] = (ei._version, self._edge_index._version)
        return self._edge_index

    @edge_index.setter
    def edge_index(self, value: Tensor) -> None:
        # the concatenated form given: edges per snapshot from now on
        self._to_per_snapshot()
        self._edge_index = value

    @property
    def edge_weight(self) -> Optional[Tensor]:
        """``[sum_t E_t]`` edge weights or ``None``; a static graph's is tiled
        :math:`T` times at the first access, as :attr:`edge_index` (to ask
        whether there are weights, read :attr:`weighted`)."""
        self._settle()
        if self._static_ei is None or self._static_ew is None:
            return self._edge_weight
        if self._edge_weight is None:
            w = self._static_ew
            self._edge_weight = w.repeat(self.num_snapshots)
            self._expanded_at["weight"] = (w._version, self._edge_weight._version)
        return self._edge_weight

    @edge_weight.setter
    def edge_weight(self, value: Optional[Tensor]) -> None:
        self._to_per_snapshot()
        self._edge_weight = value

    def _to_per_snapshot(self) -> None:
        """Store the edges per snapshot (the expansions, built where missing),
        forgetting the one list."""
        if self._static_ei is None:
            return
        T = self.num_snapshots
        ei = self._edge_index if self._edge_index is not None else self._static_ei.repeat(1, T)
        w = self._edge_weight
        if w is None and self._static_ew is not None:
            w = self._static_ew.repeat(T)
        ptr = self.edge_ptr
        self._static_ei = self._static_ew = None
        self._expanded_at = {k: v for k, v in self._expanded_at.items() if k == "node"}
        self._edge_index, self._edge_ptr, self._edge_weight = ei, ptr, w
        self._supergraph = None

    def snapshot_edges(self, t: int) -> tuple[Tensor, Optional[Tensor]]:
        """``(edge_index [2, E_t], edge_weight [E_t] or None)`` of snapshot
        ``t`` (non-negative): views of the storage; a static graph's one list
        (the same tensors for every ``t``, never expanded)."""
        if self.static_edge_index is not None:
            return self.static_edge_index, self.static_edge_weight
        ptr = self._edge_ptr
        assert ptr is not None
        a, b = int(ptr[t]), int(ptr[t + 1])
        w = self._edge_weight
        return self._edge_index[:, a:b], None if w is None else w[a:b]  # type: ignore[index]

    def expand_edges(self) -> tuple[Tensor, Tensor, Optional[Tensor]]:
        """``(edge_index [2, sum E_t], edge_ptr [T+1], edge_weight or None)``,
        the concatenated form, without keeping it: a static graph's is built
        anew (for a reader that makes its own tensor of it anyway), per-snapshot
        edges are returned as stored."""
        one = self.static_edge_index  # settles first
        if one is None:
            return self._edge_index, self._edge_ptr, self._edge_weight  # type: ignore[return-value]
        ei = self._edge_index if self._edge_index is not None else one.repeat(1, self.num_snapshots)
        w = self._static_ew
        if w is not None:
            w = self._edge_weight if self._edge_weight is not None else w.repeat(self.num_snapshots)
        return ei, self.edge_ptr, w

    def has_same_edges(self) -> bool:
        """Whether every snapshot has the same edges and weights: ``True`` at
        once for a static graph; else compared a chunk of snapshots at a time
        (no :math:`T \times E` temporary)."""
        if self.static_edge_index is not None:
            return True
        ec = self.edges_per_snapshot
        if not bool((ec == ec[0]).all()):
            return False
        E, T = int(ec[0]), self.num_snapshots
        ei = self.edge_index.view(2, T, E)
        ew = None if self.edge_weight is None else self.edge_weight.view(T, E)
        c = max(1, (1 << 22) // max(1, E))  # snapshots per comparison
        for t in range(0, T, c):
            if not bool((ei[:, t:t + c] == ei[:, :1]).all()):
                return False
            if ew is not None and not bool((ew[t:t + c] == ew[:1]).all()):
                return False
        return True

    @property
    def nodes_per_snapshot(self) -> Tensor:
        """``[T]`` number of vertices present in each snapshot."""
        return self.node_ptr[1:] - self.node_ptr[:-1]

    @property
    def edges_per_snapshot(self) -> Tensor:
        """``[T]`` number of edges of each snapshot."""
        ptr = self.edge_ptr
        return ptr[1:] - ptr[:-1]

    @property
    def x(self) -> Optional[Tensor]:
        """Concatenated features (``[N, F]`` for node-level features) or ``None``."""
        f = self.fields.get("x")
        return None if f is None else f.values

    @property
    def y(self) -> Optional[Tensor]:
        """Concatenated targets or ``None``."""
        f = self.fields.get("y")
        return None if f is None else f.values

    @property
    def num_node_features(self) -> int:
        x = self.fields.get("x")
        if x is None:
            return 0
        return 1 if x.values.dim() == 1 else int(x.values.shape[-1])

    @property
    def device(self) -> torch.device:
        return self.node_ptr.device

    @property
    def extra_keys(self) -> list[str]:
        """Names of the extra attributes (everything but ``x`` and ``y``)."""
        return [k for k in self.fields if k not in ("x", "y")]

    # ------------------------------------------------------------ snapshots
    def __len__(self) -> int:
        return self.num_snapshots

    def _field_at(self, f: SnapshotField, t: int) -> Tensor:
        if f.level == "node":
            a, b = int(self.node_ptr[t]), int(self.node_ptr[t + 1])
            return f.values[a:b]
        if f.level == "edge":
            a, b = int(self.edge_ptr[t]), int(self.edge_ptr[t + 1])
            return f.values[a:b]
        if f.level == "graph":
            return f.values[t]
        assert f.ptr is not None
        a, b = int(f.ptr[t]), int(f.ptr[t + 1])
        return f.values.narrow(f.cat_dim, a, b - a)

    def snapshot(self, t: int) -> Data:
        """Snapshot ``t`` as a PyG :class:`~torch_geometric.data.Data`."""
        T = self.num_snapshots
        if t < 0:
            t += T
        if not 0 <= t < T:
            raise IndexError(f"snapshot index {t} out of range for a signal of {T} snapshots")
        n0, n1 = int(self.node_ptr[t]), int(self.node_ptr[t + 1])
        ei, w = self.snapshot_edges(t)
        attrs: dict[str, Any] = {
            "edge_index": ei,
            "n_id": torch.arange(n1 - n0, device=self.node_ptr.device) if self.local_ids else self._node_id[n0:n1],
        }
        if w is not None:
            attrs["edge_attr"] = w
            attrs["edge_weight"] = w
        for name, f in self.fields.items():
            attrs[name] = self._field_at(f, t)
        if "batch" in self.fields:
            # PyGT's *Batch signals yield Batch objects; keep that type.
            data = Batch(**attrs)
        else:
            data = Data(**attrs)
        data.num_nodes = n1 - n0
        return data

    def __getitem__(self, index: Union[int, slice, Sequence[int], Tensor]) -> Union[Data, "DynamicGraphSignal"]:
        if isinstance(index, (int,)) or (hasattr(index, "__index__") and not isinstance(index, (Tensor, slice))):
            return self.snapshot(int(index))
        if isinstance(index, Tensor) and index.dim() == 0:
            return self.snapshot(int(index))
        if isinstance(index, slice):
            idx = torch.arange(self.num_snapshots)[index]
        else:
            idx = torch.as_tensor(index, dtype=torch.long).reshape(-1)
            idx = torch.where(idx < 0, idx + self.num_snapshots, idx)
            if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= self.num_snapshots):
                raise IndexError(f"snapshot indices out of range for a signal of {self.num_snapshots} snapshots")
        return self.select(idx)

    def __iter__(self) -> Iterator[Data]:
        # A fresh generator per call: nested and concurrent loops are safe.
        for t in range(self.num_snapshots):
            yield self.snapshot(t)

    def select(self, snapshots: Tensor) -> "DynamicGraphSignal":
        """A new signal made of the given snapshots, in the given order
        (vectorized). A static graph's selection is static and shares its one
        edge list (no copy, as PyGT's slices of a static signal)."""
        idx = torch.as_tensor(snapshots, dtype=torch.long, device=self.node_ptr.device).reshape(-1)
        if idx.numel() == 0:
            raise SignalValidationError("snapshots", "selects zero snapshots.", "select at least one snapshot.")
        node_pos, node_ptr = gather_ranges(self.node_ptr, idx)
        node_id = None if self.local_ids else self._node_id[node_pos]  # local ids stay local
        static = self.static_edge_index is not None
        if not static or any(f.level == "edge" for f in self.fields.values()):
            edge_pos, edge_ptr = gather_ranges(self.edge_ptr, idx)
        fields: dict[str, SnapshotField] = {}
        for name, f in self.fields.items():
            if f.level == "node":
                fields[name] = SnapshotField("node", f.values[node_pos])
            elif f.level == "edge":
                fields[name] = SnapshotField("edge", f.values[edge_pos])
            elif f.level == "graph":
                fields[name] = SnapshotField("graph", f.values[idx])
            else:
                assert f.ptr is not None
                pos, ptr = gather_ranges(f.ptr, idx)
                fields[name] = SnapshotField("ragged", f.values.index_select(f.cat_dim, pos), ptr, f.cat_dim)
        if static:
            return self.from_storage(node_id, node_ptr, self.static_edge_index, None,
                                     self.static_edge_weight, fields, self.num_vertices)
        return self.from_storage(
            node_id, node_ptr, self.edge_index[:, edge_pos], edge_ptr,
            None if self.edge_weight is None else self.edge_weight[edge_pos],
            fields, self.num_vertices,
        )

    def sort_edges(self) -> "DynamicGraphSignal":
        """A new signal whose edges are sorted by (target, source) inside each
        snapshot (stable; weights and edge-level fields follow their edges).
        PyGT's DCRNN pairs degree normalizers with edges by position and is
        only local -- splittable across ranks -- on sorted, duplicate-free edges.
        A static graph sorts its one list (and stays static)."""
        if self.static_edge_index is not None:
            return self._sort_static_edges()
        E = self.num_edges
        counts = self.edge_ptr[1:] - self.edge_ptr[:-1]
        t = torch.repeat_interleave(torch.arange(self.num_snapshots, device=self.edge_ptr.device), counts, output_size=E)
        n = int(self.nodes_per_snapshot.max()) + 1 if self.num_snapshots else 1
        perm = torch.sort((t * n + self.edge_index[1]) * n + self.edge_index[0], stable=True).indices
        fields = {name: (SnapshotField("edge", f.values[perm]) if f.level == "edge" else f) for name, f in self.fields.items()}
        return self.from_storage(self._stored_ids(), self.node_ptr, self.edge_index[:, perm], self.edge_ptr,
                                 None if self.edge_weight is None else self.edge_weight[perm], fields, self.num_vertices)

    def _sort_static_edges(self) -> "DynamicGraphSignal":
        ei, w = self.static_edge_index, self.static_edge_weight
        assert ei is not None
        E, T = int(ei.shape[1]), self.num_snapshots
        n = int(self.nodes_per_snapshot.max()) + 1
        perm = torch.sort(ei[1] * n + ei[0], stable=True).indices
        fields = dict(self.fields)
        if any(f.level == "edge" for f in fields.values()):  # per-snapshot edge rows follow the same permutation
            full = (torch.arange(T, device=ei.device).unsqueeze(1) * E + perm.unsqueeze(0)).reshape(-1)
            fields = {name: (SnapshotField("edge", f.values[full]) if f.level == "edge" else f) for name, f in fields.items()}
        return self.from_storage(self._stored_ids(), self.node_ptr, ei[:, perm], None, None if w is None else w[perm],
                                 fields, self.num_vertices)

    def split(
        self, train_ratio: float = 0.8, val_ratio: float = 0.0
    ) -> Union[tuple["DynamicGraphSignal", "DynamicGraphSignal"], tuple["DynamicGraphSignal", "DynamicGraphSignal", "DynamicGraphSignal"]]:
        """Temporal split: the first ``train_ratio`` of the snapshots train, the
        next ``val_ratio`` validate, the rest test. No shuffling (no look-ahead).

        Returns ``(train, test)`` when ``val_ratio == 0`` (like PyGT's
        ``temporal_signal_split``), else ``(train, val, test)``.
        """
        for name, r in (("train_ratio", train_ratio), ("val_ratio", val_ratio)):
            if not 0.0 <= r <= 1.0:
                raise SignalValidationError(name, f"is {r}.", "use a ratio in [0, 1].")
        T = self.num_snapshots
        n_train = int(train_ratio * T)
        n_val = int(val_ratio * T)
        if n_train < 1 or n_train + n_val >= T or (val_ratio > 0 and n_val < 1):
            raise SignalValidationError(
                "train_ratio",
                f"splits {T} snapshots into train={n_train}, val={n_val}, test={T - n_train - n_val}.",
                "choose ratios that leave at least one snapshot in every part.",
            )
        train = self[0:n_train]
        if val_ratio == 0.0:
            return train, self[n_train:]
        return train, self[n_train:n_train + n_val], self[n_train + n_val:]

    def __getstate__(self) -> dict:
        # derived caches are rebuilt on demand: the supergraph holds a weak reference back to the signal, which
        # cannot be pickled (spawn(fn, world_size, signal) after partition(signal, ...))
        self._settle()
        state = dict(self.__dict__)
        state["_supergraph"] = None
        state.pop("_fingerprint", None)
        if state.get("_static_ei") is not None:  # a static graph travels as its one edge list
            state["_edge_index"] = state["_edge_weight"] = state["_edge_ptr"] = None
            state["_expanded_at"] = {k: v for k, v in state["_expanded_at"].items() if k == "node"}
        if state.get("_local_ids"):  # implicit ids travel as nothing
            state["_node_id"] = None
            state["_expanded_at"] = {k: v for k, v in state["_expanded_at"].items() if k != "node"}
        return state

    def __setstate__(self, state: dict) -> None:
        if "edge_index" in state:  # pickled before static graphs were stored once: plain attributes
            state = dict(state)
            state["_edge_index"], state["_edge_ptr"] = state.pop("edge_index"), state.pop("edge_ptr")
            state["_edge_weight"] = state.pop("edge_weight")
            state["_static_ei"] = state["_static_ew"] = None
            state["_expanded_at"] = {}
        if "node_id" in state:
            state = dict(state)
            state["_node_id"], state["_local_ids"] = state.pop("node_id"), False
        self.__dict__.update(state)

    # ------------------------------------------------------------ views
    def supergraph(self) -> "Supergraph":
        """The static graph on vertex-time nodes (cached): see :class:`Supergraph`."""
        if self._supergraph is None:

            self._supergraph = Supergraph.from_signal(self)
        return self._supergraph

    def statistics(self) -> "SignalStatistics":
        """Non-uniformity statistics (DGC §2.2.1): see :class:`SignalStatistics`."""

        return SignalStatistics.from_signal(self)

    # ------------------------------------------------------------ device / io
    def to(self, device: Union[torch.device, str], non_blocking: bool = False) -> "DynamicGraphSignal":
        """A copy of the signal on ``device``."""
        mv = lambda t: None if t is None else t.to(device, non_blocking=non_blocking)  # noqa: E731
        if self.static_edge_index is not None:
            return self.from_storage(
                mv(self._stored_ids()), mv(self.node_ptr), mv(self.static_edge_index), None, mv(self.static_edge_weight),
                {k: f.to(device) for k, f in self.fields.items()}, self.num_vertices,
            )
        return self.from_storage(
            mv(self._stored_ids()), mv(self.node_ptr), mv(self.edge_index), mv(self.edge_ptr), mv(self.edge_weight),
            {k: f.to(device) for k, f in self.fields.items()}, self.num_vertices,
        )

    def fingerprint(self) -> str:
        """SHA-256 of the structure (vertex sets and edges): partitions and plans
        record it to refuse being applied to another graph.

        A static graph hashes the bytes of its concatenated form, streamed from
        the one list (never built): the same graph stored either way has one
        fingerprint, and partitions made before static graphs were stored
        once still match."""
        static = self.static_edge_index is not None
        local = self.local_ids
        edges = self.static_edge_index if static else self.edge_index
        tensors = (self.node_ptr, self.node_ptr if local else self._node_id, self.edge_ptr, edges)
        # cached per storage and in-place version of the structure tensors: a
        # partitioner asks for it several times, hashing costs ~0.1 s per 1M edges
        key = (self.num_snapshots, self.num_vertices, static, local) + tuple(
            (t.data_ptr(), t._version, tuple(t.shape)) for t in tensors)
        cached = getattr(self, "_fingerprint", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        h = hashlib.sha256()
        h.update(f"T={self.num_snapshots};V={self.num_vertices}".encode())
        for i, t in enumerate(tensors[:3]):
            if i == 1 and local:  # the implicit ids' bytes, a bounded chunk of snapshots at a time
                for lo, hi in _snapshot_chunks(self.node_ptr):
                    h.update(_local_ids(self.node_ptr[lo:hi + 1].cpu()).numpy())
                continue
            h.update(t.detach().to("cpu", torch.long).contiguous().numpy())  # the buffer itself: no bytes copy
        if static:
            _hash_tiled(h, edges, self.num_snapshots)
        else:
            h.update(edges.detach().to("cpu", torch.long).contiguous().numpy())
        self._fingerprint = (key, h.hexdigest())
        return self._fingerprint[1]

    def save(self, path: str) -> None:
        """Save in pyg_dynscale's versioned format (tensors only, no pickled objects)."""

        save_signal(self, path)

    @classmethod
    def load(cls, path: str, map_location: Union[str, torch.device, None] = "cpu") -> "DynamicGraphSignal":
        """Load a file written by :meth:`save`."""

        return load_signal(path, map_location=map_location, cls=cls)

    # ------------------------------------------------------------ PyGT interop
    @classmethod
    def from_pygt(cls, signal: Any, **kwargs: Any) -> "DynamicGraphSignal":
        """Convert any non-hetero PyGT signal (duck-typed)."""

        return from_pygt(signal, cls=cls, **kwargs)

    def to_pygt(self, kind: Optional[str] = None) -> Any:
        """Convert to a PyGT signal object (needs the ``pygt`` extra)."""

        return to_pygt(self, kind=kind)

    # ------------------------------------------------------------ misc
    def equals(self, other: "DynamicGraphSignal") -> bool:
        """Exact equality of structure and every field (dtype included)."""
        if not isinstance(other, DynamicGraphSignal):
            return False
        def eq(a: Optional[Tensor], b: Optional[Tensor]) -> bool:
            if a is None or b is None:
                return a is None and b is None
            return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
        if self.num_vertices != other.num_vertices or set(self.fields) != set(other.fields):
            return False
        if not eq(self.node_ptr, other.node_ptr):
            return False
        if not (self.local_ids and other.local_ids) and not eq(self._ids_for_reading(), other._ids_for_reading()):
            return False
        if self.is_static and other.is_static:  # the one lists (same T: node_ptr agreed)
            edges = [(self.static_edge_index, other.static_edge_index),
                     (self.static_edge_weight, other.static_edge_weight)]
        else:  # a static graph equals its expansion (compared on a temporary copy)
            edges = list(zip(self.expand_edges(), other.expand_edges()))
        if not all(eq(a, b) for a, b in edges):
            return False
        for k, f in self.fields.items():
            g = other.fields[k]
            if f.level != g.level or f.cat_dim != g.cat_dim or not eq(f.values, g.values) or not eq(f.ptr, g.ptr):
                return False
        return True

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}[{f.level}]={list(f.values.shape)}" for k, f in self.fields.items())
        return (
            f"{self.__class__.__name__}(snapshots={self.num_snapshots}, vertices={self.num_vertices}, "
            f"vertex_time_nodes={self.num_vertex_time_nodes}, edges={self.num_edges}, "
            f"weighted={self.weighted}{', ' + fields if fields else ''})"
        )


def _local_ids(node_ptr: Tensor) -> Tensor:
    """``[N]`` ids ``0 .. n_t-1`` of every snapshot of ``node_ptr`` (relative to ``node_ptr[0]``)."""
    counts = node_ptr[1:] - node_ptr[:-1]
    T = counts.numel()
    if T and bool((counts == counts[0]).all()):  # one arange tiled: no temporary of the total size
        return torch.arange(int(counts[0]), device=node_ptr.device).repeat(T)
    total = int(node_ptr[-1] - node_ptr[0])
    out = torch.arange(total, device=node_ptr.device)
    return out.sub_(torch.repeat_interleave(node_ptr[:-1] - node_ptr[0], counts, output_size=total))


def _snapshot_chunks(node_ptr: Tensor, rows: int = 1 << 22) -> list[tuple[int, int]]:
    """Consecutive snapshot ranges ``[lo, hi)`` of at most ``rows`` vertex-time
    rows each (or one snapshot, if larger): bounded temporaries."""
    ptr = node_ptr.cpu()
    T = ptr.numel() - 1
    out, lo = [], 0
    while lo < T:
        hi = int(torch.searchsorted(ptr, ptr[lo] + rows, right=True)) - 1
        hi = min(max(hi, lo + 1), T)
        out.append((lo, hi))
        lo = hi
    return out


def _hash_tiled(h: Any, edges: Tensor, T: int) -> None:
    """Feed ``h`` the bytes of ``edges.repeat(1, T)`` (int64, row-major)
    without building it: each row tiled ``T`` times, a bounded block at a time."""
    E = int(edges.shape[1])
    if E == 0 or T == 0:
        return
    c = max(1, min(T, (1 << 22) // E))  # snapshots per block: <= 32 MiB
    for row in edges.detach().to("cpu", torch.long):
        block = row.repeat(c).numpy()
        full, rest = divmod(T, c)
        for _ in range(full):
            h.update(block)
        if rest:
            h.update(block[:rest * E])


def temporal_signal_split(signal: Any, train_ratio: float = 0.8) -> tuple[Any, Any]:
    """Drop-in for PyGT's ``temporal_signal_split`` that works on both
    :class:`DynamicGraphSignal` and PyGT signals (first ``train_ratio`` of the
    snapshots, then the rest)."""
    if isinstance(signal, DynamicGraphSignal):
        return signal.split(train_ratio)  # type: ignore[return-value]
    n = int(train_ratio * signal.snapshot_count)
    return signal[0:n], signal[n:]


