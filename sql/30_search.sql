-- Single-method retrieval: hits with provenance, BM25, dense, hybrid (RRF),
-- a chunk's sentences.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. The Python layer (named queries) and SQL callers run these same
-- functions; there is no second implementation.

-- The sentences of one hit's span (its chunk's first to last sentence): their
-- ordinals and offsets into the body, as three arrays in one row, so that a hit
-- and its sentences come back in one statement (named queries hits, dense_hits).
CREATE OR REPLACE FUNCTION pgrag_internal.hit_sentences(p_corpus bigint, p_document bigint, p_first integer, p_last integer,
                                               OUT ordinals integer[], OUT starts integer[], OUT ends integer[])
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT array_agg(s.ordinal ORDER BY s.ordinal), array_agg(s.char_start ORDER BY s.ordinal),
           array_agg(s.char_end ORDER BY s.ordinal)
    FROM pgrag.sentence s
    WHERE s.corpus_id = p_corpus AND s.document_id = p_document AND s.ordinal BETWEEN p_first AND p_last
$$;

-- A ranked hit list with its provenance: chunk -> document, offsets into the body.
CREATE OR REPLACE FUNCTION pgrag_internal.hits(p_corpus bigint, p_chunks bigint[], p_scores float8[])
RETURNS SETOF pgrag.hit
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT h.rank::integer, c.chunk_id, h.score, d.document_id, d.external_id, d.title,
           c.ordinal, c.first_sentence, c.last_sentence, c.char_start, c.char_end, c.text
    FROM unnest(p_chunks, p_scores) WITH ORDINALITY AS h(chunk_id, score, rank)
    JOIN pgrag.chunk c ON c.corpus_id = p_corpus AND c.chunk_id = h.chunk_id
    JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
    ORDER BY h.rank
$$;

-- Okapi BM25 over chunk postings. IDF is ln(1 + (N - df + 0.5) / (df + 0.5)) so it
-- never goes negative; query terms count once each. PL/pgSQL so that the corpus
-- id is a value, not a subquery, in every statement: on Citus that routes the
-- statement to the one worker holding the corpus (docs/SCALING.md).
CREATE OR REPLACE FUNCTION pgrag.bm25(corpus text, query text, k integer DEFAULT 10,
                                      k1 float8 DEFAULT 1.2, b float8 DEFAULT 0.75)
RETURNS SETOF pgrag.hit
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    ids bigint[];
    scores float8[];
BEGIN
    WITH stats AS (
        SELECT count(*)::float8 AS n, coalesce(avg(c.n_tokens), 0)::float8 AS avgdl
        FROM pgrag.chunk c WHERE c.corpus_id = cid
    ),
    qt AS (
        SELECT t.token_id, t.df
        FROM pgrag.token t
        WHERE t.corpus_id = cid
          AND t.term = ANY (pgrag.tokenize(bm25.query))
    ),
    scored AS (
        SELECT ct.chunk_id,
               sum(ln(1 + (s.n - qt.df::float8 + 0.5) / (qt.df::float8 + 0.5))
                   * ct.tf * (bm25.k1 + 1)
                   / (ct.tf + bm25.k1 * (1 - bm25.b + bm25.b * c.n_tokens / greatest(s.avgdl, 1e-9)))) AS score
        FROM qt
        JOIN pgrag.chunk_token ct ON ct.corpus_id = cid AND ct.token_id = qt.token_id
        JOIN pgrag.chunk c ON c.corpus_id = ct.corpus_id AND c.chunk_id = ct.chunk_id
        CROSS JOIN stats s
        GROUP BY ct.chunk_id
        ORDER BY score DESC, ct.chunk_id
        LIMIT greatest(bm25.k, 0)
    )
    SELECT array_agg(x.chunk_id ORDER BY x.score DESC, x.chunk_id), array_agg(x.score ORDER BY x.score DESC, x.chunk_id)
    INTO ids, scores FROM scored x;
    RETURN QUERY SELECT * FROM pgrag_internal.hits(cid, ids, scores);
