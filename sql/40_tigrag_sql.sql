-- TIGRAG in SQL (../shared/papers/tigrag.md §3): graph-weighted pooling,
-- chunk cosines, Personalized PageRank and single-hop pgrag.tigrag.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: SQL-only. An alternative to the Python path, for callers that have
-- only SQL (or a server without PL/Python); the Python methods compute the same in
-- pgrag's own code (see docs/sql.md).
--
-- pgrag_internal.ppr_sql is what pgrag.ppr falls back to without PL/Python
-- (tests/integration/test_inserver.py compares the two); Python's TIGRAG runs PPR
-- with scipy (pgrag/index/pagerank.py) and pools from cached postings (pgrag/index/postings.py).

-- Graph-weighted scoring and cumulative-mass pooling (§3.5-3.6). Candidates are
-- the chunks holding any of p_tokens (expanded tokens, weighted by p_weights = the
-- L1-normalised PPR scores) or p_query_tokens (weight 0). A chunk's score is
-- rho(c) = sum of weight(v) * BM25(v, c) (or weight(v) alone when p_bm25 is false,
-- the paper's "no BM25" ablation). Sorted by rho, the pool is the shortest prefix
-- whose cumulative rho reaches p_threshold of the total; a pool of at most
-- p_max_pool chunks. `candidates` is the number of candidates before pooling.
CREATE OR REPLACE FUNCTION pgrag_internal.tigrag_pool(p_corpus bigint, p_tokens bigint[], p_weights float8[],
                                             p_query_tokens bigint[], p_threshold float8 DEFAULT 0.8,
                                             p_bm25 boolean DEFAULT true, p_max_pool integer DEFAULT 1000,
                                             k1 float8 DEFAULT 1.2, b float8 DEFAULT 0.75)
RETURNS TABLE (chunk_id bigint, rho float8, candidates integer)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    -- Chunk lengths in one scan and a hash join: cheaper than one index probe per
    -- posting when expanded tokens are frequent (thousands of candidates).
    WITH lengths AS MATERIALIZED (
        SELECT c.chunk_id, c.n_tokens::float8 AS dl FROM pgrag.chunk c WHERE c.corpus_id = p_corpus
    ),
    stats AS (
        SELECT count(*)::float8 AS n, greatest(coalesce(avg(dl), 0), 1e-9) AS avgdl FROM lengths
    ),
    weights AS (
        SELECT w.token_id, sum(w.weight) AS weight
        FROM (SELECT * FROM unnest(p_tokens, p_weights) AS x(token_id, weight)
              UNION ALL
              SELECT q, 0.0 FROM unnest(p_query_tokens) AS q) w
        GROUP BY w.token_id
    ),
    terms AS (
        SELECT w.token_id, w.weight,
               CASE WHEN p_bm25 THEN ln(1 + (s.n - t.df::float8 + 0.5) / (t.df::float8 + 0.5)) ELSE 1.0 END AS idf
        FROM weights w
        JOIN pgrag.token t ON t.corpus_id = p_corpus AND t.token_id = w.token_id
        CROSS JOIN stats s
    ),
    scored AS (
        SELECT ct.chunk_id,
               sum(tm.weight * CASE WHEN p_bm25 THEN
                       tm.idf * ct.tf * (k1 + 1) / (ct.tf + k1 * (1 - b + b * l.dl / s.avgdl))
                   ELSE 1.0 END) AS rho
        FROM terms tm
        JOIN pgrag.chunk_token ct ON ct.corpus_id = p_corpus AND ct.token_id = tm.token_id
        JOIN lengths l ON l.chunk_id = ct.chunk_id
        CROSS JOIN stats s
        GROUP BY ct.chunk_id
    ),
    running AS (
        SELECT s.chunk_id, s.rho,
               sum(s.rho) OVER (ORDER BY s.rho DESC, s.chunk_id ROWS UNBOUNDED PRECEDING) AS cum,
               sum(s.rho) OVER () AS total,
               count(*) OVER () AS candidates
        FROM scored s
    )
    SELECT r.chunk_id, r.rho, r.candidates::integer
    FROM running r
    WHERE r.total > 0 AND r.rho > 0 AND r.cum - r.rho < p_threshold * r.total
    ORDER BY r.rho DESC, r.chunk_id
    LIMIT greatest(p_max_pool, 0)
$$;

-- Cosine similarity of chunks to a set of query embeddings: the best over the
-- set, and which embedding (1-based) gave it (§3.6 rerank; §3.7 uses one
-- embedding per "question + entity").
CREATE OR REPLACE FUNCTION pgrag_internal.chunk_cosines(p_corpus bigint, p_chunks bigint[], p_embeddings vector[])
RETURNS TABLE (chunk_id bigint, cosine float8, best integer)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT DISTINCT ON (c.chunk_id) c.chunk_id, 1 - (c.embedding <=> e.v) AS cosine, e.i::integer
    FROM pgrag.chunk c
    CROSS JOIN unnest(p_embeddings) WITH ORDINALITY AS e(v, i)
    WHERE c.corpus_id = p_corpus AND c.chunk_id = ANY (p_chunks)
    ORDER BY c.chunk_id, c.embedding <=> e.v, e.i
$$;

-- Personalized PageRank over the token graph, in SQL: the same power iteration as
-- pgrag/index/pagerank.py (uniform restart over the seeds that are in the vocabulary,
-- dangling mass back to the seeds, stop when the L1 change < tolerance), for
-- callers that only have SQL. Slower than scipy; see docs/BENCHMARKS.md.
CREATE OR REPLACE FUNCTION pgrag_internal.ppr_sql(corpus text, seeds text[], damping float8 DEFAULT 0.5,
                                         top integer DEFAULT 100, tolerance float8 DEFAULT 1e-6,
                                         max_iterations integer DEFAULT 100)
RETURNS TABLE (term text, score float8)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    n_seeds integer;
    residual float8;
    lost float8;
    dangling bigint[];
    i integer := 0;
BEGIN
    IF damping < 0 OR damping >= 1 THEN
        RAISE EXCEPTION 'pgrag: damping must be in [0, 1), got %', damping USING ERRCODE = '22023';
    END IF;
    CREATE TEMP TABLE IF NOT EXISTS ppr_restart (node bigint PRIMARY KEY, v float8) ON COMMIT DROP;
    CREATE TEMP TABLE IF NOT EXISTS ppr_move (src bigint, dst bigint, p float8) ON COMMIT DROP;
    CREATE TEMP TABLE IF NOT EXISTS ppr_rank (node bigint PRIMARY KEY, r float8) ON COMMIT DROP;
    CREATE TEMP TABLE IF NOT EXISTS ppr_next (node bigint PRIMARY KEY, r float8) ON COMMIT DROP;
    TRUNCATE ppr_restart, ppr_move, ppr_rank, ppr_next;

    INSERT INTO ppr_restart
    SELECT DISTINCT t.token_id, 0.0 FROM pgrag.token t
    WHERE t.corpus_id = cid AND t.term = ANY (seeds);
    SELECT count(*) INTO n_seeds FROM ppr_restart;
    IF n_seeds = 0 THEN
        RETURN;
    END IF;
    UPDATE ppr_restart SET v = 1.0 / n_seeds;

    -- The transition matrix once, both directions of every edge: moving from src
    -- to dst carries w / deg(src) of src's rank. Each iteration is then one hash
    -- join of the rank vector with this table.
    INSERT INTO ppr_move
    WITH directed AS (
        SELECT e.token_a AS src, e.token_b AS dst, e.weight::float8 AS w
        FROM pgrag.token_edge e WHERE e.corpus_id = cid
        UNION ALL
        SELECT e.token_b, e.token_a, e.weight::float8
        FROM pgrag.token_edge e WHERE e.corpus_id = cid
    )
    SELECT src, dst, w / sum(w) OVER (PARTITION BY src) FROM directed;
    ANALYZE ppr_move;

    -- Only seeds can be dangling (every other node is reached along an edge).
    SELECT array_agg(s.node) INTO dangling FROM ppr_restart s
    WHERE NOT EXISTS (SELECT 1 FROM ppr_move m WHERE m.src = s.node);
    INSERT INTO ppr_rank SELECT node, v FROM ppr_restart;
    LOOP
        i := i + 1;
        -- Rank mass on tokens without edges goes back to the seeds.
        SELECT coalesce(sum(r.r), 0) INTO lost FROM ppr_rank r WHERE r.node = ANY (dangling);
        TRUNCATE ppr_next;
        INSERT INTO ppr_next
        SELECT m.node, sum(m.r) FROM (
            SELECT s.node, (1 - damping) * s.v + damping * lost * s.v AS r FROM ppr_restart s
            UNION ALL
            SELECT e.dst, damping * r.r * e.p
            FROM ppr_rank r JOIN ppr_move e ON e.src = r.node) m
        GROUP BY m.node;
        SELECT coalesce(sum(abs(coalesce(nx.r, 0) - coalesce(r.r, 0))), 0) INTO residual
        FROM ppr_next nx FULL JOIN ppr_rank r ON r.node = nx.node;
        TRUNCATE ppr_rank;
        INSERT INTO ppr_rank SELECT * FROM ppr_next;
        EXIT WHEN residual < tolerance OR i >= max_iterations;
    END LOOP;

    RETURN QUERY
    SELECT t.term, r.r FROM ppr_rank r
    JOIN pgrag.token t ON t.corpus_id = cid AND t.token_id = r.node
    WHERE r.r > 0
    ORDER BY r.r DESC, t.token_id
    LIMIT greatest(top, 0);
END
$$;

-- Single-hop TIGRAG entirely in SQL (§3.4-3.6): seeds = question tokens in the
-- vocabulary; SQL PPR; top-gamma tokens L1-normalised; graph-weighted BM25;
-- cumulative-mass pool; rerank by cosine to query_embedding, plus graph_weight
-- times rho / max rho (0 gives the paper's pure cosine rerank). Multi-hop needs
-- NER on the retrieved chunks and new embeddings: that is the Python method.
-- An earlier signature (before max_pool and tolerance); CREATE OR REPLACE would
-- otherwise leave it beside the new one and make calls ambiguous.
DROP FUNCTION IF EXISTS pgrag.tigrag(text, text, vector, integer, integer, float8, float8, float8);
CREATE OR REPLACE FUNCTION pgrag.tigrag(corpus text, question text, query_embedding vector,
                                        k integer DEFAULT 5, gamma integer DEFAULT 20,
                                        damping float8 DEFAULT 0.5, threshold float8 DEFAULT 0.8,
                                        graph_weight float8 DEFAULT 0.2, max_pool integer DEFAULT 300,
                                        tolerance float8 DEFAULT 1e-4)
RETURNS SETOF pgrag.hit
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    dim integer;
    seeds text[];
    query_tokens bigint[];
    tokens bigint[];
    weights float8[];
    ppr_terms text[];
    ppr_scores float8[];
    ids bigint[];
    scores float8[];
BEGIN
    SELECT c.embedding_dim INTO dim FROM pgrag.corpus c WHERE c.corpus_id = cid;
    IF vector_dims(query_embedding) <> dim THEN
        RAISE EXCEPTION 'pgrag: query embedding has % dimensions, corpus % uses %',
            vector_dims(query_embedding), quote_literal(corpus), dim
            USING ERRCODE = 'PR002';
    END IF;
    SELECT array_agg(t.term), array_agg(t.token_id) INTO seeds, query_tokens
    FROM pgrag.token t WHERE t.corpus_id = cid AND t.term = ANY (pgrag.tokenize(question));
    IF seeds IS NULL THEN
        RETURN;
    END IF;
    -- PPR first, into arrays: joined with pgrag.token in one statement, Citus
    -- would push the (table-reading) function into the shard query.
    SELECT array_agg(p.term), array_agg(p.score) INTO ppr_terms, ppr_scores
    FROM pgrag.ppr(corpus, seeds, damping, gamma, tolerance) p;
    SELECT array_agg(t.token_id), array_agg(p.score / (SELECT sum(x) FROM unnest(ppr_scores) x))
    INTO tokens, weights
    FROM unnest(ppr_terms, ppr_scores) AS p(term, score)
    JOIN pgrag.token t ON t.corpus_id = cid AND t.term = p.term;
    WITH pool AS (
        SELECT * FROM pgrag_internal.tigrag_pool(cid, tokens, weights, query_tokens, threshold, true, max_pool)
    ),
    ranked AS (
        SELECT p.chunk_id,
               c.cosine + graph_weight * p.rho / (SELECT max(rho) FROM pool) AS score
        FROM pool p
        JOIN pgrag_internal.chunk_cosines(cid, (SELECT array_agg(chunk_id) FROM pool), ARRAY[query_embedding]) c
             ON c.chunk_id = p.chunk_id
        ORDER BY score DESC, p.chunk_id
        LIMIT greatest(k, 0)
    )
    SELECT array_agg(chunk_id ORDER BY score DESC, chunk_id), array_agg(score ORDER BY score DESC, chunk_id)
    INTO ids, scores FROM ranked;
    RETURN QUERY SELECT * FROM pgrag_internal.hits(cid, ids, scores);
END
$$;
