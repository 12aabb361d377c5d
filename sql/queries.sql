-- Every statement the Python layer runs, by name. Parameters are %(name)s and are
-- always bound by the driver; Python never formats values into SQL.

-- name: server_facts
-- Server version, database encoding and whether pgvector can be installed.
SELECT current_setting('server_version_num')::int,
       pg_encoding_to_char(encoding),
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')
FROM pg_database WHERE datname = current_database();

-- name: shared_buffers_mb
-- The server's shared_buffers in MB (the setting counts blocks).
SELECT setting::bigint * current_setting('block_size')::bigint / 1048576
FROM pg_settings WHERE name = 'shared_buffers';

-- name: migration_lock
-- Serialise concurrent migrators (released at commit).
SELECT pg_advisory_xact_lock(%(key)s);

-- name: corpus_by_name
-- A corpus's row.
SELECT corpus_id, name, embedding_model, embedding_dim, chunk_sentences, chunk_overlap, edge_window, families
FROM pgrag.corpus WHERE name = %(name)s;

-- name: corpus_families
-- The method families a corpus maintains at ingest (read under its write lock by writers).
SELECT families FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;

-- name: add_corpus_family
-- Start maintaining a method family (a no-op when it already is).
UPDATE pgrag.corpus
SET families = CASE WHEN %(family)s::text = ANY (families) THEN families ELSE families || %(family)s::text END
WHERE corpus_id = %(corpus_id)s;

-- name: remove_corpus_family
-- Stop maintaining a method family (its rows stay unless dropped as well).
UPDATE pgrag.corpus SET families = array_remove(families, %(family)s::text) WHERE corpus_id = %(corpus_id)s;

-- name: corpus_settings
-- A corpus's free-form settings (what was built, when, how long it took).
SELECT settings FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;

-- name: add_corpus_seconds
-- Add seconds to a build cost kept in a corpus's settings (one atomic update).
UPDATE pgrag.corpus
SET settings = settings || jsonb_build_object(%(key)s::text,
                                              coalesce((settings ->> %(key)s::text)::float8, 0) + %(seconds)s)
WHERE corpus_id = %(corpus_id)s;

-- name: create_corpus
-- Create a corpus and its graph version row (no-op if the corpus exists).
WITH ins AS (
    INSERT INTO pgrag.corpus (name, embedding_model, embedding_dim, chunk_sentences, chunk_overlap, edge_window)
    VALUES (%(name)s, %(model)s, %(dim)s, %(sentences)s, %(overlap)s, %(window)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING corpus_id
)
INSERT INTO pgrag.graph_version (corpus_id, version) SELECT corpus_id, 0 FROM ins
ON CONFLICT DO NOTHING;

-- name: list_corpora
-- Every corpus with its size. Counts grouped by corpus, then joined: on Citus
-- each count is one statement over every shard (administration, not retrieval),
-- where correlated subqueries per corpus are refused.
SELECT c.name, c.embedding_model, c.embedding_dim,
       coalesce(d.n, 0) AS documents, coalesce(k.n, 0) AS chunks, coalesce(t.n, 0) AS tokens,
       coalesce(e.n, 0) AS edges, coalesce(d.pending, 0) AS pending, c.families
FROM pgrag.corpus c
LEFT JOIN (SELECT corpus_id, count(*) AS n,
                  count(*) FILTER (WHERE indexed_hash IS DISTINCT FROM content_hash) AS pending
           FROM pgrag.document GROUP BY corpus_id) d ON d.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.chunk GROUP BY corpus_id) k ON k.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.token GROUP BY corpus_id) t ON t.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.token_edge GROUP BY corpus_id) e ON e.corpus_id = c.corpus_id
ORDER BY c.name;

-- name: drop_corpus
-- Delete a corpus and everything in it.
SELECT pgrag.drop_corpus(%(name)s);

-- name: corpus_write_lock
-- One writer per corpus at a time (released at commit); readers are never blocked.
SELECT pg_advisory_xact_lock(74142471, %(corpus_id)s::int);

-- name: document_states
-- Current hashes of the given documents.
SELECT external_id, document_id, content_hash, indexed_hash
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s);

-- name: document_states_for_update
-- Same, locking the rows for this transaction.
SELECT external_id, document_id, content_hash, indexed_hash
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s)
FOR UPDATE;

-- name: pending_documents
-- Documents whose derived rows are missing or stale (e.g. inserted through the ORM).
SELECT external_id, title, body, metadata
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND indexed_hash IS DISTINCT FROM content_hash
ORDER BY document_id;

-- name: insert_documents
-- Insert new documents from parallel arrays; returns their ids.
INSERT INTO pgrag.document (corpus_id, external_id, title, body, metadata)
SELECT %(corpus_id)s, x.external_id, x.title, x.body, x.metadata
FROM unnest(%(ids)s::text[], %(titles)s::text[], %(bodies)s::text[], %(metadata)s::jsonb[])
     AS x(external_id, title, body, metadata)
