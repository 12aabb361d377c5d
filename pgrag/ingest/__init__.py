"""Ingest as a pipeline of named stages, one module each:

- validate: ``pgrag.sources.validate`` (all input, before anything is written);
- change detection: ``changes`` (the one change check, by content hash);
- prepare: ``prepare`` (spaCy sentences and entities, chunks, embeddings; no database);
- write: ``write`` (one transaction under the corpus's write lock; SQL's
  ``pgrag_internal.index_chunks`` derives postings and edges from the one token pipeline);
- the families' hooks: ``hooks`` (a registry by family name), ``nodes`` (ThreadRAG's
  semantic nodes, which roughly double the embedding time: only for a corpus
  that maintains the ``threadrag`` family).

Three callers run the same stages: client ingest (``pipeline.ingest``, via
``kb.ingest``), ``index_pending`` (``kb.index`` and SQL's ``pgrag.index``: documents
inserted or changed in the tables) and the follow worker (``pgrag.follow``). A
document is either fully indexed or as it was before, and re-running an
interrupted ingest finishes the job (unchanged documents are skipped).
"""

from . import nodes as _nodes  # noqa: F401 - registers the threadrag family's hook
from .changes import Change, Stored, change_of, read_states, states_in, unchanged
from .pipeline import index_pending, ingest, prefetches, refresh_statistics
from .prepare import Prepared, describe, prepare, prepare_each
from .report import IngestReport
from .write import update_metadata, write_prepared

__all__ = ["Change", "IngestReport", "Prepared", "Stored", "change_of", "describe", "index_pending", "ingest",
           "prefetches", "prepare", "prepare_each", "read_states", "refresh_statistics", "states_in", "unchanged",
           "update_metadata", "write_prepared"]
