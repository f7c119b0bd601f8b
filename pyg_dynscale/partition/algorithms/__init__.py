r"""The partitioning algorithms: PSS / PTS / PSS-TS (:mod:`.schemes`), PGC
(:mod:`.pgc` with label propagation, Algorithm 1, temporal coarsening and
the workload models), the byte counter that ranks PGC's candidates
(:mod:`.plan_count`); their compiled kernels (numba) and the choice between
them and the torch code are :mod:`pyg_dynscale.partition.compiled`.

A training process does not need this subpackage: the owner arrays, the
plan and the metrics live one level up (docs/design.md, "Packages").
"""
