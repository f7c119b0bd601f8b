r"""The partitioning algorithms: PSS / PTS / PSS-TS (:mod:`.schemes`), PGC
(:mod:`.pgc` with label propagation, Algorithm 1, temporal coarsening and
the workload models), the byte counter that ranks PGC's candidates
(:mod:`.plan_count`), and their compiled kernels (numba).

A training process does not need this subpackage: the owner arrays, the
plan and the metrics live one level up (docs/design.md, "Packages").
"""
