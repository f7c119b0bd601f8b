r"""The stream part of :class:`~pyg_dynscale.ctdg.MemoryTrainer`'s state: what a resumed
run needs besides modules and optimizer (every memory copy as it was at the end of the last
training epoch, the random generators, the byte counters; with a partitioned placement each
owner's rows and the partition) as the flat ``{key: Tensor}`` that
:func:`~pyg_dynscale.training.checkpoint.save_checkpoint` writes, and back.

**Across devices.** A CUDA run also saves its CUDA generator (``rank<r>/cuda_rng``: the
attention dropout draws from it with parallelism ``(1, 1, 1)`` and no prefetcher); a CPU run
has none. :meth:`StreamCheckpoint.device_rng_keys` names such keys, so that a loader asks the
checkpoint only for those it holds: a CUDA checkpoint resumes on the CPU (the CPU generator,
restored, is all a CPU run draws from) and a CPU checkpoint on CUDA (the CUDA generator is
then seeded with :math:`f(\text{seed}, \text{epoch})`, the trainer's per-step seed function at
step and trainer :math:`-1`: deterministic, but not the draws an uninterrupted CUDA run would
make -- those never equal a CPU run's anyway). Everything else is device-independent: host
tensors, or device tensors that load onto any device.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import Tensor

from ..errors import ModelInputError
from .event_traffic import EventTraffic
from .memory_copies import MemoryCopies
from .rank_state import RankCopies

__all__ = ["StreamCheckpoint"]


def _flat_snapshot(prefix: str, snap: dict) -> dict:
    """A memory copy's snapshot (:meth:`~pyg_dynscale.ctdg.memory_copies.MemoryCopies.snapshot`)
    as ``{prefix + key: Tensor}`` (clones)."""
    mem = snap["memory"]
    out = {"memory": mem["memory"], "last_update": mem["last_update"], "neighbors": snap["neighbors"],
           "e_id": snap["e_id"], "cur_e_id": torch.tensor(int(snap["cur_e_id"]), dtype=torch.long),
           "training": torch.tensor(bool(snap["training"]))}
    for d in ("s", "d"):
        for name, x in zip(("order", "lo", "hi"), mem[d]):
            out[f"store_{d}/{name}"] = x
    return {prefix + key: x.detach().clone() for key, x in out.items()}


def _unflat_snapshot(prefix: str, state: dict) -> dict:
    """The inverse of :func:`_flat_snapshot`."""
    g = lambda key: state[prefix + key]  # noqa: E731
    return {"memory": {"memory": g("memory"), "last_update": g("last_update"),
                       "s": tuple(g(f"store_s/{n}") for n in ("order", "lo", "hi")),
                       "d": tuple(g(f"store_d/{n}") for n in ("order", "lo", "hi"))},
            "neighbors": g("neighbors"), "e_id": g("e_id"), "cur_e_id": int(g("cur_e_id")),
            "training": bool(g("training"))}


def _flat_rank_snapshot(prefix: str, owner: str, snap: dict) -> dict:
    """A per-rank memory copy's snapshot (:meth:`~pyg_dynscale.ctdg.rank_state.RankCopies.snapshot`:
    this owner's rows and its part of the owners' index) as ``{key: Tensor}`` (clones): the rows
    and the index under ``prefix + owner`` (``"copy<c>/owner<r>/"``), the training mode under ``prefix``."""
    mem = snap["memory"]
    out = {f"{prefix}{owner}memory": mem["memory"], f"{prefix}{owner}last_update": mem["last_update"],
           f"{prefix}training": torch.tensor(bool(snap["training"]))}
    out.update({f"{prefix}{owner}index/{key}": x for key, x in mem["index"].items()})
    return {key: x.detach().clone() for key, x in out.items()}


def _unflat_rank_snapshot(prefix: str, owner: str, state: dict, keys: tuple) -> dict:
    """The inverse of :func:`_flat_rank_snapshot` (``keys``: the index's,
    :data:`~pyg_dynscale.ctdg.owned_index.OwnedIndex.KEYS`)."""
    return {"memory": {"memory": state[f"{prefix}{owner}memory"], "last_update": state[f"{prefix}{owner}last_update"],
                       "index": {key: state[f"{prefix}{owner}index/{key}"] for key in keys}},
            "training": bool(state[f"{prefix}training"])}


class StreamCheckpoint:
    r"""Save and restore the stream state of one rank.

    Args:
        copies (MemoryCopies): the memory copies this process holds.
        traffic (EventTraffic): the byte counters.
        placement (PartitionedMemory, optional): a partitioned memory (its owner map checked on load).
        rank (int): this process; device: the training device.
        device_seed (callable): ``epoch -> int``: the CUDA generator's seed when a checkpoint of
            another device lacks it.
    """

    def __init__(self, copies: MemoryCopies, traffic: EventTraffic, placement, rank: int, device: torch.device,
                 device_seed: Callable[[int], int]) -> None:
        self.copies, self.traffic, self.placement = copies, traffic, placement
        self.rank, self.device, self.device_seed = rank, device, device_seed

    def state_dict(self, epoch: int) -> dict:
        r"""What a resumed run needs besides modules and optimizer, at an epoch boundary: a flat
        ``{key: Tensor}``.

        * ``copy<c>/...``: every memory copy this process holds, as it was at the end of the
          last training epoch (``memory [N, d]``, ``last_update [N]``, both message stores'
          ``order [E]``, ``lo [N]``, ``hi [N]``, the neighbour loader's ``neighbors [N, size]``,
          ``e_id [N, size]``, ``cur_e_id``); before the first epoch (which starts every copy from
          zero) the current buffers, with ``rank<r>/started`` false. The ranks of one memory copy
          hold the same copy: a checkpoint writes it once.
        * ``rank<r>/epoch``, ``rank<r>/rng`` (the global generator the next epoch's negatives
          and, with ``(1, 1, 1)``, its dropout draw from; evaluation re-seeds it, so it is taken
          after any evaluation), ``rank<r>/traffic`` (the byte counters); on CUDA
          ``rank<r>/cuda_rng`` (:meth:`device_rng_keys`).
        * Partitioned placements: each rank's own rows as ``copy<c>/owner<r>/memory [n_r, d]``
          and ``.../last_update [n_r]`` (every owner writes its part), and the partition,
          ``copy<c>/owner [N]``.
        * Events per rank (``event_placement="per_rank"``): no whole-stream message stores or
          neighbour loader; instead each owner's part of the owners' index, per rank as the rows
          are: ``copy<c>/owner<r>/index/<key>`` for every key of
          :meth:`OwnedIndex.state() <pyg_dynscale.ctdg.owned_index.OwnedIndex.state>` (neighbour
          slots ``nbr``, ``e_id`` ``[n_r, size]``, mailbox bounds ``lo``, ``hi`` ``[2, n_r]``, its
          entries ``entry_ev``, ``entry_other``, the event pool ``pool_id``, ``pool_t``,
          ``pool_msg [P, F]``: sizes that change as the stream moves on), and
          ``copy<c>/training``.
        """
        r = self.rank
        out = {f"rank{r}/epoch": torch.tensor(epoch, dtype=torch.long),
               f"rank{r}/started": torch.tensor(self.copies.started),
               f"rank{r}/rng": torch.get_rng_state(),
               f"rank{r}/traffic": self.traffic.saved()}
        out.update(self._device_rng())
        if self.per_rank:
            for c, snap in self.copies.saved().items():
                out.update(_flat_rank_snapshot(f"copy{c}/", f"owner{r}/", snap))
                out[f"copy{c}/owner"] = self.placement.owner.cpu().clone()
            return out
        for c, snap in self.copies.saved().items():
            out.update(_flat_snapshot(f"copy{c}/", snap))
        return self._owner_keys(out, f"owner{r}/") if self.placement is not None else out

    @property
    def per_rank(self) -> bool:
        """Whether this rank holds only its events and its owned vertices' index (its copies' state)."""
        return isinstance(self.copies, RankCopies)

    def _owner_keys(self, state: dict, owner: str) -> dict:
        """Partitioned: ``copy<c>/memory`` / ``last_update`` (this rank's rows) under ``copy<c>/<owner>``
        (``owner = "owner<r>/"``), the partition as ``copy<c>/owner``; ``owner = ""`` maps back."""
        out = {}
        for key, x in state.items():
            head, _, tail = key.partition("/")
            if head.startswith("copy") and tail in ("memory", "last_update", f"owner{self.rank}/memory",
                                                    f"owner{self.rank}/last_update"):
                key = f"{head}/{owner}{tail.rpartition('/')[2]}"
                if owner:
                    out[f"{head}/owner"] = self.placement.owner.cpu().clone()
            out[key] = x
        return out

    def _device_rng(self) -> dict:
        """``{"rank<r>/cuda_rng": state}`` on CUDA, ``{}`` on the CPU."""
        if self.device.type == "cuda":
            return {f"rank{self.rank}/cuda_rng": torch.cuda.get_rng_state(self.device)}
        return {}

    def device_rng_keys(self) -> list:
        """The keys of :meth:`state_dict` that only a run on this kind of device writes (a
        checkpoint written on another device lacks them, or has others): a loader takes them
        from the checkpoint only where it holds them."""
        return list(self._device_rng())

    def _set_device_rng(self, state: Optional[Tensor], epoch: int) -> None:
        """The CUDA generator from ``state``, or (``None``: a checkpoint of another device) seeded
        with ``device_seed(epoch)``."""
        gen = torch.cuda.default_generators[self.device.index if self.device.index is not None else 0]
        if state is not None:
            gen.set_state(state.cpu())
        else:
            gen.manual_seed(self.device_seed(epoch))

    def load_state_dict(self, state: dict) -> int:
        """Restore what :meth:`state_dict` returned (this process's keys); returns the epoch."""
        r = self.rank
        if self.placement is not None:
            for key in [k for k in state if k.startswith("copy") and k.endswith("/owner")]:
                if not torch.equal(state[key].cpu(), self.placement.owner.cpu()):
                    raise ModelInputError("partition", "differs from the checkpoint's.",
                                          "resume with the partition (owner tensor) the checkpoint was written with.")
            if not self.per_rank:
                state = self._owner_keys(state, "")
        for key in (f"rank{r}/epoch", f"rank{r}/started", f"rank{r}/rng", f"rank{r}/traffic"):
            if key not in state:
                raise ModelInputError("state", f"lacks {key!r}.", "give what MemoryTrainer.state_dict() returned "
                                      "on a trainer with the same parallelism and world size.")
        held = self.copies.held
        if self.per_rank:
            self._check_rank_keys(state, held)
        elif self._held_copies(state) != sorted(held):
            have = self._held_copies(state)
            raise ModelInputError("state", f"holds memory copies {have}, this trainer {held}.",
                                  "resume with the same parallelism and world size.")
        epoch = int(state[f"rank{r}/epoch"])
        torch.set_rng_state(state[f"rank{r}/rng"].cpu())
        for key in self.device_rng_keys():  # a device generator; a checkpoint of another device lacks it
            self._set_device_rng(state.get(key), epoch)
        self.traffic.load(state[f"rank{r}/traffic"])
        if not bool(state[f"rank{r}/started"]):  # saved before the first epoch: it starts every copy from zero
            self.copies.restart()
        elif self.per_rank:
            keys = self.copies.state.exchange.index.KEYS
            self.copies.load({c: _unflat_rank_snapshot(f"copy{c}/", f"owner{r}/", state, keys) for c in held})
        else:
            self.copies.load({c: _unflat_snapshot(f"copy{c}/", state) for c in self.copies.held})
        return epoch

    @staticmethod
    def _held_copies(state: dict) -> list:
        """The memory copies a (whole-stream) state holds: ``c`` of every ``copy<c>/memory``."""
        return sorted(int(key[4:-7]) for key in state if key.startswith("copy") and key.endswith("/memory"))

    def _check_rank_keys(self, state: dict, held: list) -> None:
        """Events per rank: ``state`` holds this owner's rows and index part of every held copy."""
        r = self.rank
        keys = self.copies.state.exchange.index.KEYS
        for c in held:
            need = [f"copy{c}/owner{r}/{k}" for k in ("memory", "last_update")]
            need += [f"copy{c}/owner{r}/index/{k}" for k in keys] + [f"copy{c}/training"]
            missing = [key for key in need if key not in state]
            if missing:
                raise ModelInputError("state", f"lacks {missing[0]!r} (rank {r}'s part of the owners' index).",
                                      "resume with a state_dict() of event_placement='per_rank' on the same "
                                      "parallelism and world size.")