RETURNING external_id, document_id;

-- name: update_document
-- Replace a document's content (its derived rows are rebuilt by the caller).
UPDATE pgrag.document
SET title = %(title)s, body = %(body)s, metadata = %(metadata)s, updated_at = now()
WHERE corpus_id = %(corpus_id)s AND document_id = %(document_id)s;

-- name: unindex_documents
-- Remove derived rows of documents, keeping or deleting the document rows.
SELECT pgrag_internal.unindex_documents(%(corpus_id)s, %(document_ids)s::bigint[], %(keep)s);

-- name: allocate_chunk_ids
-- Reserve chunk ids so that entities can reference chunks in the same COPY batch.
SELECT nextval(pg_get_serial_sequence('pgrag.chunk', 'chunk_id'))
FROM generate_series(1, %(n)s);

-- name: index_chunks
-- Postings, document frequencies and co-occurrence edges of new chunks.
SELECT pgrag_internal.index_chunks(%(corpus_id)s, %(chunk_ids)s::bigint[]);

-- name: mark_indexed
-- Record that documents' derived rows match their content.
UPDATE pgrag.document SET indexed_hash = content_hash
WHERE corpus_id = %(corpus_id)s AND document_id = ANY (%(document_ids)s::bigint[]);

-- name: ensure_chunk_index
-- Build the corpus's HNSW index if it does not exist yet.
SELECT pgrag_internal.ensure_chunk_index(%(corpus_id)s);

-- name: delete_documents
-- Delete documents by external id with everything derived from them (SQL pgrag.delete_documents).
SELECT pgrag.delete_documents(%(corpus)s, %(ids)s::text[]);

-- name: document_ids
-- Internal ids of documents by external id.
SELECT document_id FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s);

-- name: bm25
-- Okapi BM25 top-k chunks with provenance.
SELECT * FROM pgrag.bm25(%(corpus)s, %(query)s, %(k)s);

-- name: dense
-- Cosine top-k chunks with provenance.
SELECT * FROM pgrag.dense(%(corpus)s, %(embedding)s, %(k)s);

-- name: dense_hits
-- pgrag.dense's hits, each with its sentences (as the hits query).
SELECT h.*, s.ordinals, s.starts, s.ends
FROM pgrag.dense(%(corpus)s, %(embedding)s, %(k)s) h
CROSS JOIN LATERAL pgrag_internal.hit_sentences(pgrag_internal.corpus_id(%(corpus)s), h.document_id, h.first_sentence,
                                       h.last_sentence) s
ORDER BY h.rank;

-- name: hybrid
-- BM25 + dense fused by reciprocal rank fusion, top-k chunks with provenance.
SELECT * FROM pgrag.hybrid(%(corpus)s, %(query)s, %(embedding)s, %(k)s, %(depth)s, %(rrf_k)s);

-- name: tokenize
-- The token pipeline (the one definition, in SQL).
SELECT pgrag.tokenize(%(text)s);

-- name: tokenize_many
-- The token pipeline for several texts in one round trip, in their order.
SELECT pgrag.tokenize(u.t) FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS u(t, i) ORDER BY u.i;

-- name: graph_version
-- The corpus's graph version (bumped on every edge change).
SELECT version FROM pgrag.graph_version WHERE corpus_id = %(corpus_id)s;

-- name: update_metadata
-- Metadata of documents whose content is unchanged (no re-indexing needed).
UPDATE pgrag.document d SET metadata = x.metadata, updated_at = now()
FROM unnest(%(ids)s::text[], %(metadata)s::jsonb[]) AS x(external_id, metadata)
WHERE d.corpus_id = %(corpus_id)s AND d.external_id = x.external_id
  AND d.metadata IS DISTINCT FROM x.metadata;

-- name: graph_tokens
-- Every token of a corpus (the graph's nodes), by id.
SELECT token_id, term FROM pgrag.token WHERE corpus_id = %(corpus_id)s ORDER BY token_id;

-- name: graph_edges_copy
-- Every co-occurrence edge, as a binary COPY (parsed with numpy).
COPY (SELECT token_a, token_b, weight FROM pgrag.token_edge WHERE corpus_id = %(corpus_id)s)
TO STDOUT (FORMAT binary);

-- name: graph_edges_arrays
-- Every co-occurrence edge as three arrays (inside the server, where there is no COPY).
SELECT coalesce(array_agg(token_a), ARRAY[]::bigint[]) AS a, coalesce(array_agg(token_b), ARRAY[]::bigint[]) AS b,
       coalesce(array_agg(weight), ARRAY[]::bigint[]) AS w
FROM pgrag.token_edge WHERE corpus_id = %(corpus_id)s;

-- name: chunk_entities
-- Named entities stored at ingest for some chunks, in text order.
SELECT chunk_id, entity, label FROM pgrag.chunk_entity
WHERE corpus_id = %(corpus_id)s AND chunk_id = ANY (%(chunk_ids)s)
ORDER BY chunk_id, char_start, char_end;

-- name: document_titles
-- Every indexed document's title and chunks, in chunk order (TIGRAG's title index, pgrag.titles).
SELECT d.document_id, d.title, array_agg(c.chunk_id ORDER BY c.ordinal)
FROM pgrag.document d JOIN pgrag.chunk c ON c.corpus_id = d.corpus_id AND c.document_id = d.document_id
WHERE d.corpus_id = %(corpus_id)s AND d.title <> ''
GROUP BY d.document_id, d.title;

