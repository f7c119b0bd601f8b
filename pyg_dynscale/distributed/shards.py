r"""Shards: each rank of a :class:`~pyg_dynscale.distributed.DistributedTrainer`
loads only its part of a partitioned signal.

:func:`write_shards` cuts a signal, its partition and the communication plan
of a dependency pattern into one directory per rank, once (offline, on one
machine that holds the whole signal)::

    DIR/meta.json          global metadata: format tag and version, world size,
                           N, T, vertices, sequences, nodes per snapshot, the
                           pattern, the fingerprints, each rank file's SHA-256
    DIR/rank-<r>/shard.pt  rank r's part (torch.save of tensors and plain types)

Rank :math:`r`'s file holds, with :math:`S_r` its structure set (owned rows
and their halo) and :math:`Q_r` its time set:

* its owned gids and :math:`Q_r`; the input features and node-level fields
  (targets) of :math:`\mathrm{own}_r \cup Q_r` -- halo rows' features are
  not stored: they reach the rank through the plan's static ``spatial:0``
  exchange, as on the whole-signal path;
* the spatial edges into its owned rows (global edge order, weights), and
  every in-edge of its halo rows (targets, self-loop flags, weights), from
  which its :class:`~.local.LocalGraph` computes the *global* GCN
  normalization bit for bit;
* a node table (:class:`~.local.RankNodes`: snapshot, vertex, previous
  appearance, sequence of every node it references);
* written with a ``readout_width``: the labelled pairs whose source it
  time-owns (``loss="bce_link"``; the plan then has the ``readout`` exchange);
* its slice of the plan, :meth:`RankPlan.to_state()
  <pyg_dynscale.partition.rank_plan.RankPlan.to_state>` (its own send and
  receive lists and the whole plan's row counts, for the predicted traffic).

So a rank's file is :math:`O(|\mathrm{own}_r \cup Q_r| \cdot F + |S_r| +
|E_r| + \text{its plan lists})`: its part plus its halo, never the whole
signal or plan.

Validation follows the partition files (:mod:`pyg_dynscale.partition.io`):
``weights_only`` loads of plain types, a format tag and version, a SHA-256
over every tensor and the header (checked again against ``meta.json``'s
copy, so a rank file of another write is refused), the fingerprints of the
signal and partition, and the pattern. :func:`read_shard` raises
:class:`~pyg_dynscale.errors.ShardError` naming the file and the cause;
:func:`agree_on_shard` makes every rank raise it when any rank's read failed
(one ``all_gather``), so a missing rank directory stops the job instead of
hanging it.

The directory is written atomically: into ``DIR.partial`` beside it, each
file flushed and ``fsync``-ed, then renamed to ``DIR`` (an existing ``DIR``
is replaced only once the new one is complete).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from ..errors import DynScaleError, PartitionError, PartitionFormatError, ShardError
from ..partition.plan import CommunicationPlan
from ..partition.rank_plan import RankPlan
from .blackbox_shards import blackbox_set, blackbox_shard
from .local import RankNodes

__all__ = ["write_shards", "write_set", "read_shard", "read_meta", "Shard", "agree_on_shard", "partition_digest",
           "SHARD_FORMAT", "SHARD_VERSION", "META_FILE", "SHARD_FILE"]

SHARD_FORMAT = "pyg_dynscale.Shard"
META_FORMAT = "pyg_dynscale.Shards"
SHARD_VERSION = 1
META_FILE = "meta.json"
SHARD_FILE = "shard.pt"

_NODE_COLUMNS = ("gids", "time", "vertex", "prev", "seq")


def partition_digest(partition: Any) -> str:
    """SHA-256 of a partition's owners (structure and time), its scheme and
    number of parts: what a shard set records of the partition it was cut from."""
    h = hashlib.sha256()
    h.update(f"{partition.scheme}:{partition.num_parts}".encode())
    h.update(partition.owner.detach().cpu().long().numpy().tobytes())
    if partition.time_owner is not None:
        h.update(partition.time_owner.detach().cpu().long().numpy().tobytes())
    return h.hexdigest()


def _flat(prefix: str, value: Any, tensors: dict, plain: Any) -> Any:
    """Split a nested state into ``{path: tensor}`` and its plain skeleton (for the checksum)."""
    if isinstance(value, Tensor):
        tensors[prefix] = value
        return "<tensor>"
    if isinstance(value, dict):
        return {k: _flat(f"{prefix}.{k}", v, tensors, plain) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_flat(f"{prefix}.{i}", v, tensors, plain) for i, v in enumerate(value)]
    return value


def _checksum(body: dict) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes and the plain
    skeleton. The bytes are hashed in place (a memory view of a loaded or
    memory-mapped tensor, never a copy), so checking a rank's file costs no
    second copy of its part."""
    tensors: dict = {}
    skeleton = _flat("", body, tensors, None)
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}{t.dtype}{list(t.shape)}".encode())
        if t.numel():
            h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    h.update(json.dumps(skeleton, sort_keys=True, default=str).encode())
    return h.hexdigest()