END
$$;

-- Cosine similarity (1 - cosine distance) through the corpus's HNSW index.
CREATE OR REPLACE FUNCTION pgrag.dense(corpus text, query_embedding vector, k integer DEFAULT 10)
RETURNS SETOF pgrag.hit
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    dim integer;
    ids bigint[];
    scores float8[];
    previous_ef text;
BEGIN
    SELECT c.embedding_dim INTO dim FROM pgrag.corpus c WHERE c.corpus_id = cid;
    IF vector_dims(query_embedding) <> dim THEN
        RAISE EXCEPTION 'pgrag: query embedding has % dimensions, corpus % uses %',
            vector_dims(query_embedding), quote_literal(corpus), dim
            USING ERRCODE = 'PR002';
    END IF;
    -- HNSW's candidate list (ef_search) bounds both how many rows come back and how
    -- close to exact they are. pgvector's default of 40 cost 3-4 points of Recall@5
    -- on the 2Wiki benchmark against an exact scan; 200 matched it. Callers tune it
    -- with SET pgrag.ef_search; it is always at least k. Restored afterwards.
    previous_ef := current_setting('hnsw.ef_search', true);
    PERFORM set_config('hnsw.ef_search', least(greatest(k,
        coalesce(nullif(current_setting('pgrag.ef_search', true), '')::integer, 200)), 1000)::text, true);
    -- The cast must be spelled with the literal dimension for the planner to match
    -- the corpus's partial expression index.
    EXECUTE format(
        'SELECT array_agg(chunk_id ORDER BY d, chunk_id), array_agg(1 - d ORDER BY d, chunk_id)
         FROM (SELECT c.chunk_id, c.embedding::vector(%s) <=> $2 AS d
               FROM pgrag.chunk c WHERE c.corpus_id = $1
               ORDER BY c.embedding::vector(%s) <=> $2 LIMIT $3) s', dim, dim)
        INTO ids, scores
        USING cid, query_embedding, greatest(k, 0);
    PERFORM set_config('hnsw.ef_search', coalesce(previous_ef, '40'), true);
    RETURN QUERY SELECT * FROM pgrag_internal.hits(cid, ids, scores);
END
$$;

-- pgrag.dense inside a metadata filter (pgrag.filters, the documents given),
-- for corpora past the size the ranking index ranks in memory: the same HNSW
-- scan, which pgvector's iterative scan (pgvector >= 0.8) continues until k
-- chunks of those documents are found (relaxed order, so the rows are sorted
-- again here). An older pgvector has no iterative scan: its HNSW scan would stop
-- at ef_search candidates and could return fewer than k chunks of the filter, so
-- there the filter's chunks are ranked exactly instead (a MATERIALIZED CTE, which
-- no index scan reaches): the true nearest k, as good as or better than HNSW's,
-- at the cost of reading every chunk of those documents.
CREATE OR REPLACE FUNCTION pgrag_internal.dense_within(p_corpus bigint, query_embedding vector, k integer,
                                                      document_ids bigint[])
RETURNS TABLE (chunk_id bigint, document_id bigint, score float8)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    dim integer;
    previous_ef text := current_setting('hnsw.ef_search', true);
    previous_scan text := current_setting('hnsw.iterative_scan', true);
    iterative boolean;
