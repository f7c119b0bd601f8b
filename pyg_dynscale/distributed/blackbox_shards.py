r"""Shards of the black-box path: each rank loads its local subgraphs only.

On the black-box path (docs/blackbox.md) rank :math:`r` calls the user's
per-snapshot module on its *local subgraph* of every snapshot :math:`G_t` --
the nodes within :math:`h + 1` hops of the nodes it owns and the edges
between them (:class:`~pyg_dynscale.partition.halo_plan.StatePlan`) -- and
moves state rows with the plan's ``"temporal"`` and ``"spatial"`` exchanges.
:func:`~pyg_dynscale.distributed.write_shards`, given a module in place of
a dependency pattern, stores per rank (:func:`blackbox_set`):

* ``x``: ``[sum_t n_loc(t), ...]`` the features of its local rows, snapshot
  after snapshot (``node_ptr``), and ``edge_index`` ``[2, sum_t e_loc(t)]``
  its local edges in local ids (``edge_ptr``), their weights and the edge
  fields the module reads (LRGCN's ``edge_type``) -- exactly the inputs the
  whole-signal path slices out of the signal;
* the node-level fields (targets) and snapshots of its owned rows :math:`Q_r`;
* its slice of the :class:`StatePlan`
  (:meth:`~pyg_dynscale.partition.halo_plan.StatePlan.rank_state`: its steps'
  routes and its own send / receive lists, with every exchange's whole row
  counts for the predicted traffic).

The plan is built by the same :class:`StatePlan` code as on the whole-signal
path (one implementation of the index logic); the writer runs the module's
probe and halo-depth check on the whole signal, and the shard set records
the module's class, halo depth, state widths and element size, which
:func:`check_blackbox_shard` compares with the trainer's model. A rank's
file is :math:`O(\sum_t n_{loc}(t) \cdot F + e_{loc}(t))`: its part plus its
halo, never the whole signal. Validation, atomic writing and the refusal on
every rank are :mod:`.shards`'.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError, PartitionError, PartitionFormatError, ShardError, UnsupportedModelError
from ..nn.snapshot_model import SnapshotModel
from ..partition.halo_plan import StatePlan
from ..runtime.paths import as_signal, edge_fields_of, prepare_snapshot_model, resolve_model
from .snapshot_engine import check_dcrnn_edge_order

__all__ = ["blackbox_set", "blackbox_shard", "BlackBoxShard", "LocalSignal", "check_blackbox_shard", "module_mismatch"]


class LocalField(NamedTuple):
    """A field of a :class:`LocalSignal` (``values`` and ``level``, as a signal's)."""

    values: Tensor
    level: str


class LocalSignal:
    r"""One rank's local subgraphs as the black-box runner reads a signal:
    snapshot :math:`t`'s rows ``x[node_ptr[t]:node_ptr[t+1]]`` and edges
    ``edge_index[:, edge_ptr[t]:edge_ptr[t+1]]`` (local ids) are the rank's
    local subgraph of :math:`G_t`.

    Args:
        x: ``[sum_t n_loc(t), ...]`` features.
        edge_index: ``[2, sum_t e_loc(t)]``.
        edge_weight: ``[sum_t e_loc(t)]`` or ``None``.
        node_ptr, edge_ptr: ``[T + 1]``.
        fields: edge-level fields by name.
    """

    def __init__(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor], node_ptr: Tensor,
                 edge_ptr: Tensor, fields: dict) -> None:
        self.x, self.edge_index, self.edge_weight = x, edge_index, edge_weight
        self.node_ptr, self.edge_ptr = node_ptr, edge_ptr
        self.fields = {k: LocalField(v, "edge") for k, v in fields.items()}

    @property
    def num_snapshots(self) -> int:
        return self.node_ptr.numel() - 1

    @property
    def nodes_per_snapshot(self) -> Tensor:
        return self.node_ptr[1:] - self.node_ptr[:-1]


@dataclass
class BlackBoxShard:
    r"""One rank's black-box part, read by :func:`~.shards.read_shard`.

    Attributes:
        meta (dict): the shard set's global header.
        rank (int): the rank.
        signal (LocalSignal): its local subgraphs and their inputs.
        plan (StatePlan): its slice of the plan (local steps, own lists).
        Q (Tensor): sorted gids of its owned rows (= :attr:`plan.owned_gids`).
        q_time (Tensor): their snapshots.
        fields (dict): node-level fields (targets) of its owned rows by name.
        probe_fields (dict): one row of each edge field the module reads
            (what its probe calls it with).
        bytes_read (int): bytes of the tensors it holds.
    """

    meta: dict
    rank: int
    signal: LocalSignal
    plan: StatePlan
    Q: Tensor
    q_time: Tensor
    fields: dict
    probe_fields: dict
    bytes_read: int
    pairs: Optional[dict] = None
    path = "blackbox"

    def release_inputs(self) -> None:
        """The runner holds the per-step inputs (views of the same rows): nothing to drop."""