def _write_file(path: str, write: Any) -> None:
    with open(path, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------------- writer
def _rank_part(signal: Any, sg: Any, partition: Any, plan: CommunicationPlan, rank: int,
               fields: dict, link: Any) -> dict:
    """Rank ``rank``'s tensors (see the module doc), from the whole signal."""
    N = sg.num_nodes
    own = partition.owner
    town = partition.temporal_owner
    owned_mask = own == rank
    owned = owned_mask.nonzero().flatten()
    Q = (town == rank).nonzero().flatten()
    spatial = [e for e in plan if e.kind == "spatial"]
    halo = spatial[0].recv_list(rank)[0] if spatial else owned[:0]
    s, d = sg.spatial_edge_index
    keep = owned_mask[d]
    ew = signal.edge_weight
    is_halo = torch.zeros(N, dtype=torch.bool)
    is_halo[halo] = True
    into_halo = is_halo[d]  # every in-edge of a halo row, in the global order (its degree)
    # the nodes whose columns the rank reads: S, Q and the rows its attention / window exchanges bring
    referenced = [owned, halo, Q]
    for e in plan:
        if e.kind == "temporal" and plan.pattern.blocks[e.block].time_kind in ("attention", "window"):
            referenced.append(e.recv_list(rank)[0])
    nodes = RankNodes.from_global(sg, torch.unique(torch.cat(referenced)))
    S = torch.sort(torch.cat([owned, halo])).values
    # the structure set's input rows as the rank trains on them: owned rows, halo rows zero until the static
    # spatial:0 exchange fills them -- loaded, this tensor *is* the rank's input table (no copy)
    x = signal.x.new_zeros((S.numel(),) + tuple(signal.x.shape[1:]))
    own_pos = torch.searchsorted(S, owned)
    x[own_pos] = signal.x.index_select(0, owned)
    extra = Q[~torch.isin(Q, owned)]  # PSS-TS: time-owned rows owned elsewhere (a readout module's inputs)
    tensors = {
        "owned": owned, "Q": Q,
        "spatial_edges": torch.stack([s[keep], d[keep]]),
        "edge_weight": None if ew is None else ew[keep],
        "halo_in_dst": d[into_halo], "halo_in_loop": s[into_halo] == d[into_halo],
        "halo_in_weight": None if ew is None else ew[into_halo],
        "S": S, "x": x, "q_extra": extra, "x_extra": signal.x.index_select(0, extra),
    }
    for c in _NODE_COLUMNS:
        tensors[f"nodes.{c}"] = getattr(nodes, c)
    for name, values in fields.items():
        tensors[f"field.{name}"] = values.index_select(0, Q)  # the loss reads Q's rows
    if link is not None:  # the labelled pairs whose source this rank's time set holds (their loss is computed here)
        mine = (town[link.label_src] == rank).nonzero().flatten()
        tensors.update({"pairs.id": mine, "pairs.src": link.label_src[mine], "pairs.dst": link.label_dst[mine],
                        "pairs.time": link.label_time[mine], "pairs.label": link.label[mine]})
    return {k: (v.detach().cpu().contiguous() if isinstance(v, Tensor) else v) for k, v in tensors.items()}


def write_shards(signal: Any, partition: Any, pattern: Any, directory: str, *, input_halo: str = "load",
                 readout_width: Optional[int] = None, link_index: str = "edge_label_index",
                 link_label: str = "edge_label", depth: Any = "auto", bytes_per_element: Optional[int] = None,
                 check: bool = True) -> str:
    r"""Write one shard per rank of ``partition`` under ``directory``.

    Args:
        signal: the whole :class:`~pyg_dynscale.data.DynamicGraphSignal`
            (or a PyGT signal), with node features.
        partition: its :class:`~pyg_dynscale.partition.Partition`; one
            shard per part.
        pattern: the model's
            :class:`~pyg_dynscale.partition.DependencyPattern`, with the
            element size training will use
            (``model.dependency_pattern(bytes_per_element=...)``: 4 for
            float32, 8 for float64); the trainer refuses shards cut for
            another pattern.
        directory: the shard directory (replaced atomically if it exists).
        input_halo: ``"load"`` or ``"exchange"`` (as the trainer's option).
        readout_width: for ``loss="bce_link"``: the width of a row after the
            head (the model's output width without a head); the shards then
            hold each rank's labelled pairs (``link_index`` / ``link_label``
            fields) and the plan's ``readout`` exchange. ``None``: node
            targets only.
        depth, bytes_per_element, check: black-box shards only (``pattern``
            is a per-snapshot module): its halo depth (as the trainer's
            ``depth``), the element size of the exchanged state rows
            (``None``: the module's parameters') and whether to verify the
            depth (:mod:`.blackbox_shards`).

    ``pattern`` may instead be a per-snapshot module (the black-box path,
    docs/blackbox.md, e.g. PyGT's ``GConvGRU``): each rank's shard then
    holds its local subgraph of every snapshot, the features of its local
    rows, its owned rows' targets and its slice of the
    :class:`~pyg_dynscale.partition.halo_plan.StatePlan`
    (:func:`.blackbox_shards.blackbox_set`).

    Returns:
        str: ``directory``.

    Raises:
        PartitionError: the partition does not fit the signal, or the
            pattern is not a dependency pattern.
        ModelInputError: the signal has no node features.
    """
    from ..errors import ModelInputError
    from ..runtime.paths import as_signal

    if isinstance(pattern, torch.nn.Module):  # a per-snapshot module: the black-box path's shards
        return write_set(directory, *blackbox_set(signal, partition, pattern, partition_digest(partition), depth=depth,
                                                  bytes_per_element=bytes_per_element, check=check))
    signal = as_signal(signal)
    if signal.device.type != "cpu":
        signal = signal.to("cpu")
    if signal.x is None:
        raise ModelInputError("signal.x", "is missing.", "give the signal node features before writing shards.")
    link = None
    if readout_width is not None:
        from ..runtime.losses import resolve_targets

        link = resolve_targets(signal, "bce_link", "y", link_index, link_label, torch.float64)
    plan = CommunicationPlan.build(signal, partition, pattern, input_halo=input_halo,  # checks signal and pattern
                                   link_pairs=None if link is None else (link.label_src, link.label_dst),
                                   readout_width=readout_width or 0)
    sg = signal.supergraph()
    fields = {name: f.values for name, f in signal.fields.items() if f.level == "node" and name != "x"}
    R = partition.num_parts
    T = sg.num_snapshots
    header = {
        "world_size": R, "num_nodes": int(sg.num_nodes), "num_snapshots": int(T),
        "num_vertices": int(sg.num_vertices), "num_sequences": int(sg.sequence_vertex.numel()),
        "nodes_per_snapshot": torch.bincount(sg.time, minlength=T).tolist(),
        "num_features": int(signal.x.shape[1]) if signal.x.dim() > 1 else 1,
        "signal": signal.fingerprint(), "partition": partition_digest(partition), "scheme": partition.scheme,
        "two_owners": partition.time_owner is not None,
        "pattern": pattern.to_dict(), "input_halo": input_halo, "weighted": signal.edge_weight is not None,
        "fields": sorted(fields),
        "readout_width": readout_width, "num_pairs": 0 if link is None else int(link.label.numel()),
        "pair_counts": None if link is None else torch.bincount(link.label_time, minlength=T).tolist(),
    }
    return write_set(directory, header, R, lambda r: _share_gid_arrays(
        _rank_part(signal, sg, partition, plan, r, fields, link), RankPlan.from_plan(plan, r).to_state()))


_GID_ARRAYS = ("owned", "Q", "S", "nodes.gids")


def _share_gid_arrays(tensors: dict, plan_state: dict) -> tuple[dict, dict]:
    """One tensor for each distinct sorted gid array of a rank's file:
    without PSS-TS its time set is its owned rows (and the plan's ``q_gid``),
    without a halo its structure set too, and its node table's gids are
    often :math:`S_r`. ``torch.save`` writes a shared tensor once and a
    memory-mapped load keeps it shared, so the rank reads and holds one
    array where it held up to five (8 B per row each)."""
    kept: list = []

    def one(t: Optional[Tensor]) -> Optional[Tensor]:
        if t is None:
            return t
        for k in kept:
            if k.shape == t.shape and k.dtype == t.dtype and torch.equal(k, t):
                return k
        kept.append(t)
        return t

    for name in _GID_ARRAYS:
        tensors[name] = one(tensors[name])
    plan_state["q_gid"] = one(plan_state["q_gid"])
    return tensors, plan_state


def write_set(directory: str, header: dict, world_size: int, part: Any) -> str:
    """Write a shard set atomically (the module doc): ``meta.json`` with
    ``header`` and each rank file's checksum, and ``rank-<r>/shard.pt`` from
    ``part(r) -> (tensors, plan state)``, one rank at a time."""
    header = dict(header)
    header["set"] = hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()
    directory = os.path.abspath(directory)
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)  # left by a crash while writing
    os.makedirs(partial)
    sums = []
    for r in range(world_size):
        tensors, plan_state = part(r)
        body = {"header": {"rank": r, "set": header["set"]}, "tensors": tensors, "plan": plan_state}
        checksum = _checksum(body)
        sums.append(checksum)
        os.makedirs(os.path.join(partial, f"rank-{r}"))
        payload = {"format": SHARD_FORMAT, "version": SHARD_VERSION, **body, "checksum": checksum}
        _write_file(os.path.join(partial, f"rank-{r}", SHARD_FILE), lambda f: torch.save(payload, f))
    meta = {"format": META_FORMAT, "version": SHARD_VERSION, "header": header, "files": sums}
    meta["checksum"] = hashlib.sha256(json.dumps({k: meta[k] for k in ("header", "files")},
                                                 sort_keys=True).encode()).hexdigest()
    _write_file(os.path.join(partial, META_FILE), lambda f: f.write(json.dumps(meta, indent=1).encode()))
    old = None
    if os.path.exists(directory):
        old = directory + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(directory, old)
    os.replace(partial, directory)  # atomic: the shard set appears complete or not at all
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return directory


