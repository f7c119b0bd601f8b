r"""One rank's forward pass on the black-box path: the user's module once per snapshot.

:class:`SnapshotEngine` builds this rank's
:class:`~pyg_dynscale.partition.halo_plan.StatePlan` from the partition's
owner array (a vertex partition, a local subgraph per snapshot with a checked
halo depth) and runs the module unchanged through a
:class:`~pyg_dynscale.runtime.snapshot_runner.SnapshotRunner`, whose state
exchanges go through the rank's
:class:`~pyg_dynscale.distributed.exchange.Communicator` (docs/blackbox.md),
or, while training with a stale cache, through its
:meth:`~pyg_dynscale.distributed.stale.StaleCache.exchange` (docs/stale.md).
The per-step inputs and routes are built on the host and moved to the
device once (:meth:`SnapshotEngine.place`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Union

import torch
from torch import Tensor

from ..data.tensor_maps import TensorMap
from ..errors import ModelInputError, UnsupportedModelError
from ..nn.snapshot_model import SnapshotModel
from ..partition.halo_plan import StatePlan
from ..runtime.paths import edge_fields_of, prepare_snapshot_model
from ..runtime.snapshot_runner import SnapshotRunner, initial_states
from .exchange import Communicator
from .stale import StaleCache

__all__ = ["SnapshotEngine", "BlackBoxLayout", "check_dcrnn_edge_order"]


class BlackBoxLayout:
    """What the loss and :meth:`DistributedTrainer.predict` read of a layout
    on the black-box path: the owned gids ``Q``, the supergraph (``None``
    from shards) and the number of vertex-time nodes."""

    def __init__(self, Q: Tensor, sg: Any, num_nodes: Optional[int] = None) -> None:
        self.Q, self.sg = Q, sg
        self.num_nodes = int(sg.num_nodes if num_nodes is None else num_nodes)


def check_dcrnn_edge_order(signal: Any) -> None:
    """PyGT's DConv pairs its in-degree normalizers (listed in input edge
    order) with the reverse edges of a dense adjacency (in sorted order);
    the pairs line up, and outputs depend on nearby edges only, when every
    snapshot's edges are sorted by (target, source) without duplicates."""
    ei, ptr = signal.edge_index, signal.edge_ptr
    E = ei.shape[1]
    if E < 2:
        return
    t = torch.repeat_interleave(torch.arange(signal.num_snapshots), ptr[1:] - ptr[:-1], output_size=E)
    n = int(signal.nodes_per_snapshot.max()) + 1
    key = (t * n + ei[1]) * n + ei[0]
    if not bool((key[1:] > key[:-1]).all()):
        raise ModelInputError(
            "signal.edge_index", "is not sorted by (target, source) without duplicates in every snapshot; PyGT's DCRNN "
            "pairs degree normalizers with edges by position, so its output then depends on the order of edges "
            "anywhere in the snapshot and cannot be split across ranks.",
            "sort each snapshot's edges with signal.sort_edges() (and merge duplicate edges) before training, or "
            "train on one process.")


class SnapshotEngine:
    r"""The black-box forward of one rank.

    Args:
        model: the :class:`SnapshotModel` around the user's module.
        signal: the whole signal, on the host; with ``plan``, the rank's
            :class:`~.blackbox_shards.LocalSignal` (its local subgraphs).
        partition: its partition (one owner per vertex-time node); ``None``
            with ``plan``.
        comm: this rank's communicator.
        device, dtype: where and in which dtype the module runs.
        check: verify the module's halo depth (several ranks).
        checkpoint_every: gradient checkpointing over blocks of snapshots.
        link_pairs: ``(src, dst)`` gids of labelled pairs (``bce_link``).
        readout_width: elements of one output row after the head (or a
            function of the probed module giving it).
        reuse: ReInc's reuse for the cells that have it
            (:mod:`~pyg_dynscale.runtime.step_reuse`).
        h0: the initial state of every temporal sequence, one ``[S, W_c]``
            tensor per state component (or one tensor for one state; the
            same on every rank: :func:`~pyg_dynscale.runtime.snapshot_runner.initial_states`).
        stale: the stale embedding cache (:mod:`.stale`), or ``None``: while
            training (:attr:`stale_active`) the state exchanges of the kinds
            it covers (``"temporal"``, ``"spatial"``) go through it, one cache
            slot per snapshot, state component and kind.
        plan: this rank's plan read from its shard
            (:meth:`StatePlan.from_rank_state`), its module probed and
            checked against the shard (:func:`~.blackbox_shards.check_blackbox_shard`):
            nothing is built from a whole signal.
    """

    path = "blackbox"
    fusion = "blackbox"
    groups = None
    windows = None

    def __init__(self, model: SnapshotModel, signal: Any, partition: Any, comm: Communicator, device: torch.device,
                 dtype: torch.dtype, *, check: bool = True, checkpoint_every: Optional[int] = None,
                 link_pairs: Optional[tuple] = None,
                 readout_width: Union[int, Callable[[SnapshotModel], int]] = 1, reuse: bool = True,
                 h0: Any = None, stale: Optional[StaleCache] = None, plan: Optional[StatePlan] = None) -> None:
        world = comm.world_size
        if model.spec.global_reason and world > 1:
            raise UnsupportedModelError(f"{model.spec.name} cannot be split across ranks on the black-box path: "
                                        f"{model.spec.global_reason}")
        self.model, self.signal, self.partition, self.comm = model, signal, partition, comm
        self.stale = stale
        #: set by the trainer while a training pass runs (the stale cache applies then only)
        self.stale_active = False
        fields = edge_fields_of(model, signal)
        if plan is None:  # from a shard: probed, checked and planned when the shards were written
            prepare_snapshot_model(model, signal, check and world > 1, fields)
            h0 = initial_states(h0, signal.supergraph().sequence_ptr.numel() - 1, model.state_widths)
            if world > 1 and model.spec.name == "DCRNN":
                check_dcrnn_edge_order(signal)
            bpe = torch.empty((), dtype=dtype).element_size()
            if callable(readout_width):  # the width after the head is known once the module was probed
                readout_width = readout_width(model) if link_pairs is not None else 1
            plan = StatePlan(signal, partition.owner, world, model.depth, model.state_widths, comm.rank, bpe,
                             link_pairs=link_pairs, readout_width=readout_width)
        self.plan = plan
        self.runner = SnapshotRunner(model, signal, self.plan, exchange=self._exchange,
                                     checkpoint_every=checkpoint_every, dtype=dtype, device=device,
                                     edge_fields=fields, reuse=reuse, h0=h0)
        self.host_layout = self.layout = BlackBoxLayout(
            self.plan.owned_gids, None if partition is None else signal.supergraph(), self.plan.num_nodes)

    @property
    def Q(self) -> Tensor:
        """Host gids of the rows whose outputs this rank computes (owned, gid order)."""
        return self.host_layout.Q

    def _exchange(self, key: tuple, send: Tensor, send_splits: list, recv_splits: list) -> Tensor:
        """A state exchange of the runner: exactly, or through the stale cache
        while training when it covers the exchange's kind (the key, unique per
        snapshot, component and kind, names the cache slot)."""
        if self.stale_active and self.stale is not None and self.stale.applies(key[2]):
            return self.stale.exchange(self.comm, key, key, send, send_splits, recv_splits)
        return self.comm.exchange(key, send, send_splits, recv_splits)

    def place(self, fn: TensorMap) -> None:
        self.runner.place(fn)

    def outputs(self) -> Tensor:
        return self.runner.outputs()

    def after_backward(self) -> None:
        pass

    def after_step(self) -> None:
        self.model.detach_carried()