# ---------------------------------------------------------------------- writer
def _module_signature(model: SnapshotModel, bpe: int) -> dict:
    d = model.depth
    return {"model": model.spec.name, "depth": {"x": d.x, "state": list(d.state), "full_nodes": d.full_nodes},
            "widths": list(model.state_widths), "output_shape": list(model.output_shape), "bytes_per_element": bpe}


def _rank_part(signal: Any, plan: StatePlan, edge_fields: tuple, node_fields: dict, probe: dict) -> tuple:
    """Rank ``plan.rank``'s tensors (the module doc) and its plan state."""
    node_ptr, edge_ptr = signal.node_ptr.tolist(), signal.edge_ptr.tolist()
    xs, eis, ws, fs, n_loc, e_loc = [], [], [], {k: [] for k in edge_fields}, [], []
    ew = signal.edge_weight
    for s in plan.steps:  # the rows the whole-signal runner slices out of the signal (SnapshotRunner)
        g0, g1, e0, e1 = node_ptr[s.t], node_ptr[s.t + 1], edge_ptr[s.t], edge_ptr[s.t + 1]
        xs.append(signal.x[g0:g1] if s.nodes is None else signal.x[g0:g1].index_select(0, s.nodes))
        eis.append(s.edge_index)
        if ew is not None:
            ws.append(ew[e0:e1] if s.edges is None else ew[e0:e1].index_select(0, s.edges))
        for k in edge_fields:
            v = signal.fields[k].values[e0:e1]
            fs[k].append(v if s.edges is None else v.index_select(0, s.edges))
        n_loc.append(xs[-1].shape[0])
        e_loc.append(s.edge_index.shape[1])
    Q = plan.owned_gids
    tensors = {
        "x": torch.cat(xs, 0), "edge_index": torch.cat(eis, 1), "edge_weight": torch.cat(ws) if ew is not None else None,
        "node_ptr": torch.tensor([0] + n_loc).cumsum(0), "edge_ptr": torch.tensor([0] + e_loc).cumsum(0),
        "Q": Q, "q_time": signal.supergraph().time.index_select(0, Q),
    }
    for k in edge_fields:
        tensors[f"edge_field.{k}"] = torch.cat(fs[k], 0)
    for k, v in probe.items():
        tensors[f"probe.{k}"] = v
    for name, values in node_fields.items():
        tensors[f"field.{name}"] = values.index_select(0, Q)
    state = plan.rank_state(plan.rank)
    tensors = {k: (v.detach().cpu().contiguous() if isinstance(v, Tensor) else v) for k, v in tensors.items()}
    return tensors, state


def blackbox_set(signal: Any, partition: Any, module: torch.nn.Module, partition_digest: str, *,
                 depth: Any = "auto", bytes_per_element: Optional[int] = None, check: bool = True) -> tuple:
    r"""The black-box shard set of ``partition``, which
    :func:`~pyg_dynscale.distributed.write_shards` (given a per-snapshot
    module) writes with :func:`~.shards.write_set`.

    Args:
        signal: the whole signal, with node features.
        partition: one owner per vertex-time node (the black-box path uses
            ``partition.owner``).
        module: the per-snapshot module the ranks will train (e.g. PyGT's
            ``GConvGRU``; or its :class:`~pyg_dynscale.nn.snapshot_model.SnapshotModel`).
        depth: its halo depth (as ``DistributedTrainer(depth=...)``).
        bytes_per_element: element size of the state rows training moves
            (``None``: that of the module's parameters; 8 for a float64 model).
        check: verify the declared halo depth on the signal
            (:func:`~pyg_dynscale.nn.halo_check.check_halo`) when there are
            several parts.
        partition_digest: the partition's fingerprint (:func:`~.shards.partition_digest`).

    Returns:
        tuple: ``(header, world_size, part)``: ``meta.json``'s header and
        ``part(r) -> (tensors, plan state)`` of rank ``r``.
    """
    signal = as_signal(signal)
    if signal.device.type != "cpu":
        signal = signal.to("cpu")
    if signal.x is None:
        raise ModelInputError("signal.x", "is missing.", "give the signal node features before writing shards.")
    partition.check_signal(signal)
    R = int(partition.num_parts)
    model = resolve_model(module, "blackbox", depth, check)
    if model.spec.global_reason and R > 1:
        raise UnsupportedModelError(f"{model.spec.name} cannot be split across ranks on the black-box path: "
                                    f"{model.spec.global_reason}")
    edge_fields = edge_fields_of(model, signal)
    prepare_snapshot_model(model, signal, check and R > 1, edge_fields)  # the whole-signal path's probe and check
    if R > 1 and model.spec.name == "DCRNN":
        check_dcrnn_edge_order(signal)
    if bytes_per_element is None:
        p = next(iter(module.parameters()), None)
        bytes_per_element = p.element_size() if p is not None else torch.empty(()).element_size()
    bpe = int(bytes_per_element)
    sg = signal.supergraph()
    T = sg.num_snapshots
    # what the trainer's probe is called with: the whole signal's first non-empty snapshot's shape (a module may
    # need its row count) and one row of each edge field
    t0 = int((signal.nodes_per_snapshot > 0).nonzero().flatten()[0])
    e0 = int(signal.edge_ptr[t0])
    probe = {k: signal.fields[k].values[e0:e0 + 1].clone() for k in edge_fields}
    node_fields = {name: f.values for name, f in signal.fields.items() if f.level == "node" and name != "x"}
    header = {
        "path": "blackbox", "world_size": R, "num_nodes": int(sg.num_nodes), "num_snapshots": int(T),
        "num_vertices": int(sg.num_vertices), "num_sequences": int(sg.sequence_vertex.numel()),
        "nodes_per_snapshot": torch.bincount(sg.time, minlength=T).tolist(),
        # as the decomposed header: `pyg-dynscale train --shards` builds the model from meta.json alone
        "num_features": int(signal.x.shape[1]) if signal.x.dim() > 1 else 1,
        "probe_shape": [int(signal.nodes_per_snapshot[t0])] + list(signal.x.shape[1:]),
        "signal": signal.fingerprint(), "partition": partition_digest, "scheme": partition.scheme,
        "two_owners": False, "weighted": signal.edge_weight is not None, "fields": sorted(node_fields),
        "edge_fields": list(edge_fields), "readout_width": None, "num_pairs": 0,
        **_module_signature(model, bpe),
    }
    owner = partition.owner

    def part(r: int) -> tuple:
        plan = StatePlan(signal, owner, R, model.depth, model.state_widths, r, bpe)  # the whole-signal path's plan
        return _rank_part(signal, plan, edge_fields, node_fields, probe)

    return header, R, part


