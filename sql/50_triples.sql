-- Triples and propositions (T2RAG's retrieval unit) and CIRAG's construction
-- phase (../shared/papers/cirag.md §3.3).
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. The Python layer (named queries) and SQL callers run these same
-- functions; there is no second implementation.
-- pgrag.cirag_candidates, the construction in one call, is for SQL callers:
-- it ranks only the triples already stored.

CREATE OR REPLACE FUNCTION pgrag_internal.ensure_triple_index(p_corpus bigint) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT pgrag_internal.ensure_hnsw_index(p_corpus, 'triple') $$;

-- Propositions by descending similarity to any of the query embeddings (one
-- global pool; a proposition's score is its best cosine over the queries), taken
-- until they cover `unique_chunks` distinct source chunks: the row that brings the
-- last new chunk is the final one. T2RAG's retrieval budget (k = 5).
CREATE OR REPLACE FUNCTION pgrag.propositions(corpus text, query_embeddings vector[],
                                              unique_chunks integer DEFAULT 5)
RETURNS TABLE (rank integer, triple_id bigint, score float8, subject text, predicate text,
               object text, proposition text, extractor text, chunk_id bigint,
               document_id bigint, external_id text, title text,
               char_start integer, char_end integer, query integer)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    dim integer;
    depth integer := greatest(unique_chunks, 1) * 40;
    previous_ef text;
BEGIN
    SELECT c.embedding_dim INTO dim FROM pgrag.corpus c WHERE c.corpus_id = cid;
    IF EXISTS (SELECT 1 FROM unnest(query_embeddings) q WHERE vector_dims(q) <> dim) THEN
        RAISE EXCEPTION 'pgrag: a query embedding does not have the % dimensions of corpus %',
            dim, quote_literal(corpus) USING ERRCODE = 'PR002';
    END IF;
    IF unique_chunks < 1 OR cardinality(query_embeddings) IS NULL THEN
        RETURN;
    END IF;
    previous_ef := current_setting('hnsw.ef_search', true);
    PERFORM set_config('hnsw.ef_search', least(greatest(depth,
        coalesce(nullif(current_setting('pgrag.ef_search', true), '')::integer, 200)), 1000)::text, true);
    -- Each query's nearest propositions through the HNSW index (the cast spelled
    -- with the literal dimension so the planner uses the partial index), then
    -- one pool ranked by best similarity.
    RETURN QUERY EXECUTE format($q$
        WITH near AS (
            SELECT n.triple_id, 1 - n.d AS cosine, q.i::integer AS query
            FROM unnest($2) WITH ORDINALITY AS q(v, i)
            CROSS JOIN LATERAL (
                SELECT t.triple_id, t.embedding::vector(%1$s) <=> q.v AS d
                FROM pgrag.triple t WHERE t.corpus_id = $1
                ORDER BY t.embedding::vector(%1$s) <=> q.v LIMIT $3) n
        ),
        best AS (
            SELECT DISTINCT ON (n.triple_id) n.triple_id, n.cosine, n.query
            FROM near n ORDER BY n.triple_id, n.cosine DESC, n.query
        ),
        ranked AS (
            SELECT b.*, t.chunk_id,
                   row_number() OVER (ORDER BY b.cosine DESC, b.triple_id) AS pos,
                   row_number() OVER (PARTITION BY t.chunk_id ORDER BY b.cosine DESC, b.triple_id) = 1 AS first_of_chunk
            FROM best b JOIN pgrag.triple t ON t.corpus_id = $1 AND t.triple_id = b.triple_id
        ),
        covered AS (
            SELECT r.*, sum(r.first_of_chunk::integer) OVER (ORDER BY r.pos) AS chunks_so_far
            FROM ranked r
        )
        SELECT c.pos::integer, t.triple_id, c.cosine, t.subject, t.predicate, t.object, t.proposition,
               t.extractor, t.chunk_id, d.document_id, d.external_id, d.title, t.char_start, t.char_end, c.query
        FROM covered c
        JOIN pgrag.triple t ON t.corpus_id = $1 AND t.triple_id = c.triple_id
        JOIN pgrag.chunk k ON k.corpus_id = $1 AND k.chunk_id = t.chunk_id
        JOIN pgrag.document d ON d.corpus_id = $1 AND d.document_id = k.document_id
        WHERE c.chunks_so_far - c.first_of_chunk::integer < $4
        ORDER BY c.pos$q$, dim)
    USING cid, query_embeddings, depth, unique_chunks;
    PERFORM set_config('hnsw.ef_search', coalesce(previous_ef, '40'), true);
END
$$;

-- One query embedding (the common case).
CREATE OR REPLACE FUNCTION pgrag.propositions(corpus text, query_embedding vector,
                                              unique_chunks integer DEFAULT 5)
RETURNS TABLE (rank integer, triple_id bigint, score float8, subject text, predicate text,
               object text, proposition text, extractor text, chunk_id bigint,
               document_id bigint, external_id text, title text,
               char_start integer, char_end integer, query integer)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT * FROM pgrag.propositions(corpus, ARRAY[query_embedding], unique_chunks)
$$;

-- ---------------------------------------------------------------------------
-- CIRAG (../shared/papers/cirag.md §3.3): the construction phase
-- ---------------------------------------------------------------------------

-- The top-K documents for a query, each scored by its best chunk's cosine
-- (through the chunk HNSW index), with that chunk; with `query` text, by
-- reciprocal rank fusion of dense and BM25 chunk lists instead (pgrag.hybrid).
-- Chunks are fetched 4 deep per document so that documents with several chunks
-- do not crowd the list.
CREATE OR REPLACE FUNCTION pgrag_internal.cirag_documents(corpus text, query_embedding vector,
                                                 documents integer DEFAULT 10, query text DEFAULT NULL)
RETURNS TABLE (rank integer, document_id bigint, score float8, chunk_id bigint)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH chunks AS (
        SELECT d.document_id, d.chunk_id, d.score
        FROM pgrag.dense(corpus, query_embedding, greatest(documents * 4, 40)) d
        WHERE query IS NULL
        UNION ALL
        SELECT h.document_id, h.chunk_id, h.score
        FROM pgrag.hybrid(corpus, query, query_embedding, greatest(documents * 4, 40)) h
        WHERE query IS NOT NULL
    ),
    best AS (   -- each document's best chunk
        SELECT DISTINCT ON (c.document_id) c.document_id, c.chunk_id, c.score
        FROM chunks c ORDER BY c.document_id, c.score DESC, c.chunk_id
    )
    SELECT (row_number() OVER (ORDER BY b.score DESC, b.document_id))::integer, b.document_id, b.score,
           b.chunk_id
    FROM best b
    ORDER BY b.score DESC, b.document_id
    LIMIT greatest(documents, 0)
$$;

-- The triples of some documents ranked by cosine to the query, top `candidates`,
-- with provenance: chunk, document (and its rank in `document_ids`), and the
-- source sentence (pgrag.sentence holding the triple's start; its text, or the
-- triple's own span of the body when no stored sentence holds it). `extractor`
-- NULL takes the triples of every extractor.
CREATE OR REPLACE FUNCTION pgrag_internal.cirag_triples_in(p_corpus bigint, query_embedding vector, document_ids bigint[],
                                                  candidates integer DEFAULT 30, extractor text DEFAULT NULL)
RETURNS TABLE (rank integer, triple_id bigint, score float8, subject text, predicate text, object text,
               proposition text, extractor text, chunk_id bigint, document_id bigint, document_rank integer,
               external_id text, title text, sentence_ordinal integer, char_start integer, char_end integer,
               sentence text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    -- Every table is filtered on the corpus value itself, which lets Citus plan
    -- the statement as one task (with only join equalities it splits the lateral
    -- sentence lookup over every shard).
    WITH docs AS (
        SELECT u.document_id, u.pos::integer AS document_rank
        FROM unnest(document_ids) WITH ORDINALITY AS u(document_id, pos)
    ),
    -- A sentence in two overlapping chunks gives the same triple twice: one
    -- candidate per (document, subject, predicate, object), its first stored row,
    -- so that duplicates do not take the N slots (on 2Wiki's oracle subset, 9 %
    -- of the triples, up to 37 % of a long document's).
    scored AS (
        SELECT u.* FROM (
            SELECT DISTINCT ON (k.document_id, t.subject, t.predicate, t.object)
                   t.triple_id, 1 - (t.embedding <=> query_embedding) AS score, t.chunk_id,
                   k.document_id, docs.document_rank
            FROM docs
            JOIN pgrag.chunk k ON k.corpus_id = p_corpus AND k.document_id = docs.document_id
            JOIN pgrag.triple t ON t.corpus_id = p_corpus AND t.chunk_id = k.chunk_id
            WHERE cirag_triples_in.extractor IS NULL OR t.extractor = cirag_triples_in.extractor
            ORDER BY k.document_id, t.subject, t.predicate, t.object, t.triple_id
        ) u
        ORDER BY u.score DESC, u.triple_id
        LIMIT greatest(candidates, 0)
    )
    SELECT (row_number() OVER (ORDER BY s.score DESC, s.triple_id))::integer, s.triple_id, s.score,
           t.subject, t.predicate, t.object, t.proposition, t.extractor, s.chunk_id, s.document_id,
           s.document_rank, d.external_id, d.title, se.ordinal, t.char_start, t.char_end,
           coalesce(se.text, substr(d.body, t.char_start + 1, t.char_end - t.char_start))
    FROM scored s
    JOIN pgrag.triple t ON t.corpus_id = p_corpus AND t.triple_id = s.triple_id
    JOIN pgrag.document d ON d.corpus_id = p_corpus AND d.document_id = s.document_id
    LEFT JOIN LATERAL (
        SELECT x.ordinal, x.text FROM pgrag.sentence x
        WHERE x.corpus_id = p_corpus AND x.document_id = s.document_id
          AND x.char_start <= t.char_start AND t.char_start < x.char_end
        ORDER BY x.ordinal LIMIT 1) se ON true
    ORDER BY s.score DESC, s.triple_id
$$;

-- By name (the SQL API); the corpus id is resolved first and passed as a value,
-- so that on Citus every statement routes to the one worker holding the corpus.
CREATE OR REPLACE FUNCTION pgrag_internal.cirag_triples(corpus text, query_embedding vector, document_ids bigint[],
                                               candidates integer DEFAULT 30, extractor text DEFAULT NULL)
RETURNS TABLE (rank integer, triple_id bigint, score float8, subject text, predicate text, object text,
               proposition text, extractor text, chunk_id bigint, document_id bigint, document_rank integer,
               external_id text, title text, sentence_ordinal integer, char_start integer, char_end integer,
               sentence text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT * FROM pgrag_internal.cirag_triples_in(pgrag_internal.corpus_id(corpus), query_embedding, document_ids, candidates, extractor)
$$;

-- Construction in one call, for SQL callers: the triples of the top-K documents
-- ranked by cosine to the query, top N (the paper's K = 10, N = 30). It ranks the
-- triples already stored: chunks no extractor has processed contribute none
-- (Python's method extracts them on the fly first).
CREATE OR REPLACE FUNCTION pgrag.cirag_candidates(corpus text, query_embedding vector,
                                                  documents integer DEFAULT 10, candidates integer DEFAULT 30,
                                                  extractor text DEFAULT NULL)
RETURNS TABLE (rank integer, triple_id bigint, score float8, subject text, predicate text, object text,
               proposition text, extractor text, chunk_id bigint, document_id bigint, document_rank integer,
               external_id text, title text, sentence_ordinal integer, char_start integer, char_end integer,
               sentence text)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT * FROM pgrag_internal.cirag_triples(
        corpus, query_embedding,
        ARRAY(SELECT d.document_id FROM pgrag_internal.cirag_documents(corpus, query_embedding, documents) d ORDER BY d.rank),
        candidates, extractor)
$$;