-- name: chunk_texts
-- Title and text of some chunks (for running NER when none is stored).
SELECT c.chunk_id, d.title, c.text
FROM pgrag.chunk c JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
WHERE c.corpus_id = %(corpus_id)s AND c.chunk_id = ANY (%(chunk_ids)s);

-- name: hits
-- Hits with provenance for given chunks and scores, in the given order, each with
-- its sentences (pgrag.hit's columns, then ordinals, starts, ends: results.Hit.from_row).
SELECT h.*, s.ordinals, s.starts, s.ends
FROM pgrag_internal.hits(%(corpus_id)s, %(chunk_ids)s, %(scores)s) h
CROSS JOIN LATERAL pgrag_internal.hit_sentences(%(corpus_id)s, h.document_id, h.first_sentence, h.last_sentence) s
ORDER BY h.rank;

-- name: ppr
-- Personalized PageRank over the token graph, in pure SQL (pgrag.ppr uses scipy
-- in the server when it has PL/Python).
SELECT term, score FROM pgrag_internal.ppr_sql(%(corpus)s, %(seeds)s, %(damping)s, %(top)s, %(tolerance)s, %(max_iterations)s);

-- name: tigrag
-- Single-hop TIGRAG in SQL.
SELECT * FROM pgrag.tigrag(%(corpus)s, %(query)s, %(embedding)s, %(k)s);

-- name: llm_cache_get
-- A cached LLM reply.
SELECT response, finish_reason, prompt_tokens, completion_tokens
FROM pgrag.llm_cache WHERE corpus_id = %(corpus_id)s AND key = %(key)s;

-- name: llm_cache_put
-- Cache an LLM reply (the first one wins if two processes race).
INSERT INTO pgrag.llm_cache (corpus_id, key, model, request, response, finish_reason,
                             prompt_tokens, completion_tokens)
VALUES (%(corpus_id)s, %(key)s, %(model)s, %(request)s, %(response)s, %(finish_reason)s,
        %(prompt_tokens)s, %(completion_tokens)s)
ON CONFLICT (corpus_id, key) DO NOTHING;

-- name: chunks_to_extract
-- Chunks an extractor has not processed yet, with their offsets and title.
SELECT c.chunk_id, c.char_start, d.title, c.text
FROM pgrag.chunk c
JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
WHERE c.corpus_id = %(corpus_id)s
  AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_extraction e
                  WHERE e.corpus_id = c.corpus_id AND e.chunk_id = c.chunk_id AND e.extractor = %(extractor)s)
ORDER BY c.chunk_id;

-- name: insert_triples
-- Store extracted triples with their proposition embeddings (skipping chunks deleted meanwhile).
INSERT INTO pgrag.triple (corpus_id, chunk_id, extractor, ordinal, subject, predicate, object,
                          proposition, char_start, char_end, embedding)
SELECT c.corpus_id, x.chunk_id, %(extractor)s, x.ordinal, x.subject, x.predicate, x.object,
       x.proposition, x.char_start, x.char_end, x.embedding
FROM unnest(%(chunk_ids)s::bigint[], %(ordinals)s::integer[], %(subjects)s::text[], %(predicates)s::text[],
            %(objects)s::text[], %(propositions)s::text[], %(starts)s::integer[], %(ends)s::integer[],
            %(embeddings)s::vector[])
     AS x(chunk_id, ordinal, subject, predicate, object, proposition, char_start, char_end, embedding)
JOIN pgrag.chunk c ON c.corpus_id = %(corpus_id)s AND c.chunk_id = x.chunk_id
ON CONFLICT (corpus_id, chunk_id, extractor, ordinal) DO NOTHING;

-- name: mark_extracted
-- Record that an extractor processed these chunks.
INSERT INTO pgrag.chunk_extraction (corpus_id, chunk_id, extractor, triples, failed)
SELECT c.corpus_id, x.chunk_id, %(extractor)s, x.triples, x.failed
FROM unnest(%(chunk_ids)s::bigint[], %(counts)s::integer[], %(failed)s::boolean[]) AS x(chunk_id, triples, failed)
JOIN pgrag.chunk c ON c.corpus_id = %(corpus_id)s AND c.chunk_id = x.chunk_id
ON CONFLICT (corpus_id, chunk_id, extractor) DO NOTHING;

-- name: ensure_triple_index
-- The corpus's HNSW index on proposition embeddings (created once).
SELECT pgrag_internal.ensure_triple_index(%(corpus_id)s);

