r"""Global vertex id -> (owner rank, row in the owner's store): Sven's
dual-hash id mapping (TPDS §4.1), for vertex-partitioned node memory.

A partition gives every vertex :math:`v` an owner :math:`\lambda_1(v)` (the
``[N]`` tensor ``owner``); owner :math:`p` stores the node memory and messages
of its vertices as rows :math:`0 .. n_p - 1` in increasing global id, so
:math:`\lambda_2(v)` is the rank of :math:`v` among the vertices of its owner:

.. math::
    \lambda_2(v) = \bigl|\{u < v : \lambda_1(u) = \lambda_1(v)\}\bigr|.

Two ways to evaluate :math:`\lambda_2` (the results are the same, the cost is
not; ``benchmarks/bench_owner_map.py`` compares them):

* ``"dense"``: an ``[N]`` ``int64`` table, one gather per lookup.
* ``"hash"``: Sven's per-trainer map as a torch-friendly equivalent of a hash
  table, the keys :math:`\lambda_1(v) \cdot N + v` of all vertices sorted
  (each owner's vertices are one sorted run), looked up with
  ``torch.searchsorted``: :math:`\lambda_2(v) = \mathrm{pos}(v) - \mathrm{ptr}_{\lambda_1(v)}`.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..errors import ModelInputError

__all__ = ["OWNER_MAP_KINDS", "OwnerMap"]

#: The lookups :class:`OwnerMap` builds; ``"dense"`` is the default (faster in
#: ``benchmarks/bench_owner_map.py``, see docs/events.md).
OWNER_MAP_KINDS = ("dense", "hash")


class OwnerMap:
    r"""Owner and owner-local row of every vertex of a vertex partition.

    Args:
        owner (Tensor): ``[N]`` integer, the owner rank :math:`\lambda_1(v)` of
            every vertex, in ``[0, num_parts)`` (parts may be empty).
        num_parts (int): the number of owners :math:`M`.
        kind (str): ``"dense"`` (an ``[N]`` local-id table) or ``"hash"``
            (sorted keys + ``searchsorted``); see the module docstring.

    Attributes:
        owner (Tensor): ``[N]`` ``int64``, :math:`\lambda_1`.
        ptr (Tensor): ``[M + 1]`` ``int64``, owner :math:`p`'s vertices are
            ``order[ptr[p]:ptr[p + 1]]``.
        order (Tensor): ``[N]`` ``int64``, the vertices grouped by owner, each
            group in increasing global id.
    """

    def __init__(self, owner: Tensor, num_parts: int, kind: str = "dense") -> None:
        if isinstance(num_parts, bool) or not isinstance(num_parts, int) or num_parts < 1:
            raise ModelInputError("num_parts", f"is {num_parts!r}.", "use an integer >= 1.")
        if kind not in OWNER_MAP_KINDS:
            raise ModelInputError("kind", f"is {kind!r}.", f"use one of {OWNER_MAP_KINDS}.")
        if not isinstance(owner, Tensor):
            raise ModelInputError("owner", f"is a {type(owner).__name__}, not a tensor.",
                                  "give an [N] int64 tensor of owner ranks.")
        if owner.dim() != 1:
            raise ModelInputError("owner", f"has shape {tuple(owner.shape)}.", "give a 1-D [N] tensor, one owner per vertex.")
        if owner.dtype.is_floating_point or owner.dtype.is_complex or owner.dtype == torch.bool:
            raise ModelInputError("owner", f"has dtype {owner.dtype}.", "give an integer (int64) tensor.")
        owner = owner.long()
        if owner.numel() and (int(owner.min()) < 0 or int(owner.max()) >= num_parts):
            raise ModelInputError("owner", f"has values in [{int(owner.min())}, {int(owner.max())}], "
                                  f"outside [0, {num_parts}).", f"give owner ranks in [0, num_parts={num_parts}).")
        self.owner = owner
        self.num_parts = num_parts
        self.kind = kind
        n = owner.numel()
        self.num_nodes = n
        # stable: inside one owner's group the vertices stay in increasing global id
        self.order = torch.sort(owner, stable=True).indices
        counts = torch.bincount(owner, minlength=num_parts)
        self.ptr = torch.zeros(num_parts + 1, dtype=torch.long, device=owner.device)
        self.ptr[1:] = torch.cumsum(counts, 0)
        self._counts = counts.tolist()
        self._bounds = self.ptr.tolist()
        if kind == "dense":
            local = torch.empty(n, dtype=torch.long, device=owner.device)
            local[self.order] = torch.arange(n, device=owner.device) - self.ptr[owner[self.order]]
            self._local = local
        else:
            self._keys = owner[self.order] * max(n, 1) + self.order  # sorted: by owner, then by id

    def _check_ids(self, ids: Tensor) -> Tensor:
        if not isinstance(ids, Tensor) or ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise ModelInputError("ids", f"is {type(ids).__name__}"
                                  f"{'' if not isinstance(ids, Tensor) else ' of dtype ' + str(ids.dtype)}.",
                                  "give an integer tensor of global vertex ids.")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            raise ModelInputError("ids", f"has ids in [{int(ids.min())}, {int(ids.max())}], outside "
                                  f"[0, {self.num_nodes}).", "give global vertex ids of this partition's graph.")
        return ids.long()

    def _check_part(self, part: int) -> int:
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < self.num_parts:
            raise ModelInputError("part", f"is {part!r}.", f"use an owner rank in [0, {self.num_parts}).")
        return part

    def owner_of(self, ids: Tensor) -> Tensor:
        r""":math:`\lambda_1`: the owner rank of each id (``int64``, the shape of ``ids``)."""
        return self.owner[self._check_ids(ids)]

    def local_of(self, ids: Tensor) -> Tensor:
        r""":math:`\lambda_2`: the row of each id in its owner's store (``int64``, the shape of ``ids``)."""
        ids = self._check_ids(ids)
        if self.kind == "dense":
            return self._local[ids]
        own = self.owner[ids]
        pos = torch.searchsorted(self._keys, own * max(self.num_nodes, 1) + ids)
        return pos - self.ptr[own]

    def owned(self, part: int) -> Tensor:
        """The global ids owner ``part`` stores, sorted (row :math:`r` holds ``owned(part)[r]``)."""
        p = self._check_part(part)
        return self.order[self._bounds[p]:self._bounds[p + 1]]

    def num_owned(self, part: int) -> int:
        """How many vertices owner ``part`` stores."""
        return self._counts[self._check_part(part)]

    def __repr__(self) -> str:
        return f"OwnerMap(num_nodes={self.num_nodes}, num_parts={self.num_parts}, kind={self.kind!r})"
