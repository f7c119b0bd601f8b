"""Host read-backs of the stale cache (issue 35 item 4), counted on the CPU by
:class:`tests.helpers.host_syncs.HostSyncs` around whole training epochs on 2 gloo
ranks: the decomposed path (T-GCN, the DySAT link readout) and the black-box
path (PyGT's GConvGRU), every policy, ``scope="global"``, ``backward="send"``,
the direct and the staged transport.

Budgets per stale exchange (docs/stale.md, "Host reads"): none in the first
epoch (every row goes, no mask); afterwards one -- the fresh rows per peer
that the row ``all_to_all`` needs as host split sizes, read with
:math:`D_r` and :math:`\\theta_r` in one small tensor. Zero is out of reach
without changing which rows go: the number of rows that move depends on the
device values of this exchange, and a collective of variable size takes its
sizes on the host. The backward reads nothing, the rest of the epoch reads
no more than the exact path's, and no exchange builds a tensor from host data
(on a GPU, a host-to-device copy waits for the stream too).

Before this (17c1607), counted the same way: 8 + 2P events per exchange with
``drift`` (P: destinations this rank sends rows to; 10 on 2 ranks): ``D``,
two per destination in the budget loop, the boolean index and maximum of the
kept drifts, ``nonzero``, and the mask to numpy twice (``.cpu()`` and
``.numpy()``, two events each); 6 with a factor of :math:`D_r`; plus, unseen
on the CPU, the received mask's ``.cpu()`` and two host-to-device copies."""
from __future__ import annotations

import pytest
import torch

from pyg_dynscale.distributed.stale import StaleConfig
from tests.helpers import blackbox_cases as bcases
from tests.helpers import distributed_cases as cases

#: read-backs per stale exchange: first epoch, later epochs (see the module doc for why not 0)
FIRST_EPOCH, LATER_EPOCHS = 0, 1
EPOCHS = 2
#: (label, path, stale, transport); path "decomposed": T-GCN (2 layers), "link": DySAT link prediction (the
#: readout is cached too), "blackbox": PyGT's GConvGRU
CONFIGS = [
    ("decomposed exact", "decomposed", None, "auto"),
    ("decomposed drift", "decomposed", "drift", "auto"),
    ("decomposed drift send", "decomposed", StaleConfig("drift", 0.05, backward="send"), "auto"),
    ("decomposed static", "decomposed", "static:0.5", "auto"),
    ("decomposed printed", "decomposed", "printed", "auto"),
    ("decomposed intent global", "decomposed", StaleConfig("intent", scope="global"), "auto"),
    ("decomposed ramp", "decomposed", "ramp", "auto"),
    ("decomposed rise global send", "decomposed", StaleConfig("rise", scope="global", backward="send"), "auto"),
    ("decomposed frozen", "decomposed", "static:inf", "auto"),
    ("decomposed drift staged", "decomposed", "drift", "staged"),
    ("link exact", "link", None, "auto"),
    ("link drift", "link", "drift", "auto"),
] + ([
    ("blackbox exact", "blackbox", None, "auto"),
    ("blackbox drift", "blackbox", "drift:0.05", "auto"),
    ("blackbox static global send", "blackbox", StaleConfig("static", 0.5, backward="send", scope="global"), "auto"),
] if bcases.HAVE_PYGT else [])


def _trainer(world_size: int, path: str, stale, backend: str) -> tuple:
    """``(trainer, modules)`` with fixed initial parameters, float64."""
    from pyg_dynscale.distributed import DistributedTrainer
    from pyg_dynscale.nn import adapt

    if path == "blackbox":
        from tests.helpers.step_reuse import make_cell

        m, head = make_cell("GConvGRU", 2)
        sig = bcases.signal("plain")
        part = bcases.Partition("random", world_size, torch.randint(
            0, world_size, (sig.num_vertex_time_nodes,), generator=torch.Generator().manual_seed(9)))
        tr = DistributedTrainer(m, sig, part, head=head, loss="mse", path="blackbox", stale=stale, backend=backend,
                                optimizer=lambda p: torch.optim.SGD(p, lr=0.1))
        return tr, (m, head)
    name = "tgcn2" if path == "decomposed" else "dysat_link"
    sig = cases.signal()
    m, head, loss = cases.model(name)
    part = cases.make_partition(sig, "random", world_size, adapt(m).dependency_pattern(8))
    tr = DistributedTrainer(m, sig, part, head=head, loss=loss, optimizer=cases.optimizer_for(name), stale=stale,
                            backend=backend)
    return tr, (m, head)