-- name: propositions
-- Propositions by similarity until they cover N distinct chunks (one or more query embeddings).
SELECT * FROM pgrag.propositions(%(corpus)s, %(embeddings)s::vector[], %(unique_chunks)s);

-- name: has_triples
-- Whether a corpus has any triple (proposition) at all.
SELECT EXISTS (SELECT 1 FROM pgrag.triple WHERE corpus_id = %(corpus_id)s);

-- name: has_entities
-- Whether any named entity is stored for a corpus.
SELECT EXISTS (SELECT 1 FROM pgrag.chunk_entity WHERE corpus_id = %(corpus_id)s);

-- name: cirag_documents
-- CIRAG construction: the top-K documents for a query (best chunk cosine, or fused with BM25 given text).
SELECT rank, document_id, score, chunk_id FROM pgrag_internal.cirag_documents(%(corpus)s, %(embedding)s, %(documents)s, %(query)s);

-- name: cirag_triples
-- CIRAG construction: the documents' triples ranked by cosine to the query, top N, with provenance.
SELECT * FROM pgrag_internal.cirag_triples(%(corpus)s, %(embedding)s, %(document_ids)s::bigint[], %(candidates)s, %(extractor)s);

-- name: cirag_unextracted
-- Chunks of some documents that an extractor has not processed yet.
SELECT c.chunk_id FROM pgrag.chunk c
WHERE c.corpus_id = %(corpus_id)s AND c.document_id = ANY (%(document_ids)s::bigint[])
  AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_extraction e
                  WHERE e.corpus_id = c.corpus_id AND e.chunk_id = c.chunk_id AND e.extractor = %(extractor)s)
ORDER BY c.chunk_id;

-- name: corpus_extractors
-- Triple extractors that have processed chunks of a corpus, most chunks first.
SELECT extractor, count(*) FROM pgrag.chunk_extraction WHERE corpus_id = %(corpus_id)s
GROUP BY extractor ORDER BY count(*) DESC, extractor;

-- name: chunks_to_extract_among
-- Like chunks_to_extract, restricted to some chunks (CIRAG's on-the-fly extraction).
SELECT c.chunk_id, c.char_start, d.title, c.text
FROM pgrag.chunk c
JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
WHERE c.corpus_id = %(corpus_id)s AND c.chunk_id = ANY (%(chunk_ids)s::bigint[])
  AND NOT EXISTS (SELECT 1 FROM pgrag.chunk_extraction e
                  WHERE e.corpus_id = c.corpus_id AND e.chunk_id = c.chunk_id AND e.extractor = %(extractor)s)
ORDER BY c.chunk_id;

-- ---------------------------------------------------------------------------
-- ThreadRAG: semantic nodes (stored per document) and query-time candidates
-- ---------------------------------------------------------------------------

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

-- ---------------------------------------------------------------------------
-- Roles and tenant isolation
-- ---------------------------------------------------------------------------

-- name: schema_access
-- Whether the schema exists, and whether the current role may migrate it (owns it).
SELECT to_regnamespace('pgrag') IS NOT NULL,
       coalesce(pg_has_role((SELECT nspowner FROM pg_namespace WHERE nspname = 'pgrag'), 'USAGE'), true);

-- name: schema_revision
-- The Alembic revision the database is at.
SELECT version_num FROM pgrag.alembic_version;

-- name: grant_reader
-- Read and retrieval privileges for a role.
SELECT pgrag.grant_reader(%(role)s);

-- name: grant_writer
-- Read, retrieval and ingest privileges for a role.
SELECT pgrag.grant_writer(%(role)s);

-- name: revoke_role
-- Take back what grant_reader / grant_writer / grant_corpus gave.
SELECT pgrag.revoke_role(%(role)s);

-- name: grant_corpus
-- Let a role see a corpus under tenant isolation.
SELECT pgrag.grant_corpus(%(role)s, %(corpus)s);

-- name: revoke_corpus
-- Take a corpus away from a role under tenant isolation.
SELECT pgrag.revoke_corpus(%(role)s, %(corpus)s);

-- name: enable_tenant_isolation
-- Row-level security by corpus on every table; returns how many tables.
SELECT pgrag.enable_tenant_isolation();

-- name: disable_tenant_isolation
-- Drop the tenant policies; returns how many tables had one.
SELECT pgrag.disable_tenant_isolation();

-- name: corpus_access
-- Access list: corpus name and role, for every corpus the caller can see.
SELECT c.name, a.role_name FROM pgrag.corpus_acl a JOIN pgrag.corpus c USING (corpus_id)
ORDER BY c.name, a.role_name;

-- name: has_plpython
-- Whether the in-server runtime's language is enabled in this database.
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'plpython3u');

-- name: record_python_path
-- Where the server's PL/Python imports pgrag from (the schema owner only).
SELECT pgrag_internal._record_python_path(%(paths)s::text[]);

-- name: runtime_facts
-- The in-server runtime's language (NULL without one) and the recorded import paths.
SELECT pgrag.runtime(), pgrag_internal._python_path();

