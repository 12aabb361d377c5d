-- BM25 in SQL (pgrag.bm25, and pgrag.hybrid through it) reads each chunk's
-- length twice: all of the corpus's for N and the mean length, and one for each
-- posting of the question's terms. A chunk's heap row is wide (its text and
-- vector), so each read was a heap fetch; with the length in an index beside
-- the key both are index-only scans once the pages are all-visible (after
-- autovacuum): on 2Wiki (7,520 chunks) a 2Wiki question's pgrag.bm25 took 10.1
-- ms of backend CPU without this index and 4.7 ms with it (docs/SCALING.md).
CREATE INDEX chunk_length_idx ON pgrag.chunk (corpus_id, chunk_id) INCLUDE (n_tokens);
