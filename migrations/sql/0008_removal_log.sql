-- A log of removed chunks (docs/SCALING.md, "The delta after a change").
--
-- A process that caches a corpus's ranking index (token graph, postings, chunk
-- vectors) at graph version v applies what changed since as a small overlay
-- (pgrag.postings.advance) instead of reading the corpus again. Added chunks
-- are found by id (ids only grow); a removed chunk leaves nothing behind, so
-- pgrag.unindex_documents records it here with the tokens it held: the rows,
-- document frequencies and edges the overlay must change.
--
-- Every statement stands alone (no session state, no DO blocks), so the file can
-- also be run one statement at a time (e.g. by a Citus-aware migrator).

CREATE TABLE pgrag.chunk_removal (
    corpus_id  bigint NOT NULL REFERENCES pgrag.corpus (corpus_id) ON DELETE CASCADE,
    chunk_id   bigint NOT NULL,
    version    bigint NOT NULL,       -- the graph version the removal made
    tokens     bigint[] NOT NULL,     -- the chunk's distinct token ids
    PRIMARY KEY (corpus_id, chunk_id)
);

CREATE INDEX chunk_removal_version ON pgrag.chunk_removal (corpus_id, version);

-- The log holds every removal made after graph version logged_from: a cache of
-- an older version reads the corpus whole. Removals made before this migration
-- were not logged, so existing corpora start from their current version.
ALTER TABLE pgrag.graph_version ADD COLUMN logged_from bigint NOT NULL DEFAULT 0;

UPDATE pgrag.graph_version SET logged_from = version;