-- name: retrieve_sql
-- Any registered method through the in-server runtime (pgrag bench --via sql).
SELECT rank, chunk_id, score, document_id, external_id, title, chunk_ordinal, first_sentence, last_sentence,
       char_start, char_end, text, details
FROM pgrag.retrieve(%(corpus)s, %(question)s, %(method)s, %(k)s, %(options)s::jsonb);

-- The bulk writes of ingest (pgrag/bulk.py): COPY from a client process, one
-- INSERT of column arrays inside the server (SPI has no COPY).

-- name: copy_sentence
-- Rows of pgrag.sentence by binary COPY.
COPY pgrag.sentence (corpus_id, document_id, ordinal, text, char_start, char_end) FROM STDIN (FORMAT BINARY);

-- name: bulk_sentence
-- Rows of pgrag.sentence as one array per column.
INSERT INTO pgrag.sentence (corpus_id, document_id, ordinal, text, char_start, char_end)
SELECT * FROM unnest(%(corpus_id)s::bigint[],
       %(document_id)s::bigint[],
       %(ordinal)s::integer[],
       %(text)s::text[],
       %(char_start)s::integer[],
       %(char_end)s::integer[]);

-- name: copy_chunk
-- Rows of pgrag.chunk by binary COPY.
COPY pgrag.chunk (corpus_id, chunk_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding) FROM STDIN (FORMAT BINARY);

-- name: bulk_chunk
-- Rows of pgrag.chunk as one array per column.
INSERT INTO pgrag.chunk (corpus_id, chunk_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding)
SELECT * FROM unnest(%(corpus_id)s::bigint[],
       %(chunk_id)s::bigint[],
       %(document_id)s::bigint[],
       %(ordinal)s::integer[],
       %(first_sentence)s::integer[],
       %(last_sentence)s::integer[],
       %(char_start)s::integer[],
       %(char_end)s::integer[],
       %(text)s::text[],
       %(embedding)s::vector[]);

-- name: copy_chunk_entity
-- Rows of pgrag.chunk_entity by binary COPY.
COPY pgrag.chunk_entity (corpus_id, chunk_id, entity, label, char_start, char_end) FROM STDIN (FORMAT BINARY);

-- name: bulk_chunk_entity
-- Rows of pgrag.chunk_entity as one array per column.
INSERT INTO pgrag.chunk_entity (corpus_id, chunk_id, entity, label, char_start, char_end)
SELECT * FROM unnest(%(corpus_id)s::bigint[],
       %(chunk_id)s::bigint[],
       %(entity)s::text[],
       %(label)s::text[],
       %(char_start)s::integer[],
       %(char_end)s::integer[]);

-- name: copy_semantic_node
-- Rows of pgrag.semantic_node by binary COPY, each with its terms (pgrag.tokenize(text),
-- asked of the server just before by tokenize_many: pgrag.bulk).
COPY pgrag.semantic_node (corpus_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding, terms) FROM STDIN (FORMAT BINARY);

-- name: bulk_semantic_node
-- Rows of pgrag.semantic_node as one array per column; the statement adds each node's
-- terms (migration 0011).
INSERT INTO pgrag.semantic_node (corpus_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding, terms)
SELECT x.*, pgrag.tokenize(x.text)
FROM unnest(%(corpus_id)s::bigint[],
            %(document_id)s::bigint[],
            %(ordinal)s::integer[],
            %(first_sentence)s::integer[],
            %(last_sentence)s::integer[],
            %(char_start)s::integer[],
            %(char_end)s::integer[],
            %(text)s::text[],
            %(embedding)s::vector[])
     AS x(corpus_id, document_id, ordinal, first_sentence, last_sentence, char_start, char_end, text, embedding);

-- name: copy_entity_vector
-- Rows of pgrag.entity_vector by binary COPY.
COPY pgrag.entity_vector (corpus_id, document_id, key, sentence, embedding) FROM STDIN (FORMAT BINARY);

-- name: bulk_entity_vector
-- Rows of pgrag.entity_vector as one array per column.
INSERT INTO pgrag.entity_vector (corpus_id, document_id, key, sentence, embedding)
SELECT * FROM unnest(%(corpus_id)s::bigint[],
       %(document_id)s::bigint[],
       %(key)s::text[],
       %(sentence)s::integer[],
       %(embedding)s::vector[]);

-- name: transaction_read_only
-- Whether this transaction may write (false on a hot standby too).
SELECT current_setting('transaction_read_only') = 'on';

-- name: llm_settings_server
-- The LLM settings of this session (SET, ALTER ROLE/DATABASE, postgresql.conf), and
-- what is left of statement_timeout (ms; 0 when there is none).
SELECT nullif(current_setting('pgrag.llm_base_url', true), '') AS base_url,
       nullif(current_setting('pgrag.llm_model', true), '') AS model,
       nullif(current_setting('pgrag.llm_api_key', true), '') AS api_key,
       nullif(current_setting('pgrag.llm_timeout', true), '') AS timeout,
       (SELECT setting::float8 FROM pg_settings WHERE name = 'statement_timeout') AS statement_timeout_ms,
       (extract(epoch FROM clock_timestamp() - statement_timestamp()) * 1000)::float8 AS elapsed_ms;