# ---------------------------------------------------------------------- reader
@dataclass
class Shard:
    r"""One rank's part, read by :func:`read_shard`.

    Attributes:
        meta (dict): the shard set's global header (``meta.json``).
        rank (int): the rank.
        owned, Q (Tensor): sorted gids of its owned rows and time set.
        spatial_edges (Tensor): ``[2, E_r]`` gids of the edges into owned rows.
        edge_weight (Tensor, optional): their weights.
        halo_in (tuple): ``(target gids, self-loop flags, weights or None)``
            of the halo rows' in-edges.
        S (Tensor): sorted gids of the structure set :math:`S_r`.
        x (Tensor): ``[|S_r|, F]`` its input rows: the owned rows' features,
            zeros at halo rows (the static ``spatial:0`` exchange fills them).
        q_extra (Tensor): sorted gids of :math:`Q_r` owned by other ranks (PSS-TS).
        x_extra (Tensor): ``[|q_extra|, F]`` their features.
        fields (dict): node-level fields (targets) of :math:`Q_r`'s rows by name.
        nodes (RankNodes): the node table.
        plan (RankPlan): its slice of the communication plan.
        bytes_read (int): bytes of the tensors it holds.
        pairs (dict, optional): its labelled pairs (``id``, ``src``, ``dst``,
            ``time``, ``label``) when the shards were written with a
            ``readout_width``.
    """

    meta: dict
    rank: int
    owned: Tensor
    Q: Tensor
    spatial_edges: Tensor
    edge_weight: Optional[Tensor]
    halo_in: tuple
    S: Tensor
    x: Optional[Tensor]
    q_extra: Tensor
    x_extra: Optional[Tensor]
    fields: dict
    nodes: RankNodes
    plan: RankPlan
    bytes_read: int
    pairs: Optional[dict] = None

    @property
    def two_owners(self) -> bool:
        """PSS-TS (a time owner apart from the structure owner): the same on
        every rank, so every rank runs the redistribution exchanges, even one
        whose two owners coincide."""
        return bool(self.meta["two_owners"])

    def input_rows(self, gids: Tensor) -> Tensor:
        """Features of the nodes ``gids``, each owned or time-owned by this rank."""
        if torch.equal(gids, self.S):
            return self.x
        mine = torch.isin(gids, self.owned)
        out = self.x.new_empty((gids.numel(),) + tuple(self.x.shape[1:]))
        out[mine] = self.x.index_select(0, torch.searchsorted(self.S, gids[mine]))
        out[~mine] = self.x_extra.index_select(0, torch.searchsorted(self.q_extra, gids[~mine]))
        return out

    def plan_for(self, loss: str) -> RankPlan:
        """The plan the trainer executes: without the ``readout`` exchange
        for a node loss (nothing reads the pairs' endpoints then)."""
        p = self.plan
        if loss == "bce_link" or not any(e.phase == "readout" for e in p):
            return p
        out = copy.copy(p)  # the same lists, rounds and depths; the exchange list without the readout
        out.exchanges = [e for e in p.exchanges if e.phase != "readout"]
        return out

    def release_inputs(self) -> None:
        """Drop the input rows once the trainer holds them (the memory map closes with the last reference)."""
        self.x = self.x_extra = None


