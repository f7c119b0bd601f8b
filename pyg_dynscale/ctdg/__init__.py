r"""Event streams (continuous-time dynamic graphs) and memory-based temporal
GNNs: PyG's ``TemporalData``, ``TGNMemory`` and ``examples/tgn.py`` trained by
:class:`MemoryTrainer`, with DistTGL's static node memory.

.. code-block:: python

    from pyg_dynscale.ctdg import MemoryTrainer, TGN, load_jodie_csv

    data = load_jodie_csv("wikipedia.csv")                     # TemporalData
    model = TGN(data.num_nodes, data.msg.size(-1), memory_dim=100, time_dim=100, embedding_dim=100)
    with MemoryTrainer(model, data, batch_size=200, lr=1e-4, num_neighbors=10) as trainer:
        loss = trainer.train_epoch()
        trainer.evaluate("val")                                # {"loss": ..., "ap": ..., "auc": ..., "mrr": ...}

The modules: the data layer (:mod:`.events`), the trainer (:mod:`.trainer`) with
DistTGL's :math:`i \times j \times k` parallelism (:mod:`.schedule`; one process
emulates any schedule, :mod:`.parallel` runs it on ``torch.distributed``
processes), the objects that hold its state -- the memory copies
(:mod:`.memory_copies`), the step context (:mod:`.step_context`), the link
scores (:mod:`.scoring`), the byte accounting (:mod:`.event_traffic`), the
checkpointed stream state (:mod:`.stream_checkpoint`) --, the static memory and
its pre-training, the memory service (:mod:`.service`) and the neighbour
prefetcher (:mod:`.prefetch`); Sven's partitioned memory
(``memory_placement="partitioned" | "sven"``, :mod:`.memory_placement`, the
trainer's side in :mod:`.partitioned_fetch`), who owns each vertex
(:mod:`.memory_partition`: range, interval, Re-FlexBiCut), its owner-local id map
(:mod:`.owner_map`), the micro-batch pipeline (:mod:`.microbatch`) and the
delayed gradient all-reduce (:mod:`.parallel`).
"""
from .events import (
    check_events,
    chronological_split,
    load_event_list,
    load_jodie_csv,
    split_ranges,
    synthetic_events,
)
from .events import ingest_event_list, ingest_jodie_csv, load_events_store, save_events_store  # part B: files larger than memory
from .models import TGN, GraphAttentionEmbedding, LinkPredictor
from .owner_map import OwnerMap
from .pretrain import pretrain_static_memory
from .schedule import EventSchedule, LocalBatch, Step
from .static import StaticMemory
from .trainer import MemoryTrainer

__all__ = [
    "EventSchedule",
    "GraphAttentionEmbedding",
    "LinkPredictor",
    "LocalBatch",
    "MemoryTrainer",
    "OwnerMap",
    "StaticMemory",
    "Step",
    "TGN",
    "check_events",
    "chronological_split",
    "ingest_event_list",
    "ingest_jodie_csv",
    "load_events_store",
    "save_events_store",
    "load_event_list",
    "load_jodie_csv",
    "pretrain_static_memory",
    "split_ranges",
    "synthetic_events",
]
