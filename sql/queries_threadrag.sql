-- ThreadRAG: semantic nodes, name vectors and query-time candidates.
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

-- name: insert_narrative_edges
-- Narrative edges between consecutive semantic nodes of the given documents (weight 1).
INSERT INTO pgrag.semantic_edge (corpus_id, node_a, node_b, kind, weight)
SELECT a.corpus_id, least(a.node_id, b.node_id), greatest(a.node_id, b.node_id), 'narrative', 1.0
FROM pgrag.semantic_node a
JOIN pgrag.semantic_node b ON b.corpus_id = a.corpus_id AND b.document_id = a.document_id
     AND b.ordinal = a.ordinal + 1
WHERE a.corpus_id = %(corpus_id)s AND a.document_id = ANY (%(document_ids)s::bigint[])
ON CONFLICT DO NOTHING;

-- name: drop_semantic_nodes
-- Delete every semantic node of a corpus (their edges cascade); returns how many.
WITH gone AS (DELETE FROM pgrag.semantic_node WHERE corpus_id = %(corpus_id)s RETURNING 1)
SELECT count(*) FROM gone;

-- name: drop_entity_vectors
-- Delete every stored name vector of a corpus (they belong to the threadrag family too).
DELETE FROM pgrag.entity_vector WHERE corpus_id = %(corpus_id)s;

-- name: drop_entity_vectors_of
-- Delete the name vectors of some documents (a node backfill writes them again with the nodes).
DELETE FROM pgrag.entity_vector WHERE corpus_id = %(corpus_id)s AND document_id = ANY (%(document_ids)s::bigint[]);

-- name: entity_vectors
-- results: binary
-- Stored name vectors by key (pgrag.nlp.name_key): one per key, the first
-- document's (every copy is the same text's vector; a common name has hundreds).
SELECT k.key, v.embedding
FROM unnest(%(keys)s::text[]) AS k(key)
CROSS JOIN LATERAL (SELECT e.embedding FROM pgrag.entity_vector e
                    WHERE e.corpus_id = %(corpus_id)s AND e.key = k.key
                    ORDER BY e.document_id LIMIT 1) v;

-- name: document_names
-- The stored mentions of documents' entities with the given labels, in text order
-- (the rows a name vector is built from): document, entity, where it starts.
SELECT c.document_id, e.entity, e.char_start FROM pgrag.chunk_entity e
JOIN pgrag.chunk c ON c.corpus_id = e.corpus_id AND c.chunk_id = e.chunk_id
WHERE c.corpus_id = %(corpus_id)s AND c.document_id = ANY (%(document_ids)s::bigint[])
  AND e.label = ANY (%(labels)s::text[])
ORDER BY c.document_id, e.char_start, e.char_end, e.chunk_id;

-- name: documents_without_entity_vectors
-- Documents with semantic nodes and named entities but no name vectors: those
-- indexed before migration 0010 (what a backfill must add).
SELECT d.document_id FROM pgrag.document d
WHERE d.corpus_id = %(corpus_id)s AND d.indexed_hash = d.content_hash
  AND EXISTS (SELECT 1 FROM pgrag.semantic_node n WHERE n.corpus_id = d.corpus_id AND n.document_id = d.document_id)
  AND EXISTS (SELECT 1 FROM pgrag.chunk c
              JOIN pgrag.chunk_entity e ON e.corpus_id = c.corpus_id AND e.chunk_id = c.chunk_id
              WHERE c.corpus_id = d.corpus_id AND c.document_id = d.document_id
                AND e.label = ANY (%(labels)s::text[]))
  AND NOT EXISTS (SELECT 1 FROM pgrag.entity_vector v
                  WHERE v.corpus_id = d.corpus_id AND v.document_id = d.document_id)
ORDER BY d.document_id;

-- name: documents_ready_for_entity_vectors
-- Of the given documents, those still indexed at the given hash, with nodes and without name vectors (locked).
SELECT d.document_id FROM pgrag.document d
JOIN unnest(%(document_ids)s::bigint[], %(hashes)s::text[]) AS x(document_id, hash)
     ON d.document_id = x.document_id
WHERE d.corpus_id = %(corpus_id)s AND d.content_hash = x.hash AND d.indexed_hash = x.hash
  AND EXISTS (SELECT 1 FROM pgrag.semantic_node n WHERE n.corpus_id = d.corpus_id AND n.document_id = d.document_id)
  AND NOT EXISTS (SELECT 1 FROM pgrag.entity_vector v
                  WHERE v.corpus_id = d.corpus_id AND v.document_id = d.document_id)
FOR UPDATE OF d;

-- name: documents_without_nodes
-- Indexed documents with sentences but no semantic nodes yet (what a backfill must do).
SELECT d.document_id FROM pgrag.document d
WHERE d.corpus_id = %(corpus_id)s AND d.indexed_hash = d.content_hash
  AND EXISTS (SELECT 1 FROM pgrag.sentence s WHERE s.corpus_id = d.corpus_id AND s.document_id = d.document_id)
  AND NOT EXISTS (SELECT 1 FROM pgrag.semantic_node n
                  WHERE n.corpus_id = d.corpus_id AND n.document_id = d.document_id)
