r"""Chunked readers: dataset files larger than memory, read in chunks of
``chunk_rows`` lines into an on-disk, memory-mappable store
(:mod:`pyg_dynscale.data.mapped`), with the in-memory loaders' validation
and errors.

.. code-block:: python

    from pyg_dynscale.data.ingest import ingest_edge_list, ingest_event_list, ingest_jodie_csv

    events = ingest_jodie_csv("wikipedia.csv", "wikipedia.store")   # TemporalData, memory-mapped
    events = ingest_event_list("sx-mathoverflow.txt.gz", "mo.events")
    signal = ingest_edge_list("sx-mathoverflow.txt.gz", "mo.signal", window="7d")   # DynamicGraphSignal, memory-mapped
    signal = ingest_pygt_json("twitter_tennis_rg17.json", "tennis.signal")          # member by member
"""
from .edgelist import ingest_edge_list
from .events import ingest_event_list, ingest_jodie_csv
from .pygt_json import ingest_pygt_json
from .text import DEFAULT_CHUNK_ROWS

__all__ = ["DEFAULT_CHUNK_ROWS", "ingest_edge_list", "ingest_event_list", "ingest_jodie_csv", "ingest_pygt_json"]
