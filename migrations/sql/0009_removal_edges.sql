-- Each removed chunk's own edge counts in the removal log (docs/SCALING.md,
-- "The delta after a change").
--
-- A cached token graph holds every cached chunk's contribution to each edge's
-- weight (pgrag.chunk_edge_counts: its window pairs). pgrag.unindex_documents
-- now logs those counts with the chunk, so the overlay subtracts them instead
-- of probing the removed chunks' token pairs in pgrag.token_edge again.
--
-- Every statement stands alone (no session state, no DO blocks), so the file can
-- also be run one statement at a time (e.g. by a Citus-aware migrator).

ALTER TABLE pgrag.chunk_removal ADD COLUMN edge_a bigint[] NOT NULL DEFAULT '{}';

ALTER TABLE pgrag.chunk_removal ADD COLUMN edge_b bigint[] NOT NULL DEFAULT '{}';

ALTER TABLE pgrag.chunk_removal ADD COLUMN edge_w bigint[] NOT NULL DEFAULT '{}';

-- The rows logged before carry no counts: no cache applies them (a cache older
-- than the current version reads the corpus whole); they age out of the log.
UPDATE pgrag.graph_version SET logged_from = version;