ORDER BY d.document_id;

-- name: fill_node_terms
-- Terms of the nodes written before migration 0011 (threadrag_nodes tokenizes those
-- at every query); how many were filled.
WITH filled AS (
    UPDATE pgrag.semantic_node SET terms = pgrag.tokenize(text)
    WHERE corpus_id = %(corpus_id)s AND terms IS NULL
    RETURNING 1
)
SELECT count(*) FROM filled;

-- name: segmentation_input
-- Title, body, hash and sentence spans of documents, for building their nodes.
SELECT d.document_id, d.title, d.body, d.content_hash,
       array_agg(s.char_start ORDER BY s.ordinal) AS starts, array_agg(s.char_end ORDER BY s.ordinal) AS ends
FROM pgrag.document d
JOIN pgrag.sentence s ON s.corpus_id = d.corpus_id AND s.document_id = d.document_id
WHERE d.corpus_id = %(corpus_id)s AND d.document_id = ANY (%(document_ids)s::bigint[])
GROUP BY d.corpus_id, d.document_id ORDER BY d.document_id;

-- name: document_chunk_vectors
-- results: binary
-- Chunk spans and embeddings of documents (a node spanning exactly one chunk reuses its vector).
SELECT document_id, char_start, char_end, embedding FROM pgrag.chunk
WHERE corpus_id = %(corpus_id)s AND document_id = ANY (%(document_ids)s::bigint[]);

-- name: documents_ready_for_nodes
-- Of the given documents, those still indexed at the given hash and without nodes (locked).
SELECT d.document_id FROM pgrag.document d
JOIN unnest(%(document_ids)s::bigint[], %(hashes)s::text[]) AS x(document_id, hash)
     ON d.document_id = x.document_id
WHERE d.corpus_id = %(corpus_id)s AND d.content_hash = x.hash AND d.indexed_hash = x.hash
  AND NOT EXISTS (SELECT 1 FROM pgrag.semantic_node n
                  WHERE n.corpus_id = d.corpus_id AND n.document_id = d.document_id)
FOR UPDATE OF d;

-- name: dense_many
-- The top-k chunks of each of several query embeddings by HNSW (pgrag.dense),
-- with their documents: (query ordinal from 1, chunk, document), best first.
SELECT e.q::integer, h.chunk_id, h.document_id
FROM unnest(%(embeddings)s::vector[]) WITH ORDINALITY AS e(v, q)
CROSS JOIN LATERAL pgrag.dense(%(corpus)s, e.v, %(k)s) h
ORDER BY e.q, h.rank;

-- name: threadrag_nodes
-- results: binary
-- Semantic nodes of documents with their embeddings, their name-like entities
-- (stored at ingest, lower-cased, in text order) and their terms (pgrag.tokenize, stored with
-- the node since migration 0011; computed here for older nodes), in narrative order.
-- Which terms are rare the caller decides from the document frequencies of its
-- ranking index (one version for the whole question, and no token-index probe per term).
-- Every table is filtered on the corpus value (not only n.corpus_id) so Citus plans one task.
SELECT n.node_id, n.document_id, d.title, n.ordinal, n.char_start, n.char_end, n.text, n.embedding,
       ARRAY(SELECT lower(e.entity)
             FROM pgrag.chunk c
             JOIN pgrag.chunk_entity e ON e.corpus_id = c.corpus_id AND e.chunk_id = c.chunk_id
             WHERE c.corpus_id = %(corpus_id)s AND c.document_id = n.document_id
               AND e.char_start >= n.char_start AND e.char_end <= n.char_end
               AND e.label = ANY (%(labels)s::text[])
             ORDER BY e.char_start, e.chunk_id) AS entities,
       coalesce(n.terms, pgrag.tokenize(n.text)) AS terms
FROM pgrag.semantic_node n
JOIN pgrag.document d ON d.corpus_id = n.corpus_id AND d.document_id = n.document_id
WHERE n.corpus_id = %(corpus_id)s AND n.document_id = ANY (%(document_ids)s::bigint[])
ORDER BY n.document_id, n.ordinal;

-- name: threadrag_stored_edges
-- Stored edges (narrative) among some nodes.
SELECT node_a, node_b, kind, weight FROM pgrag.semantic_edge
WHERE corpus_id = %(corpus_id)s AND node_a = ANY (%(node_ids)s::bigint[]) AND node_b = ANY (%(node_ids)s::bigint[]);

-- name: threadrag_chunks
-- Chunks of documents that overlap given spans (document, start, end), for provenance of paths.
SELECT x.i::integer, c.chunk_id, c.char_start, c.char_end
FROM unnest(%(document_ids)s::bigint[], %(starts)s::integer[], %(ends)s::integer[]) WITH ORDINALITY
     AS x(document_id, char_start, char_end, i)
JOIN pgrag.chunk c ON c.corpus_id = %(corpus_id)s AND c.document_id = x.document_id
     AND c.char_start < x.char_end AND x.char_start < c.char_end
ORDER BY x.i, c.ordinal;
