r"""What the partitioners weigh and predict.

:mod:`.node` (the default cost of a vertex-time node, :math:`1 + \deg_\text{in}`,
loaded by the metrics without any algorithm), :mod:`.workload` (the chunk
workload models of DGC §4.2 and the one resolver, :func:`~.workload.resolve_workload`),
:mod:`.epoch` (the one count of an epoch's critical path: rows, halo, rounds,
longest pieces), :mod:`.rounds` (the round-aware model fitted on the runtime,
priced on those counts) and :mod:`.plan_bytes` (a plan's bytes counted
without building it). ``scheme="auto"`` prices the same counts with its own
constants (:class:`~pyg_dynscale.partition.schemes.auto.CostModel`).
"""
