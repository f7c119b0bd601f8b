r"""The partition schemes: PSS / PTS / PSS-TS, the locality order, ``scheme="auto"`` and the entry by name."""