# ---------------------------------------------------------------------- reader
def blackbox_shard(meta: dict, rank: int, body: dict, path: str, remedy: str) -> BlackBoxShard:
    """The :class:`BlackBoxShard` of a checked rank file's ``body`` (:func:`~.shards.read_shard`)."""
    t = body["tensors"]
    try:
        plan = StatePlan.from_rank_state(body["plan"])
        signal = LocalSignal(t["x"], t["edge_index"], t["edge_weight"], t["node_ptr"], t["edge_ptr"],
                             {k: t[f"edge_field.{k}"] for k in meta["edge_fields"]})
        shard = BlackBoxShard(meta, rank, signal, plan, t["Q"], t["q_time"],
                              {name: t[f"field.{name}"] for name in meta["fields"]},
                              {k: t[f"probe.{k}"] for k in meta["edge_fields"]},
                              sum(v.numel() * v.element_size() for v in t.values() if isinstance(v, Tensor)))
    except (KeyError, TypeError, ValueError, PartitionFormatError, PartitionError) as exc:
        raise ShardError(f"{path}: inconsistent shard contents ({type(exc).__name__}: {exc}). {remedy}") from None
    if plan.rank != rank or plan.num_parts != int(meta["world_size"]) or signal.num_snapshots != meta["num_snapshots"]:
        raise ShardError(f"{path}: its plan is rank {plan.rank} of {plan.num_parts}, not rank {rank} of "
                         f"{meta['world_size']}. {remedy}")
    return shard


def module_mismatch(model: SnapshotModel, meta: dict, dtype: torch.dtype,
                    probe_fields: Optional[dict] = None) -> Optional[str]:
    """Probe ``model`` as the whole-signal path does (its state widths) and
    compare it with the module a black-box shard set was cut for: class, halo
    depth, state widths, output shape and the element size of ``dtype`` (the
    plan's rows and bytes depend on all of them).

    Needs only ``meta.json``'s header (``probe_fields``: one row of each edge
    field the module reads, from a rank file; ``None`` when the set has no
    edge fields), so a launcher can check a model before any rank starts.

    Returns:
        ``None`` when it fits, else the differing fields as one line
        (``"depth: shards ..., model ..."``).
    """
    # the probe learns widths from the shape it is given: a module that reads every node (a fixed node count,
    # e.g. EvolveGCN-H) gets the whole signal's first snapshot's, any other a ring of at most 16 nodes (its
    # transient memory stays far below the rank's part)
    shape = list(meta["probe_shape"])
    if not model.depth.full_nodes:
        shape[0] = min(shape[0], 16)
    x_like = torch.zeros(shape, dtype=torch.float32)
    model.probe(x_like, edge_weight=bool(meta["weighted"]), edge_fields=probe_fields or {})
    bpe = torch.empty((), dtype=dtype).element_size()
    mine = _module_signature(model, bpe)
    theirs = {k: meta[k] for k in mine}
    if mine == theirs:
        return None
    return ", ".join(f"{k}: shards {theirs[k]!r}, model {mine[k]!r}" for k in mine if mine[k] != theirs[k])


def check_blackbox_shard(model: SnapshotModel, shard: BlackBoxShard, dtype: torch.dtype) -> None:
    """Probe ``model`` and check it is the module the shards were cut for
    (:func:`module_mismatch`); raises :class:`ShardError` otherwise."""
    diff = module_mismatch(model, shard.meta, dtype, shard.probe_fields)
    if diff is not None:
        raise ShardError(f"the shards were cut for another black-box module or dtype ({diff}). Write the shards "
                         "with write_shards(signal, partition, <this module>, DIR) (bytes_per_element of the "
                         "training dtype).")