def _load(path: str, remedy: str) -> dict:
    """The rank file, memory-mapped (``weights_only``: plain types and
    tensors only); its tag and version checked."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # a corrupt archive, or a pickle of arbitrary objects (never unpickled)
        why = ("it holds Python objects other than tensors, which are not unpickled" if "weights_only" in str(exc)
               else f"{type(exc).__name__}: {str(exc)[:200]}")
        raise ShardError(f"{path}: not a readable pyg_dynscale shard file ({why}). {remedy}") from None
    if not isinstance(payload, dict) or payload.get("format") != SHARD_FORMAT:
        raise ShardError(f"{path}: not a pyg_dynscale shard file (format tag missing). {remedy}")
    if payload.get("version") != SHARD_VERSION:
        raise ShardError(f"{path}: shard format version {payload.get('version')!r} is not supported by this "
                         f"pyg_dynscale (reads version {SHARD_VERSION}). {remedy}")
    return payload


def read_meta(directory: str) -> dict:
    """The shard set's ``meta.json`` header, checked (format, version, checksum).

    Raises:
        ShardError: missing, unreadable, of another format or version, or corrupt.
    """
    path = os.path.join(directory, META_FILE)
    remedy = "Re-create the shards with write_shards() (pyg-dynscale partition ... --shards DIR)."
    if not os.path.isdir(directory):
        raise ShardError(f"{directory}: no such shard directory. {remedy}")
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode())
    except FileNotFoundError:
        raise ShardError(f"{path}: missing; {directory} is not a complete shard set. {remedy}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShardError(f"{path}: not readable JSON ({type(exc).__name__}); the file is corrupt. {remedy}") from None
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ShardError(f"{path}: not a pyg_dynscale shard set (format tag missing). {remedy}")
    if meta.get("version") != SHARD_VERSION:
        raise ShardError(f"{path}: shard format version {meta.get('version')!r} is not supported by this "
                         f"pyg_dynscale (reads version {SHARD_VERSION}). {remedy}")
    try:
        ok = meta["checksum"] == hashlib.sha256(json.dumps({k: meta[k] for k in ("header", "files")},
                                                           sort_keys=True).encode()).hexdigest()
    except (KeyError, TypeError):
        ok = False
    if not ok:
        raise ShardError(f"{path}: checksum mismatch, the file is corrupt. {remedy}")
    return meta["header"] | {"files": meta["files"]}


def read_shard(directory: str, rank: int, world_size: Optional[int] = None) -> Shard:
    """Rank ``rank``'s part of the shard set in ``directory``: reads
    ``meta.json`` and ``rank-<rank>/shard.pt`` only.

    Args:
        world_size: the process group's size; must equal the set's.

    Raises:
        ShardError: a missing or corrupt file, another world size, a rank
            file of another write, inconsistent contents.
    """
    meta = read_meta(directory)
    remedy = "Re-create the shards with write_shards() (pyg-dynscale partition ... --shards DIR)."
    R = int(meta["world_size"])
    if world_size is not None and world_size != R:
        raise ShardError(f"{directory}: the shards were cut for {R} ranks but the process group has "
                         f"{world_size}. Run {R} ranks, or write shards for {world_size} parts.")
    path = os.path.join(directory, f"rank-{rank}", SHARD_FILE)
    if not 0 <= rank < R or not os.path.isfile(path):
        raise ShardError(f"{path}: missing; rank {rank}'s shard is not in {directory}. {remedy}")
    payload = _load(path, remedy)
    try:
        body = {k: payload[k] for k in ("header", "tensors", "plan")}
        checksum = _checksum(body)
    except Exception as exc:
        raise ShardError(f"{path}: damaged shard file ({type(exc).__name__}: {exc}). {remedy}") from None
    if checksum != payload.get("checksum"):
        raise ShardError(f"{path}: checksum mismatch, the file is corrupt. {remedy}")
    header = body["header"]
    if header.get("set") != meta["set"] or meta["files"][rank] != checksum:
        raise ShardError(f"{path}: belongs to another shard set than {os.path.join(directory, META_FILE)} "
                         f"(another signal, partition or pattern). {remedy}")
    if header.get("rank") != rank:
        raise ShardError(f"{path}: holds rank {header.get('rank')}'s part, not rank {rank}'s. {remedy}")
    t = body["tensors"]
    if meta.get("path") == "blackbox":  # a black-box shard set (.blackbox_shards)
        return blackbox_shard(meta, rank, body, path, remedy)
    try:
        plan = RankPlan.from_state(body["plan"])
        nodes = RankNodes(meta["num_nodes"], meta["num_snapshots"], meta["num_vertices"],
                          *(t[f"nodes.{c}"] for c in _NODE_COLUMNS))
        fields = {name: t[f"field.{name}"] for name in meta["fields"]}
        shard = Shard(meta, rank, t["owned"], t["Q"], t["spatial_edges"], t["edge_weight"],
                      (t["halo_in_dst"], t["halo_in_loop"], t["halo_in_weight"]), t["S"], t["x"], t["q_extra"],
                      t["x_extra"], fields, nodes, plan,
                      sum(v.numel() * v.element_size() for v in t.values() if isinstance(v, Tensor)),
                      {k[6:]: v for k, v in t.items() if k.startswith("pairs.")} if meta["readout_width"] else None)
    except (KeyError, TypeError, PartitionFormatError, PartitionError) as exc:
        raise ShardError(f"{path}: inconsistent shard contents ({type(exc).__name__}: {exc}). {remedy}") from None
    if plan.rank != rank or plan.world != R:
        raise ShardError(f"{path}: its plan is rank {plan.rank} of {plan.world}, not rank {rank} of {R}. {remedy}")
    return shard


def agree_on_shard(error: Optional[DynScaleError], group: Optional[Any] = None) -> None:
    """One ``all_gather`` over ``group``'s host group: when any rank failed to
    read its shard, every rank raises :class:`~pyg_dynscale.errors.ShardError`
    naming the first failing rank and its cause. A rank never waits for one
    that stopped."""
    import torch.distributed as dist

    from ..training.ranks import host_group

    mine = None if error is None else f"{type(error).__name__}: {error}"
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=host_group(group))
    failed = [(r, e) for r, e in enumerate(everyone) if e is not None]
    if failed:  # the same message on every rank, the failing one included
        r, msg = failed[0]
        raise ShardError(f"rank {r} could not load its shard: {msg.split(': ', 1)[1]}") from error
