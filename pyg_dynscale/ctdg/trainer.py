r"""``MemoryTrainer``: PyG's ``examples/tgn.py`` training and evaluation loop
on the user's own ``TGNMemory``, embedding module and link predictor.

One process with ``parallelism=(1, 1, 1)`` reproduces the example loop step
for step (tested in float64 to 1e-9 against a copy of the loop): the same
split (``TemporalData.train_val_test_split(0.15, 0.15)``), the same batches
(``TemporalDataLoader(batch_size)``: consecutive events), the same random
stream (``torch.manual_seed(seed)`` once at construction; per pass the one
``int64`` draw with which a ``DataLoader`` iterator seeds itself; per batch
``torch.randint(min_dst, max_dst + 1, (B,))`` with the bounds of the split
being walked; the attention dropout), memory and neighbour loader reset at
each epoch, the same loss (``BCEWithLogits`` on positives plus negatives) and
the same epoch loss :math:`\sum_b \ell_b |b| / E_{train}`.

What is faster than the example, without changing a number: the per-node
message store of ``TGNMemory`` is replaced by index ranges
(:mod:`~pyg_dynscale.ctdg.store`), batches are index ranges instead of
``TemporalData`` slices, and the epoch loss is summed on the device (no host
sync per batch).
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import TemporalData
from torch_geometric.nn.models.tgn import LastNeighborLoader

from ..errors import ModelInputError
from ..runtime.metrics import average_precision, roc_auc
from .events import check_events, split_ranges
from .schedule import EventSchedule
from .static import StaticMemory
from .store import MemoryState

__all__ = ["MemoryTrainer"]

_MEMORY_PARTS = ("msg_s_module", "msg_d_module", "aggr_module", "time_enc", "gru", "memory", "last_update", "num_nodes")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelInputError(name, f"is {value!r}.", "use an integer >= 1.")
    return value


class MemoryTrainer:
    r"""Train a memory-based temporal GNN (PyG's TGN modules) on an event stream.

    .. code-block:: python

        data = load_jodie_csv("wikipedia.csv")
        model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=100, time_dim=100, embedding_dim=100)
        trainer = MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10)
        for epoch in range(50):
            loss = trainer.train_epoch()
            val = trainer.evaluate("val")     # {"ap": ..., "auc": ..., "mrr": ...}
            test = trainer.evaluate("test")

    **Per batch** (events :math:`[a, b)`, negatives :math:`n_e`): the last
    ``num_neighbors`` neighbours of the batch's nodes (PyG's
    ``LastNeighborLoader``), their memory (updated with the stored messages in
    training, as ``TGNMemory.forward``), plus the static memory if any, then
    ``z = gnn(x, last_update, edge_index, t[e_id], msg[e_id])``, logits
    ``link_pred(z[src], z[dst])`` and ``link_pred(z[src], z[neg])``, loss
    :math:`\mathrm{BCE}(\text{pos}, 1) + \mathrm{BCE}(\text{neg}, 0)`; then
    memory and neighbour loader take the batch's events, backward, Adam step.

    **Evaluation** (:meth:`evaluate`) is the example's ``test()``:
    ``torch.manual_seed(eval_seed)`` (the example's 12345), batches of
    ``batch_size``, one uniform negative per event; AP and AUC are computed per
    batch on the sigmoid scores and averaged over batches (the example's
    ``average_precision_score`` / ``roc_auc_score``, here
    :func:`~pyg_dynscale.runtime.metrics.average_precision` /
    :func:`~pyg_dynscale.runtime.metrics.roc_auc`). **MRR** (not in the
    example): each positive :math:`(u, v)` is ranked against ``mrr_negatives``
    negatives of its own batch (DistTGL's 49; negative :math:`(i + s) \bmod B`
    for event :math:`i`, :math:`s = 0 .. S-1`, no extra random draws), rank
    :math:`= 1 + \#\{\text{neg} > \text{pos}\} + \tfrac12 \#\{\text{neg} = \text{pos}\}`,
    MRR the mean of :math:`1/\text{rank}` over all events of the split.
    ``evaluate("val")`` starts from the memory at the end of the last
    training epoch and ``evaluate("test")`` from the memory after the
    validation events, as the example's ``test(val_loader); test(test_loader)``;
    called in another order, the trainer restores the end-of-training state
    and replays the validation events (no scoring) so that the result does not
    depend on the order of the calls.

    **Parallelism** ``(i, j, k)`` (DistTGL §3.2) on one process runs the
    schedule of :class:`~pyg_dynscale.ctdg.schedule.EventSchedule` serially:
    with ``(i, 1, 1)`` a global batch of ``i * batch_size`` events is split
    chronologically into ``i`` local batches, each scored from the memory and
    neighbours as they were before the global batch, the gradient is
    :math:`\sum_r (|b_r| / |B|) \nabla \ell_r` and memory and neighbours take
    the whole global batch. ``j > 1`` and ``k > 1`` raise
    :class:`NotImplementedError`; so does a distributed run (not built yet).

    Args:
        model: an object with ``memory``, ``gnn``, ``link_pred`` (e.g.
            :class:`~pyg_dynscale.ctdg.TGN`), or ``None`` with the three given.
        data (TemporalData): the whole stream (split by time inside).
        batch_size (int): events per (local) batch.
        lr (float): Adam's learning rate.
        num_neighbors (int): ``LastNeighborLoader`` size.
        negatives (str): ``"uniform"`` (the example's draw; the only one built).
        seed (int): ``torch.manual_seed(seed)`` once, after everything is built.
        parallelism (tuple): ``(i, j, k)``.
        static_memory: ``None``, ``"learnable"`` or a ``[num_nodes, d]``
            tensor (pre-trained, e.g. :func:`~pyg_dynscale.ctdg.pretrain_static_memory`);
            see :class:`~pyg_dynscale.ctdg.static.StaticMemory`.
        memory, gnn, link_pred: the three modules, when ``model`` is ``None``.
        val_ratio, test_ratio (float): the split.
        eval_seed (int): seed of every evaluation pass (the example's 12345).
        mrr_negatives (int): negatives per positive in the MRR (0: no MRR, ``nan``).
        dynamic_memory (bool): ``False`` feeds the embedding the static memory
            only (the pre-training of :func:`~pyg_dynscale.ctdg.pretrain_static_memory`).

    Raises:
        ModelInputError: missing modules, a memory that is not a ``TGNMemory``,
            events that fail :func:`~pyg_dynscale.ctdg.events.check_events`,
            a message width other than the memory's, bad options.
    """

    def __init__(
        self,
        model=None,
        data: Optional[TemporalData] = None,
        batch_size: int = 200,
        lr: float = 1e-4,
        num_neighbors: int = 10,
        negatives: str = "uniform",
        seed: int = 0,
        parallelism=(1, 1, 1),
        static_memory: Union[None, str, Tensor] = None,
        *,
        memory: Optional[torch.nn.Module] = None,
        gnn: Optional[torch.nn.Module] = None,
        link_pred: Optional[torch.nn.Module] = None,
        val_ratio: float = 0.15,
        test_ratio: float = 0.15,
        eval_seed: int = 12345,
        mrr_negatives: int = 49,
        dynamic_memory: bool = True,
    ) -> None:
        if model is not None:
            for part in ("memory", "gnn", "link_pred"):
                if getattr(model, part, None) is None:
                    raise ModelInputError(f"model.{part}", "is missing.",
                                          "give a model with memory, gnn and link_pred (e.g. pyg_dynscale.ctdg.TGN).")
            if any(x is not None for x in (memory, gnn, link_pred)):
                raise ModelInputError("model", "is given together with memory/gnn/link_pred.", "give one or the other.")
            memory, gnn, link_pred = model.memory, model.gnn, model.link_pred
        for name, mod in (("memory", memory), ("gnn", gnn), ("link_pred", link_pred)):
            if not isinstance(mod, torch.nn.Module):
                raise ModelInputError(name, f"is {type(mod).__name__}.",
                                      "give MemoryTrainer(model, data) or MemoryTrainer(memory=, gnn=, link_pred=, data=).")
        missing = [p for p in _MEMORY_PARTS if not hasattr(memory, p)]
        if missing:
            raise ModelInputError("memory", f"lacks {missing}: it is not a torch_geometric.nn.TGNMemory.",
                                  "build the memory as PyG's examples/tgn.py does (TGNMemory).")
        if data is None:
            raise ModelInputError("data", "is missing.", "give the event stream as torch_geometric.data.TemporalData.")
        if negatives != "uniform":
            raise NotImplementedError(f"negatives={negatives!r} is not built: only 'uniform' (the PyG example's draw).")
        self.batch_size = _positive_int("batch_size", batch_size)
        self.num_neighbors = _positive_int("num_neighbors", num_neighbors)
        if isinstance(mrr_negatives, bool) or not isinstance(mrr_negatives, int) or mrr_negatives < 0:
            raise ModelInputError("mrr_negatives", f"is {mrr_negatives!r}.", "use an integer >= 0.")
        if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
            raise ModelInputError("lr", f"is {lr!r}.", "use a positive learning rate.")
        check_events(data, memory.num_nodes)
        if data.msg.size(-1) != getattr(memory, "raw_msg_dim", data.msg.size(-1)):
            raise ModelInputError("data.msg", f"has {data.msg.size(-1)} columns but the memory was built for "
                                  f"{memory.raw_msg_dim}.", "build TGNMemory / TGN with msg_dim=data.msg.size(-1).")
        self.memory, self.gnn, self.link_pred = memory, gnn, link_pred
        self.seed, self.eval_seed, self.mrr_negatives = seed, eval_seed, mrr_negatives
        self.dynamic_memory = bool(dynamic_memory)

        dev, dtype = memory.memory.device, memory.memory.dtype
        self.src, self.dst, self.t = data.src.to(dev), data.dst.to(dev), data.t.to(dev)
        self.msg = data.msg.to(dev, dtype)
        self.val_start, self.test_start, self.num_events = split_ranges(data, val_ratio, test_ratio)
        if self.val_start == 0:
            raise ModelInputError("data", "leaves no training events after the split.", "give more events or smaller ratios.")
        self.schedule = EventSchedule(self.val_start, self.batch_size, parallelism)
        self.parallelism = (self.schedule.i, self.schedule.j, self.schedule.k)

        self.static: Optional[StaticMemory] = None
        if static_memory is not None:
            self.static = StaticMemory(memory.num_nodes, memory.memory_dim, static_memory).to(dev, dtype)
        elif not self.dynamic_memory:
            raise ModelInputError("dynamic_memory", "is False without a static memory.", "give static_memory too.")

        self.state = MemoryState(memory, self.src, self.dst, self.t, self.msg)
        self.neighbors = LastNeighborLoader(memory.num_nodes, size=self.num_neighbors, device=dev)
        self.assoc = torch.empty(memory.num_nodes, dtype=torch.long, device=dev)
        params, seen = [], set()
        for mod in (memory, gnn, link_pred, self.static):
            for p in (mod.parameters() if mod is not None else ()):
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        self.optimizer = torch.optim.Adam(params, lr=lr)
        self.criterion = torch.nn.BCEWithLogitsLoss()
        self.epoch = 0
        #: ``[steps]`` float64: each step's loss in the last epoch (stays on the device)
        self.batch_losses: Optional[Tensor] = None
        self._position: Optional[str] = None  # "train" / "val" / "test": events walked so far end there
        self._train_end = None  # memory + neighbour state at the end of the last training epoch
        self._training = True  # whether the memory is in training mode (the flush on leaving it)
        torch.manual_seed(seed)

    # ------------------------------------------------------------------ pieces
    def _split_bounds(self, a: int, b: int) -> tuple[int, int]:
        d = self.dst[a:b]
        return int(d.min()), int(d.max())

    def _set_training(self, mode: bool) -> None:
        if self._training and not mode:
            self.state.flush()  # TGNMemory.train(False)
        # torch.nn.Module.train, not TGNMemory.train: its flush would read the module's own (unused) store
        torch.nn.Module.train(self.memory, mode)
        for mod in (self.gnn, self.link_pred, self.static):
            if mod is not None:
                mod.train(mode)
        self._training = mode

    def _embed(self, n_id: Tensor, training: bool) -> tuple[Tensor, Tensor, Tensor]:
        """``(n_id, z, ...)`` of the batch nodes ``n_id`` (sorted unique)."""
        n_id, edge_index, e_id = self.neighbors(n_id)
        self.assoc[n_id] = torch.arange(n_id.size(0), device=n_id.device)
        z, last_update = self.state.read(n_id, training)
        if self.static is not None:
            z = z + self.static(n_id) if self.dynamic_memory else self.static(n_id)
        return self.gnn(z, last_update, edge_index, self.t[e_id], self.msg[e_id])

    def _scores(self, a: int, b: int, neg: Tensor, training: bool) -> tuple[Tensor, Tensor, Tensor]:
        src, dst = self.src[a:b], self.dst[a:b]
        z = self._embed(torch.cat([src, dst, neg]).unique(), training)
        # z[src] gathered twice, as the example does: one shared gather would sum the two
        # gradients before the scatter, which rounds differently (last-bit differences)
        pos_out = self.link_pred(z[self.assoc[src]], z[self.assoc[dst]])
        return pos_out, self.link_pred(z[self.assoc[src]], z[self.assoc[neg]]), z

    def _advance(self, a: int, b: int, training: bool) -> None:
        """Memory and neighbour loader take the events ``[a, b)``."""
        self.state.update(a, b, training)
        self.neighbors.insert(self.src[a:b], self.dst[a:b])

    def _reset(self) -> None:
        self.state.reset()
        self.neighbors.reset_state()

    def _snapshot(self) -> dict:
        nb = self.neighbors
        return {"memory": self.state.state(), "neighbors": nb.neighbors.clone(), "e_id": nb.e_id.clone(),
                "cur_e_id": nb.cur_e_id, "training": self._training}

    def _restore(self, snap: dict) -> None:
        self.state.load(snap["memory"])
        nb = self.neighbors
        nb.neighbors.copy_(snap["neighbors"])
        nb.e_id.copy_(snap["e_id"])
        nb.cur_e_id = snap["cur_e_id"]
        self._training = snap["training"]

    # ------------------------------------------------------------------ training
    def train_epoch(self) -> float:
        r"""One epoch over the training events; returns
        :math:`\sum_b \ell_b |b| / E_{train}` (the example's ``train()``)."""
        self._set_training(True)
        self._reset()
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self._split_bounds(0, self.val_start)
        total = torch.zeros((), dtype=torch.float64, device=self.src.device)
        losses = []
        for step in self.schedule.steps():
            self.optimizer.zero_grad()
            neg = torch.randint(lo, hi + 1, (step.num_events,), dtype=torch.long, device=self.src.device)
            step_loss = torch.zeros((), dtype=torch.float64, device=self.src.device)
            for lb in step.local:
                if lb.num_events == 0:
                    continue
                o = lb.start - step.start
                pos_out, neg_out, _ = self._scores(lb.start, lb.end, neg[o:o + lb.num_events], True)
                loss = self.criterion(pos_out, torch.ones_like(pos_out))
                loss = loss + self.criterion(neg_out, torch.zeros_like(neg_out))
                if lb.num_events != step.num_events:
                    loss = loss * (lb.num_events / step.num_events)
                loss.backward()
                step_loss = step_loss + loss.detach().to(torch.float64)
            total += step_loss * step.num_events
            losses.append(step_loss)
            self._advance(step.start, step.end, True)
            self.optimizer.step()
        self.batch_losses = torch.stack(losses)
        self.epoch += 1
        self._train_end = self._snapshot()
        self._position = "train"
        return float(total / self.val_start)

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def _walk(self, a: int, b: int, score: bool) -> dict:
        self._set_training(False)
        torch.manual_seed(self.eval_seed)
        torch.empty((), dtype=torch.int64).random_()  # the DataLoader iterator's seed draw
        lo, hi = self._split_bounds(a, b)
        aps, aucs, rr_sum, n = [], [], 0.0, 0
        for x, y in self.schedule.eval_batches(a, b):
            if score:
                neg = torch.randint(lo, hi + 1, (y - x,), dtype=torch.long, device=self.src.device)
                pos_out, neg_out, z = self._scores(x, y, neg, False)
                y_pred = torch.cat([pos_out, neg_out], dim=0).sigmoid().view(-1)
                y_true = torch.cat([torch.ones(pos_out.size(0)), torch.zeros(neg_out.size(0))]).to(y_pred.device)
                aps.append(average_precision(y_pred, y_true))
                aucs.append(roc_auc(y_pred, y_true))
                if self.mrr_negatives:
                    rr_sum += float(self._reciprocal_ranks(x, y, neg, pos_out, z).sum())
                    n += y - x
            self._advance(x, y, False)
        return {"ap": sum(aps) / len(aps) if aps else math.nan, "auc": sum(aucs) / len(aucs) if aucs else math.nan,
                "mrr": rr_sum / n if n else math.nan}

    def _reciprocal_ranks(self, a: int, b: int, neg: Tensor, pos_out: Tensor, z: Tensor) -> Tensor:
        """``[B]`` :math:`1/\\text{rank}` of each positive among ``mrr_negatives`` of the batch's negatives."""
        B = b - a
        S = min(self.mrr_negatives, B)
        src = self.src[a:b]
        cand = neg[(torch.arange(B, device=neg.device).view(-1, 1) + torch.arange(S, device=neg.device)) % B]  # [B, S]
        zs = z[self.assoc[src]].repeat_interleave(S, dim=0)
        neg_scores = self.link_pred(zs, z[self.assoc[cand.reshape(-1)]]).view(B, S)
        p = pos_out.view(B, 1)
        rank = 1.0 + (neg_scores > p).sum(1).to(p.dtype) + 0.5 * (neg_scores == p).sum(1).to(p.dtype)
        return 1.0 / rank

    def evaluate(self, split: str = "val") -> dict:
        """AP, AUC (means over batches) and MRR on ``"val"`` or ``"test"``
        (see the class docstring for the memory state each one starts from)."""
        if split not in ("val", "test"):
            raise ModelInputError("split", f"is {split!r}.", "use 'val' or 'test'.")
        a, b = (self.val_start, self.test_start) if split == "val" else (self.test_start, self.num_events)
        if a == b:
            raise ModelInputError(split, "has no events.", "use a larger val_ratio / test_ratio.")
        if self._train_end is None:
            # no epoch trained yet: the memory walks the training events without learning
            self._reset()
            self._training = False  # nothing stored yet: no flush
            self._walk(0, self.val_start, score=False)
            self._train_end, self._position = self._snapshot(), "train"
        want = "train" if split == "val" else "val"
        if self._position != want:
            self._restore(self._train_end)
            if split == "test":
                self._walk(self.val_start, self.test_start, score=False)
        out = self._walk(a, b, score=True)
        self._position = split
        return out