BEGIN
    SELECT c.embedding_dim INTO dim FROM pgrag.corpus c WHERE c.corpus_id = p_corpus;
    SELECT coalesce((regexp_match(e.extversion, '^(\d+)\.(\d+)'))::integer[] >= '{0,8}', false) INTO iterative
    FROM pg_extension e WHERE e.extname = 'vector';
    IF NOT coalesce(iterative, false) THEN
        RETURN QUERY EXECUTE format(
            'WITH within AS MATERIALIZED (
                 SELECT c.chunk_id, c.document_id, c.embedding
                 FROM pgrag.chunk c WHERE c.corpus_id = $1 AND c.document_id = ANY ($4))
             SELECT w.chunk_id, w.document_id, 1 - (w.embedding::vector(%s) <=> $2)
             FROM within w
             ORDER BY w.embedding::vector(%s) <=> $2, w.chunk_id LIMIT $3', dim, dim)
            USING p_corpus, query_embedding, greatest(k, 0), document_ids;
        RETURN;
    END IF;
    PERFORM set_config('hnsw.ef_search', least(greatest(k,
        coalesce(nullif(current_setting('pgrag.ef_search', true), '')::integer, 200)), 1000)::text, true);
    PERFORM set_config('hnsw.iterative_scan', 'relaxed_order', true);
    RETURN QUERY EXECUTE format(
        'SELECT s.chunk_id, s.document_id, 1 - s.d
         FROM (SELECT c.chunk_id, c.document_id, c.embedding::vector(%s) <=> $2 AS d
               FROM pgrag.chunk c WHERE c.corpus_id = $1 AND c.document_id = ANY ($4)
               ORDER BY c.embedding::vector(%s) <=> $2 LIMIT $3) s
         ORDER BY s.d, s.chunk_id', dim, dim)
        USING p_corpus, query_embedding, greatest(k, 0), document_ids;
    PERFORM set_config('hnsw.ef_search', coalesce(previous_ef, '40'), true);
    PERFORM set_config('hnsw.iterative_scan', coalesce(previous_scan, 'off'), true);
END
$$;

-- Hybrid baseline: BM25 and dense fused by reciprocal rank fusion,
-- score(c) = sum over the two lists of 1 / (rrf_k + rank(c)), ranks from 1. Each list
-- contributes its top `depth` chunks; a chunk missing from a list adds nothing for it.
CREATE OR REPLACE FUNCTION pgrag.hybrid(corpus text, query text, query_embedding vector,
                                        k integer DEFAULT 10, depth integer DEFAULT 100,
                                        rrf_k integer DEFAULT 60)
RETURNS SETOF pgrag.hit
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH ranked AS (
        SELECT b.chunk_id, b.rank FROM pgrag.bm25(corpus, query, greatest(k, depth)) b
        UNION ALL
        SELECT d.chunk_id, d.rank FROM pgrag.dense(corpus, query_embedding, greatest(k, depth)) d
    ),
    fused AS (
        SELECT chunk_id, sum(1.0::float8 / (rrf_k + rank)) AS score
        FROM ranked GROUP BY chunk_id
        ORDER BY score DESC, chunk_id
        LIMIT greatest(k, 0)
    )
    SELECT h.* FROM (SELECT array_agg(chunk_id ORDER BY score DESC, chunk_id) AS ids,
                            array_agg(score ORDER BY score DESC, chunk_id) AS scores FROM fused) a
    CROSS JOIN LATERAL pgrag_internal.hits(pgrag_internal.corpus_id(corpus), a.ids, a.scores) h
$$;

-- Sentences of a chunk with their offsets (provenance below chunk level).
-- PL/pgSQL so that the corpus id is a value (Citus routes it to one worker).
CREATE OR REPLACE FUNCTION pgrag.chunk_sentences(corpus text, p_chunk bigint)
RETURNS TABLE (ordinal integer, char_start integer, char_end integer, text text)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
BEGIN
    RETURN QUERY
    SELECT s.ordinal, s.char_start, s.char_end, s.text
    FROM pgrag.chunk c
    JOIN pgrag.sentence s ON s.corpus_id = c.corpus_id AND s.document_id = c.document_id
         AND s.ordinal BETWEEN c.first_sentence AND c.last_sentence
    WHERE c.corpus_id = cid AND c.chunk_id = p_chunk
    ORDER BY s.ordinal;
END
$$;
