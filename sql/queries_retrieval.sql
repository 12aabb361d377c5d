-- Retrieval: the single methods, the token graph, TIGRAG in SQL, the LLM cache,
-- triples and CIRAG, and the web page.
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

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

-- name: entity_mentions
-- The chunks whose named entities stored at ingest are one of some lower-cased names
-- (TIGRAG's entity-to-passage links; chunk_entity_entity_idx), one row a name.
SELECT lower(entity) AS name, array_agg(DISTINCT chunk_id ORDER BY chunk_id) AS chunk_ids
FROM pgrag.chunk_entity
WHERE corpus_id = %(corpus_id)s AND lower(entity) = ANY (%(names)s::text[])
GROUP BY lower(entity);

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

-- name: propositions_within
-- pgrag.propositions inside a metadata filter (pgrag.filters): the same pool and
-- cut (propositions by their best cosine over the queries, until they cover
-- unique_chunks distinct chunks), over the triples of the filter's documents by
-- an exact scan, since the triples' HNSW index cannot keep to a filter.
WITH q AS (
    SELECT u.v, u.i::integer AS query FROM unnest(%(embeddings)s::vector[]) WITH ORDINALITY AS u(v, i)
),
best AS (
    SELECT DISTINCT ON (t.triple_id) t.triple_id, 1 - (t.embedding <=> q.v) AS cosine, q.query, t.chunk_id
    FROM pgrag.chunk k
    JOIN pgrag.triple t ON t.corpus_id = k.corpus_id AND t.chunk_id = k.chunk_id
    CROSS JOIN q
    WHERE k.corpus_id = %(corpus_id)s AND k.document_id = ANY (%(document_ids)s::bigint[])
    ORDER BY t.triple_id, t.embedding <=> q.v, q.query
),
ranked AS (
    SELECT b.*, row_number() OVER (ORDER BY b.cosine DESC, b.triple_id) AS pos,
           row_number() OVER (PARTITION BY b.chunk_id ORDER BY b.cosine DESC, b.triple_id) = 1 AS first_of_chunk
    FROM best b
),
covered AS (
    SELECT r.*, sum(r.first_of_chunk::integer) OVER (ORDER BY r.pos) AS chunks_so_far FROM ranked r
)
SELECT c.pos::integer, t.triple_id, c.cosine, t.subject, t.predicate, t.object, t.proposition, t.extractor,
       t.chunk_id, d.document_id, d.external_id, d.title, t.char_start, t.char_end, c.query
FROM covered c
JOIN pgrag.triple t ON t.corpus_id = %(corpus_id)s AND t.triple_id = c.triple_id
JOIN pgrag.chunk k ON k.corpus_id = %(corpus_id)s AND k.chunk_id = t.chunk_id
JOIN pgrag.document d ON d.corpus_id = %(corpus_id)s AND d.document_id = k.document_id
WHERE c.chunks_so_far - c.first_of_chunk::integer < %(unique_chunks)s
ORDER BY c.pos;

-- name: dense_within
-- Nearest chunks inside a metadata filter's documents past the in-memory ranking
-- index's size (pgrag_internal.dense_within: HNSW with pgvector's iterative scan).
SELECT chunk_id, document_id, score
FROM pgrag_internal.dense_within(%(corpus_id)s, %(embedding)s, %(k)s, %(document_ids)s::bigint[]);
