r"""PGC, partitioning by graph chunks (DGC §4), one module per stage."""
