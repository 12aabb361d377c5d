-- Method families a corpus maintains at ingest (README "Method families").
-- ThreadRAG's semantic nodes roughly double an ingest's embedding time, so a
-- corpus builds them only once asked (`pgrag threadrag-index`, `--methods
-- threadrag`, kb.enable('threadrag')); a new corpus maintains none.
--
-- Every statement stands alone (no session state, no DO blocks), so the file can
-- also be run one statement at a time (e.g. by a Citus-aware migrator).

-- A text array, not a flag per family, so a later family is a new allowed value
-- rather than a new column.
ALTER TABLE pgrag.corpus
    ADD COLUMN families text[] NOT NULL DEFAULT '{}'
    CONSTRAINT corpus_families_known CHECK (families <@ ARRAY['threadrag']::text[]);

-- Corpora that already have semantic nodes were maintaining them: they keep
-- doing so. The CTE is planned on its own first (Citus runs it as a subplan, so
-- the reference table corpus is not updated through a join to a distributed one).
WITH built AS MATERIALIZED (SELECT DISTINCT corpus_id FROM pgrag.semantic_node)
UPDATE pgrag.corpus c SET families = ARRAY['threadrag']::text[]
FROM built WHERE built.corpus_id = c.corpus_id;