-- name: model_runtime_setting
-- The session's pgrag.model_runtime and pgrag.model_api_key (pgrag.model_client), or NULLs.
SELECT nullif(current_setting('pgrag.model_runtime', true), '') AS runtime,
       nullif(current_setting('pgrag.model_api_key', true), '') AS api_key;

-- name: torch_threads_setting
-- The session's pgrag.torch_threads (intra-op threads of this backend's models), or NULL.
SELECT nullif(current_setting('pgrag.torch_threads', true), '');

-- ---------------------------------------------------------------------------
-- Citus (pgrag.distribute, sql/distribute.sql)
-- ---------------------------------------------------------------------------

-- name: citus_present
-- Whether the citus extension is installed in this database.
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus');

-- name: pgrag_distributed
-- Whether pgrag.document is in Citus's metadata (run only where citus exists).
SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = to_regclass('pgrag.document'));

-- name: citus_sequential
-- Shard DDL over one connection per node for the rest of the transaction.
SELECT set_config('citus.multi_shard_modify_mode', 'sequential', true);

-- name: citus_ddl_propagation
-- Turn Citus's DDL propagation off or on for the rest of the transaction.
SELECT set_config('citus.enable_ddl_propagation', %(on)s, true);

-- name: distribute
-- Reference and distributed tables (idempotent); the layout of every pgrag table.
SELECT * FROM pgrag.distribute(%(shard_count)s);

-- name: distribution
-- How each pgrag table is laid out on Citus.
SELECT * FROM pgrag.distribution();

-- name: corpus_placement
-- The shard of each distributed table holding a corpus, and its worker.
SELECT * FROM pgrag.corpus_placement(%(corpus)s);