class _HostBuilt(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts tensors made from host data (``torch.tensor``, ``as_tensor``, ``from_numpy``: ``lift_fresh``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if "lift_fresh" in str(func):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _counted_epoch(tr, modules: tuple) -> dict:
    """One ``train_epoch`` under the counters: the reads of each stale exchange's forward (in call order) and
    of each stale backward, the host-built tensors of each forward, and the epoch's reads and events."""
    from tests.helpers.host_syncs import HostSyncs

    from pyg_dynscale.distributed import stale as stale_mod

    forward, backward = [], []
    with HostSyncs() as syncs, _HostBuilt() as built:
        syncs.mark_modules(*modules)
        syncs.mark_optimizer(tr.optimizer)
        if tr.stale is not None:  # the caches live on the device, between epochs too
            syncs.mark(*[(st.sent, st.recv) for st in tr.stale.states.values() if st.sent is not None])
        cache, rows = tr.stale, stale_mod._StaleRows
        original_exchange, original_backward = (cache.exchange if cache is not None else None), rows.backward

        def exchange(*args, **kwargs):
            before = (syncs.count, built.count)
            out = original_exchange(*args, **kwargs)
            forward.append((syncs.count - before[0], built.count - before[1]))
            return out

        def rows_backward(ctx, *grads):  # noqa: ANN001
            before = syncs.count
            out = original_backward(ctx, *grads)
            backward.append(syncs.count - before)
            return out

        if cache is not None:
            cache.exchange = exchange
        rows.backward = staticmethod(rows_backward)
        try:
            tr.train_epoch()
        finally:
            rows.backward = staticmethod(original_backward)
            if cache is not None:
                del cache.exchange
    meta = sum(v for k, v in tr.comm.bytes.items() if k[2] == "stale_meta")
    return {"forward": forward, "backward": backward, "count": syncs.count, "events": list(syncs.events),
            "stale_meta": meta}


def _job(rank: int, world_size: int) -> list:
    from pyg_dynscale.nn.snapshot_model import default_dtype

    out = []
    with default_dtype(torch.float64):  # PyGT's GConv builds buffers with the default dtype
        for label, path, stale, backend in CONFIGS:
            tr, modules = _trainer(world_size, path, stale, backend)
            out.append([_counted_epoch(tr, modules) for _ in range(EPOCHS)])
    return out


@pytest.fixture(scope="module")
def counts() -> dict:
    from pyg_dynscale.distributed import spawn

    results = spawn(_job, 2, timeout=300)
    return {label: [r[i] for r in results] for i, (label, *_) in enumerate(CONFIGS)}


def test_no_read_back_in_the_first_epoch_and_one_per_exchange_after(counts) -> None:
    for label, path, stale, _ in CONFIGS:
        if stale is None:
            continue
        for rank, epochs in enumerate(counts[label]):
            for e, got in enumerate(epochs):
                where = f"{label}, rank {rank}, epoch {e + 1}: {got['events']}"
                budget = FIRST_EPOCH if e == 0 else LATER_EPOCHS
                assert got["forward"], where  # the cache ran (the test cannot pass on no exchange)
                assert all(n <= budget for n, _ in got["forward"]), (got["forward"], where)
                assert all(b == 0 for _, b in got["forward"]), (got["forward"], where)  # no host-built tensor
                assert got["backward"] and all(n == 0 for n in got["backward"]), (got["backward"], where)
                # the rest of the epoch reads what the exact path's epoch reads (the loss), no more
                exact = counts[f"{path} exact"][rank][e]["count"]
                assert got["count"] - sum(n for n, _ in got["forward"]) <= exact, where
                assert (got["stale_meta"] > 0) == (e > 0), where  # later epochs move masks: the decided path ran


def test_the_one_read_is_the_split_sizes(counts) -> None:
    """Where the later epochs' reads happen: the fresh row counts' ``tolist`` in ``StaleCache._decide``, and
    nothing else in the cache's files. (An exchange of rows no marked tensor flowed into -- the black-box
    path's initial states -- reads too, unseen by the counter on the CPU.)"""
    for label, _, stale, _ in CONFIGS:
        if stale is None:
            continue
        for epochs in counts[label]:
            for got in epochs[1:]:
                mine = [e for e in got["events"] if "distributed/stale" in e]
                assert len(mine) == sum(n for n, _ in got["forward"]) > 0, (label, mine)
                assert all(e.startswith("Tensor.tolist at distributed/stale.py:") for e in mine), (label, mine)
