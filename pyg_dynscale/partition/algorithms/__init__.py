r"""Deprecated: the partitioning algorithms moved into stage folders (issue 39).

``pyg_dynscale.partition.algorithms.<old>`` imports the moved module itself
(not a copy: patching it patches what the package uses) for one release,
with a :class:`DeprecationWarning` naming the new place:

========================  ==========================================================
old                        new (``pyg_dynscale.partition.``)
========================  ==========================================================
``dispatch``               ``schemes.dispatch``
``schemes``                ``schemes.snapshot_sequence``
``vertex_order``           ``schemes.vertex_order``
``auto``                   ``schemes.auto``
``pgc``                    ``pgc.pipeline``
``pgc_options``            ``pgc.options``
``label_propagation``      ``pgc.label_propagation``
``coarsen``                ``pgc.coarsen``
``assign``                 ``pgc.assign``
``fm``                     ``pgc.fm``
``round_balance``          ``pgc.rebalance``
``workload``               ``costs.workload``
``round_workload``         ``costs.rounds``
``plan_count``             ``costs.plan_bytes``
========================  ==========================================================

The public names (``from pyg_dynscale.partition import partition_pgc, ...``)
never moved.
"""
import importlib
import sys
import warnings

#: old submodule -> its module now
MOVED = {
    "dispatch": "schemes.dispatch", "schemes": "schemes.snapshot_sequence", "vertex_order": "schemes.vertex_order",
    "auto": "schemes.auto", "pgc": "pgc.pipeline", "pgc_options": "pgc.options",
    "label_propagation": "pgc.label_propagation", "coarsen": "pgc.coarsen", "assign": "pgc.assign", "fm": "pgc.fm",
    "round_balance": "pgc.rebalance", "workload": "costs.workload", "round_workload": "costs.rounds",
    "plan_count": "costs.plan_bytes",
}

warnings.warn("pyg_dynscale.partition.algorithms moved into pyg_dynscale.partition.{schemes, pgc, costs}: "
              + ", ".join(f"{old} -> {new}" for old, new in MOVED.items())
              + "; import from there (the old paths work for one release).", DeprecationWarning, stacklevel=2)

_package = __name__.rsplit(".", 1)[0]
for _old, _new in MOVED.items():
    # registered before ``import ...algorithms.<old>`` looks for a file: the import finds the moved module here
    sys.modules[f"{__name__}.{_old}"] = globals()[_old] = importlib.import_module(f"{_package}.{_new}")
del _old, _new