-- name: llm_cache_forget_model
-- Drop the cached replies of one model (the oracle reader's replies of one run).
DELETE FROM pgrag.llm_cache WHERE corpus_id = %(corpus_id)s AND model = %(model)s;

-- ---------------------------------------------------------------------------
-- Following an application table (pgrag.follow; sql/follow.sql)
-- ---------------------------------------------------------------------------

-- name: follow_attach
-- Attach a corpus to an application table; returns the number of items enqueued.
SELECT pgrag.attach(%(corpus)s, %(source)s, id_column => %(id_column)s, text_column => %(text_column)s,
                    title_column => %(title_column)s, metadata_columns => %(metadata_columns)s::text[],
                    triples => %(triples)s, embedding_model => %(embedding_model)s,
                    embedding_dim => %(embedding_dim)s, max_attempts => %(max_attempts)s,
                    retry_seconds => %(retry_seconds)s);

-- name: follow_detach
-- Remove a corpus's triggers and queue (and, optionally, the corpus).
SELECT pgrag.detach(%(corpus)s, %(drop_corpus)s);

-- name: follow_list
-- Every attachment (or the named corpus's), with its corpus row.
SELECT f.corpus_id, c.name, f.source_schema, f.source_table, f.id_column, f.text_column, f.title_column,
       f.metadata_columns, f.triples, f.max_attempts, f.retry_seconds, f.attached_at, f.last_processed_at
FROM pgrag.follow f JOIN pgrag.corpus c ON c.corpus_id = f.corpus_id
WHERE %(corpus)s::text IS NULL OR c.name = %(corpus)s::text
ORDER BY c.name;

-- name: follow_take
-- Lock a batch of due queue items (FOR UPDATE SKIP LOCKED: other workers take
-- others), plus every other unlocked item of the same keys, parked ones
-- included: one write of a key's current row settles them all.
WITH picked AS (
    SELECT q.source_key FROM pgrag.follow_queue q
    WHERE q.corpus_id = %(corpus_id)s AND q.parked_at IS NULL
      AND (q.run_after IS NULL OR q.run_after <= clock_timestamp())
      AND (%(keys)s::text[] IS NULL OR q.source_key = ANY (%(keys)s::text[]))
    ORDER BY q.item_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT q.item_id, q.source_key, q.attempts
FROM pgrag.follow_queue q
WHERE q.corpus_id = %(corpus_id)s AND q.source_key IN (SELECT p.source_key FROM picked p)
ORDER BY q.item_id
FOR UPDATE SKIP LOCKED;

-- name: follow_hold
-- Mark held items in progress for pgrag.sync_status (advisory locks, released at commit).
SELECT count(*) FILTER (WHERE pg_try_advisory_xact_lock(74142472, (x.item_id %% 2147483647)::int))
FROM unnest(%(item_ids)s::bigint[]) AS x(item_id);

-- name: follow_source
-- The source table's current rows for some keys (absent keys have no row).
SELECT source_key, title, body, metadata FROM pgrag_internal.follow_source(%(corpus_id)s, %(keys)s::text[]);

-- name: follow_done
-- Delete processed queue items.
DELETE FROM pgrag.follow_queue
WHERE corpus_id = %(corpus_id)s AND item_id = ANY (%(item_ids)s::bigint[]);

-- name: follow_failed
-- Record failures: per key, older items are dropped and the newest gets one more
-- attempt, an error and a retry time (retry_seconds * 2^(attempts-1)), or is
-- parked once attempts reach the corpus's max_attempts.
WITH gone AS (
    DELETE FROM pgrag.follow_queue
    WHERE corpus_id = %(corpus_id)s AND item_id = ANY (%(drop_ids)s::bigint[])
)
UPDATE pgrag.follow_queue q
SET attempts = x.attempts,
    last_error = x.error,
    run_after = clock_timestamp() + make_interval(secs => f.retry_seconds * power(2, x.attempts - 1)),
    parked_at = CASE WHEN x.attempts >= f.max_attempts THEN clock_timestamp() END
FROM unnest(%(item_ids)s::bigint[], %(attempts)s::integer[], %(errors)s::text[]) AS x(item_id, attempts, error),
     pgrag.follow f
WHERE q.corpus_id = %(corpus_id)s AND q.item_id = x.item_id AND f.corpus_id = q.corpus_id
RETURNING q.source_key, q.parked_at IS NOT NULL;

-- name: follow_processed
-- When a worker last committed a batch of a corpus.
UPDATE pgrag.follow SET last_processed_at = now() WHERE corpus_id = %(corpus_id)s;

-- name: follow_requeue
-- Put parked items (all, or some keys') back in the queue with a fresh retry count.
WITH back AS (
    UPDATE pgrag.follow_queue q
    SET parked_at = NULL, attempts = 0, run_after = NULL
    WHERE q.corpus_id = %(corpus_id)s AND q.parked_at IS NOT NULL
      AND (%(keys)s::text[] IS NULL OR q.source_key = ANY (%(keys)s::text[]))
    RETURNING q.item_id
)
SELECT count(*), pg_notify('pgrag_follow', %(corpus_id)s::text) FROM back;

-- name: follow_parked
-- Parked items of a corpus with their errors.
SELECT item_id, source_key, op, attempts, last_error, enqueued_at, parked_at
FROM pgrag.follow_queue
WHERE corpus_id = %(corpus_id)s AND parked_at IS NOT NULL
ORDER BY item_id;

-- name: follow_next_due
-- Seconds until the earliest item waiting out a retry delay becomes due (NULL if none).
SELECT extract(epoch FROM min(run_after) - clock_timestamp())::float8
FROM pgrag.follow_queue
WHERE corpus_id = ANY (%(corpus_ids)s::bigint[]) AND parked_at IS NULL AND run_after > clock_timestamp();

-- name: follow_wake
-- Wake every listening worker.
SELECT pg_notify('pgrag_follow', 'wake');

-- name: sync_status
-- The pgrag.sync_status view (every attached corpus, or one).
SELECT corpus, source, pending, in_progress, retrying, parked, last_error, last_processed_at,
       extract(epoch FROM lag)::float8
FROM pgrag.sync_status
WHERE %(corpus)s::text IS NULL OR corpus = %(corpus)s::text
ORDER BY corpus;

-- ---------------------------------------------------------------------------
-- TIGRAG's postings matrix (pgrag/postings.py)
-- ---------------------------------------------------------------------------

-- name: token_df
-- Every token's document frequency, by id (the graph's nodes, in its order).
SELECT token_id, df FROM pgrag.token WHERE corpus_id = %(corpus_id)s ORDER BY token_id;

-- name: chunk_lengths
-- Every chunk's length in tokens and its document, by id.
SELECT chunk_id, n_tokens, document_id FROM pgrag.chunk WHERE corpus_id = %(corpus_id)s ORDER BY chunk_id;

-- name: postings_copy
-- Every posting (chunk, token, term frequency), as a binary COPY of three bigints.
COPY (SELECT chunk_id, token_id, tf::bigint FROM pgrag.chunk_token WHERE corpus_id = %(corpus_id)s)
TO STDOUT (FORMAT binary);

-- name: postings_arrays
-- Every posting as three arrays (inside the server, where there is no COPY).
SELECT coalesce(array_agg(chunk_id), ARRAY[]::bigint[]) AS chunk, coalesce(array_agg(token_id), ARRAY[]::bigint[]) AS token,
       coalesce(array_agg(tf::bigint), ARRAY[]::bigint[]) AS tf
FROM pgrag.chunk_token WHERE corpus_id = %(corpus_id)s;

-- name: graph_file_key
-- What names a corpus's shared graph files (pgrag/graph_files.py): the database
-- (name, oid, port) and the corpus (creation time, microseconds).
SELECT current_database(), (SELECT oid FROM pg_database WHERE datname = current_database()),
       current_setting('port'), (extract(epoch FROM c.created_at) * 1000000)::bigint
FROM pgrag.corpus c WHERE c.corpus_id = %(corpus_id)s;

-- name: delta_start
-- The graph version and the oldest version a delta can start from: the removal
-- log (pgrag.chunk_removal) holds every removal made after logged_from.
SELECT version, logged_from FROM pgrag.graph_version WHERE corpus_id = %(corpus_id)s;

-- name: chunks_after
-- Chunks added since a cached index (ids above its largest: ids only grow), with
-- their lengths in tokens and their documents.
SELECT chunk_id, n_tokens, document_id FROM pgrag.chunk
WHERE corpus_id = %(corpus_id)s AND chunk_id > %(after)s ORDER BY chunk_id;

-- name: removals_since
-- Chunks removed after a graph version, with the tokens they held and what each
-- added to each edge (token_a < token_b, weight), as pgrag_internal.unindex_documents logged them.
SELECT chunk_id, tokens, edge_a, edge_b, edge_w FROM pgrag.chunk_removal
WHERE corpus_id = %(corpus_id)s AND version > %(since)s ORDER BY chunk_id;

-- name: token_df_of
-- The document frequencies of some tokens (those gone from the vocabulary have no row).
SELECT token_id, df FROM pgrag.token
WHERE corpus_id = %(corpus_id)s AND token_id = ANY (%(token_ids)s::bigint[]) ORDER BY token_id;

-- name: tokens_after
-- Tokens added since a cached graph (ids above its largest), with their terms.
SELECT token_id, term FROM pgrag.token
WHERE corpus_id = %(corpus_id)s AND token_id > %(after)s ORDER BY token_id;

-- name: postings_of_chunks
-- The postings (chunk, token, term frequency) of some chunks.
SELECT chunk_id, token_id, tf FROM pgrag.chunk_token
WHERE corpus_id = %(corpus_id)s AND chunk_id = ANY (%(chunk_ids)s::bigint[]);

-- name: edges_of_chunks
-- What some chunks add to the co-occurrence edges (as pgrag_internal.index_chunks adds it).
SELECT token_a, token_b, weight FROM pgrag_internal.chunk_edge_counts(%(corpus_id)s, %(chunk_ids)s::bigint[]);

-- name: chunk_vectors
-- results: binary
-- The embeddings of some chunks (all of them for NULL), by id: TIGRAG's cached
-- rerank vectors.
SELECT chunk_id, embedding FROM pgrag.chunk
WHERE corpus_id = %(corpus_id)s AND (%(chunk_ids)s::bigint[] IS NULL OR chunk_id = ANY (%(chunk_ids)s::bigint[]))
ORDER BY chunk_id;

-- name: corpus_dim
-- A corpus's embedding dimension.
SELECT embedding_dim FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;

-- name: schema_surface
-- What schemas pgrag (the API) and pgrag_internal (its helpers) hold, one line
-- each in a stable order: functions with their identity arguments and results,
-- then tables, views and types with their columns (`pgrag db schema`;
-- sql/schema.sql holds it for review).
SELECT line FROM (
    SELECT 1 AS part, 'function ' || n.nspname || '.' || p.proname || '('
           || pg_get_function_identity_arguments(p.oid) || ') RETURNS ' || pg_get_function_result(p.oid) AS line
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname IN ('pgrag', 'pgrag_internal')
    UNION ALL
    SELECT 2, CASE c.relkind WHEN 'v' THEN 'view' WHEN 'c' THEN 'type' ELSE 'table' END || ' ' || n.nspname || '.'
           || c.relname || ' ('
           || string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum) || ')'
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    WHERE n.nspname IN ('pgrag', 'pgrag_internal') AND c.relkind IN ('r', 'p', 'v', 'c')
    GROUP BY n.nspname, c.relname, c.relkind
) s
ORDER BY part, line COLLATE "C";

-- name: ui_documents
-- The documents of some hits, for the web page and `pgrag explain --html`
-- (pgrag/ui): title and body, read as the connecting role (row-level security holds).
SELECT document_id, title, body FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND document_id = ANY (%(document_ids)s::bigint[]);

-- name: ui_chunk_titles
-- The document title of some chunks (TIGRAG's hop chunks in the picture).
SELECT c.chunk_id, d.title FROM pgrag.chunk c
JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
WHERE c.corpus_id = %(corpus_id)s AND c.chunk_id = ANY (%(chunk_ids)s::bigint[]);

-- name: retrieve_hits
-- pgrag.retrieve as the framework retrievers call it (pgrag/integrations), over the
-- application's own connection: the method runs inside the server.
SELECT * FROM pgrag.retrieve(%(corpus)s, %(question)s, %(method)s, %(k)s, %(options)s::jsonb);

-- name: filter_documents
-- The documents a metadata filter allows (pgrag.filters): the path predicate is a
-- bound parameter over the expression document_filter_idx covers.
SELECT document_id FROM pgrag.document
WHERE corpus_id = %(corpus_id)s
  AND pgrag_internal.filterable(metadata, external_id) @@ %(path)s::jsonpath
ORDER BY document_id;
