r"""The partition schemes and the entry point by name.

:mod:`.dispatch` (:func:`~.dispatch.partition`: a scheme by name),
:mod:`.snapshot_sequence` (PSS / PTS / PSS-TS, SC'21 and DGC §2.2, baseline
and balanced), :mod:`.vertex_order` (the Cuthill-McKee order of PTS with
``locality=True``) and :mod:`.auto` (``scheme="auto"``: the candidate with
the lowest predicted epoch). PGC is its own package,
:mod:`pyg_dynscale.partition.pgc`.
"""
