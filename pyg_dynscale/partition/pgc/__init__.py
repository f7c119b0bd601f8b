r"""PGC, partitioning by graph chunks (DGC §4), one module per stage.

:mod:`.pipeline` (:func:`~.pipeline.partition_pgc`, the steps in order) runs
:mod:`.coarsen` (the weighted supergraph and temporal coarsening),
:mod:`.chunks` (chunk generation by :mod:`.label_propagation`, the chunk
hierarchy and its refinement on the way down), :mod:`.assign` (Algorithm 1
and chunk refinement), :mod:`.fm` (FM passes), :mod:`.starts` (the
multi-start of refined PSS / PTS partitions) and :mod:`.rebalance` (round
balance); :mod:`.options` holds :class:`~.options.PGCOptions` and :mod:`.stages` the
records the steps hand each other. The compiled
twins of their loops are in :mod:`pyg_dynscale.partition.compiled`.
"""
