-- pgrag SQL API: CREATE OR REPLACE definitions, re-applied after every migration
-- upgrade (pgrag.db.upgrade), so this file is the single current definition.
-- A changed signature or return type needs a migration that drops the old one.
--
-- Every function runs with a fixed search_path captured at install time
-- (pg_catalog, pgrag, the schema holding pgvector, pg_temp last) so that objects
-- in a caller's schemas can never shadow ours. Functions are SECURITY INVOKER
-- (the default): they can do nothing the calling role could not do itself.

SELECT set_config(
    'search_path',
    'pg_catalog, pgrag, ' || quote_ident(n.nspname) || ', pg_temp',
    true)
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'vector';

-- The token pipeline, defined once: NFC-normalise, lowercase (Unicode simple case
-- mapping through the builtin pg_c_utf8 collation, PostgreSQL >= 17), split on
-- anything that is not a letter or digit, drop stopwords (spaCy's English list,
-- alphanumeric words of 3+ letters) and tokens shorter than 3 or longer than 64
-- characters (TIGRAG's validity filter keeps years and long numbers). Ingest and
-- queries, from Python or SQL, all go through pgrag.tokenize.
CREATE OR REPLACE FUNCTION pgrag_internal.stopwords() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '{about,above,across,after,afterwards,again,against,all,almost,alone,along,already,also,although,always,among,amongst,amount,and,another,any,anyhow,anyone,anything,anyway,anywhere,are,around,back,became,because,become,becomes,becoming,been,before,beforehand,behind,being,below,beside,besides,between,beyond,both,bottom,but,call,can,cannot,could,did,does,doing,done,down,due,during,each,eight,either,eleven,else,elsewhere,empty,enough,even,ever,every,everyone,everything,everywhere,except,few,fifteen,fifty,first,five,for,former,formerly,forty,four,from,front,full,further,get,give,had,has,have,hence,her,here,hereafter,hereby,herein,hereupon,hers,herself,him,himself,his,how,however,hundred,indeed,into,its,itself,just,keep,last,latter,latterly,least,less,made,make,many,may,meanwhile,might,mine,more,moreover,most,mostly,move,much,must,myself,name,namely,neither,never,nevertheless,next,nine,nobody,none,noone,nor,not,nothing,now,nowhere,off,often,once,one,only,onto,other,others,otherwise,our,ours,ourselves,out,over,own,part,per,perhaps,please,put,quite,rather,really,regarding,same,say,see,seem,seemed,seeming,seems,serious,several,she,should,show,side,since,six,sixty,some,somehow,someone,something,sometime,sometimes,somewhere,still,such,take,ten,than,that,the,their,them,themselves,then,thence,there,thereafter,thereby,therefore,therein,thereupon,these,they,third,this,those,though,three,through,throughout,thru,thus,together,too,top,toward,towards,twelve,twenty,two,under,unless,until,upon,used,using,various,very,via,was,well,were,what,whatever,when,whence,whenever,where,whereafter,whereas,whereby,wherein,whereupon,wherever,whether,which,while,whither,who,whoever,whole,whom,whose,why,will,with,within,without,would,yet,you,your,yours,yourself,yourselves}'::text[];

CREATE OR REPLACE FUNCTION pgrag.tokenize(input text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path FROM CURRENT
RETURN ARRAY(
    SELECT t.term
    FROM regexp_split_to_table(lower(normalize(input, NFC) COLLATE "pg_c_utf8"), '[^[:alnum:]]+')
         WITH ORDINALITY AS t(term, pos)
    WHERE char_length(t.term) BETWEEN 3 AND 64
      AND NOT t.term = ANY (pgrag_internal.stopwords())
    ORDER BY t.pos);

-- Resolve a corpus name, with a clear error (SQLSTATE PR001) when it is unknown.
CREATE OR REPLACE FUNCTION pgrag_internal.corpus_id(corpus text) RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint;
BEGIN
    SELECT c.corpus_id INTO cid FROM pgrag.corpus c WHERE c.name = corpus;
    IF cid IS NULL THEN
        RAISE EXCEPTION 'pgrag: corpus % does not exist', quote_literal(corpus)
            USING ERRCODE = 'PR001', HINT = 'List corpora with: SELECT name FROM pgrag.corpus';
    END IF;
    RETURN cid;
END
$$;

-- Text that is embedded and tokenised for a chunk: the document title, then the
-- chunk's sentences. Python builds the same string for embeddings (ingest.py).
-- Only used while indexing: deletes work from the stored postings, so a title
-- changed later through the ORM cannot skew the subtraction.
CREATE OR REPLACE FUNCTION pgrag_internal.chunk_search_text(title text, chunk_text text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN title = '' THEN chunk_text ELSE title || E'\n' || chunk_text END;

-- Token stream (term, 1-based position) of the given chunks.
CREATE OR REPLACE FUNCTION pgrag_internal.chunk_terms(p_corpus bigint, p_chunks bigint[])
RETURNS TABLE (chunk_id bigint, term text, pos integer)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.chunk_id, t.term, t.pos::integer
    FROM pgrag.chunk c
    JOIN pgrag.document d ON d.corpus_id = c.corpus_id AND d.document_id = c.document_id
    CROSS JOIN LATERAL unnest(pgrag.tokenize(pgrag_internal.chunk_search_text(d.title, c.text)))
         WITH ORDINALITY AS t(term, pos)
    WHERE c.corpus_id = p_corpus AND c.chunk_id = ANY (p_chunks)
$$;

-- Co-occurrence counts contributed by the given chunks (TIGRAG §3.3): slide a
-- window of w tokens over each chunk's token stream; every window adds 1 to each
-- pair of distinct tokens it holds. A stream shorter than w is one window. Computed
-- from the stored postings, so a chunk's contribution can be subtracted exactly.
CREATE OR REPLACE FUNCTION pgrag_internal.chunk_edge_counts(p_corpus bigint, p_chunks bigint[])
RETURNS TABLE (token_a bigint, token_b bigint, weight bigint)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH w AS (SELECT edge_window AS w FROM pgrag.corpus WHERE corpus_id = p_corpus),
    win AS (
        SELECT ct.chunk_id, g.i, ct.token_id
        FROM pgrag.chunk_token ct
        JOIN pgrag.chunk c ON c.corpus_id = ct.corpus_id AND c.chunk_id = ct.chunk_id
        CROSS JOIN w
        CROSS JOIN LATERAL unnest(ct.positions) AS p(pos)
        CROSS JOIN LATERAL generate_series(greatest(1, p.pos - w.w + 1),
                                           least(p.pos, greatest(1, c.n_tokens - w.w + 1))) AS g(i)
        WHERE ct.corpus_id = p_corpus AND ct.chunk_id = ANY (p_chunks)
    ),
    pairs AS (
        SELECT DISTINCT a.chunk_id, a.i, a.token_id AS ta, b.token_id AS tb
        FROM win a JOIN win b
          ON b.chunk_id = a.chunk_id AND b.i = a.i AND a.token_id < b.token_id
    )
    SELECT ta, tb, count(*) FROM pairs GROUP BY ta, tb
$$;

-- The same counts kept apart by chunk: what each chunk added to each edge, logged
-- with its removal (pgrag.chunk_removal) for the caches' deltas. The body repeats
-- chunk_edge_counts's rather than wrapping it both ways: summing these for the
-- ingest costs it a quarter more (measured on 2,000 2Wiki chunks). A test holds
-- the two in step (tests/integration/test_delta.py).
CREATE OR REPLACE FUNCTION pgrag_internal.chunk_edge_counts_by_chunk(p_corpus bigint, p_chunks bigint[])
RETURNS TABLE (chunk_id bigint, token_a bigint, token_b bigint, weight bigint)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    WITH w AS (SELECT edge_window AS w FROM pgrag.corpus WHERE corpus_id = p_corpus),
    win AS (
        SELECT ct.chunk_id, g.i, ct.token_id
        FROM pgrag.chunk_token ct
        JOIN pgrag.chunk c ON c.corpus_id = ct.corpus_id AND c.chunk_id = ct.chunk_id
        CROSS JOIN w
        CROSS JOIN LATERAL unnest(ct.positions) AS p(pos)
        CROSS JOIN LATERAL generate_series(greatest(1, p.pos - w.w + 1),
                                           least(p.pos, greatest(1, c.n_tokens - w.w + 1))) AS g(i)
        WHERE ct.corpus_id = p_corpus AND ct.chunk_id = ANY (p_chunks)
    ),
    pairs AS (
        SELECT DISTINCT a.chunk_id, a.i, a.token_id AS ta, b.token_id AS tb
        FROM win a JOIN win b
          ON b.chunk_id = a.chunk_id AND b.i = a.i AND a.token_id < b.token_id
    )
    SELECT chunk_id, ta, tb, count(*) FROM pairs GROUP BY chunk_id, ta, tb
$$;

CREATE OR REPLACE FUNCTION pgrag_internal.bump_graph_version(p_corpus bigint) RETURNS bigint
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    INSERT INTO pgrag.graph_version AS g (corpus_id, version) VALUES (p_corpus, 1)
    ON CONFLICT (corpus_id) DO UPDATE SET version = g.version + 1
    RETURNING version
$$;

-- Add the given (freshly inserted) chunks to the vocabulary, postings, chunk
-- lengths and co-occurrence graph. Callers hold the corpus write lock.
CREATE OR REPLACE FUNCTION pgrag_internal.index_chunks(p_corpus bigint, p_chunks bigint[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    WITH terms AS MATERIALIZED (
        SELECT * FROM pgrag_internal.chunk_terms(p_corpus, p_chunks)
    ),
    vocab AS (
        INSERT INTO pgrag.token AS t (corpus_id, term, df)
        SELECT p_corpus, term, count(DISTINCT chunk_id) FROM terms GROUP BY term
        ON CONFLICT (corpus_id, term) DO UPDATE SET df = t.df + EXCLUDED.df
        RETURNING t.token_id, t.term
    ),
    lengths AS (
        UPDATE pgrag.chunk c SET n_tokens = s.n
        FROM (SELECT chunk_id, count(*) AS n FROM terms GROUP BY chunk_id) s
        WHERE c.corpus_id = p_corpus AND c.chunk_id = s.chunk_id
    )
    INSERT INTO pgrag.chunk_token (corpus_id, token_id, chunk_id, tf, positions)
    SELECT p_corpus, v.token_id, x.chunk_id, count(*), array_agg(x.pos ORDER BY x.pos)
    FROM terms x JOIN vocab v ON v.term = x.term
    GROUP BY v.token_id, x.chunk_id;

    INSERT INTO pgrag.token_edge AS e (corpus_id, token_a, token_b, weight)
    SELECT p_corpus, token_a, token_b, weight FROM pgrag_internal.chunk_edge_counts(p_corpus, p_chunks)
    ON CONFLICT (corpus_id, token_a, token_b) DO UPDATE SET weight = e.weight + EXCLUDED.weight;

    PERFORM pgrag_internal.bump_graph_version(p_corpus);
END
$$;

-- Remove documents' derived rows and subtract their contribution from document
-- frequencies and edge weights, so the statistics equal a rebuild without them.
-- With p_keep_documents the document rows stay (content is being replaced).
CREATE OR REPLACE FUNCTION pgrag_internal.unindex_documents(
    p_corpus bigint, p_documents bigint[], p_keep_documents boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    chunks bigint[];
    ec bigint[];
    ea bigint[];
    eb bigint[];
    ew bigint[];
    v bigint;
    cutoff bigint;
BEGIN
    SELECT coalesce(array_agg(c.chunk_id), '{}') INTO chunks
    FROM pgrag.chunk c WHERE c.corpus_id = p_corpus AND c.document_id = ANY (p_documents);

    IF cardinality(chunks) > 0 THEN
        v := pgrag_internal.bump_graph_version(p_corpus);
        -- The chunks' edge counts first, as values: a function that reads tables,
        -- joined in a DELETE, would be pushed into the shard by Citus.
        SELECT array_agg(x.chunk_id), array_agg(x.token_a), array_agg(x.token_b), array_agg(x.weight)
        INTO ec, ea, eb, ew
        FROM pgrag_internal.chunk_edge_counts_by_chunk(p_corpus, chunks) x;
        -- What a cached ranking index needs to apply this removal as a delta
        -- (pgrag.postings.advance): the chunks, the tokens they held and what
        -- each added to each edge. Every chunk, those without tokens too: each
        -- counts in BM25's number of chunks.
        INSERT INTO pgrag.chunk_removal (corpus_id, chunk_id, version, tokens)
        SELECT p_corpus, c.chunk_id, v,
               coalesce(array_agg(ct.token_id ORDER BY ct.token_id) FILTER (WHERE ct.token_id IS NOT NULL), '{}')
        FROM pgrag.chunk c
        LEFT JOIN pgrag.chunk_token ct ON ct.corpus_id = c.corpus_id AND ct.chunk_id = c.chunk_id
        WHERE c.corpus_id = p_corpus AND c.chunk_id = ANY (chunks)
        GROUP BY c.chunk_id
        ON CONFLICT (corpus_id, chunk_id) DO NOTHING;
        UPDATE pgrag.chunk_removal r SET edge_a = x.a, edge_b = x.b, edge_w = x.w
        FROM (SELECT u.c, array_agg(u.a ORDER BY u.a, u.b) AS a, array_agg(u.b ORDER BY u.a, u.b) AS b,
                     array_agg(u.w ORDER BY u.a, u.b) AS w
              FROM unnest(ec, ea, eb, ew) AS u(c, a, b, w) GROUP BY u.c) x
        WHERE r.corpus_id = p_corpus AND r.chunk_id = x.c AND r.version = v;
        -- A cache that missed more removals than a tenth of the corpus's chunks
        -- reads the corpus whole anyway (pgrag.postings.DELTA_MAX_SHARE), so the
        -- log keeps only the newest such tenth and says where it starts.
        SELECT r.version INTO cutoff FROM pgrag.chunk_removal r
        WHERE r.corpus_id = p_corpus ORDER BY r.version DESC
        OFFSET (SELECT count(*) / 10 + 1 FROM pgrag.chunk c WHERE c.corpus_id = p_corpus) LIMIT 1;
        IF cutoff IS NOT NULL THEN
            DELETE FROM pgrag.chunk_removal r WHERE r.corpus_id = p_corpus AND r.version <= cutoff;
            UPDATE pgrag.graph_version g SET logged_from = greatest(g.logged_from, cutoff)
            WHERE g.corpus_id = p_corpus;
        END IF;
        -- The edges' totals over the chunks.
        SELECT array_agg(t.a), array_agg(t.b), array_agg(t.w) INTO ea, eb, ew
        FROM (SELECT u.a, u.b, sum(u.w)::bigint AS w FROM unnest(ea, eb, ew) AS u(a, b, w)
              GROUP BY u.a, u.b) t;
        -- Delete the edges that drop to zero first, then subtract from the rest.
        DELETE FROM pgrag.token_edge e
        USING unnest(ea, eb, ew) AS x(token_a, token_b, weight)
        WHERE e.corpus_id = p_corpus AND e.token_a = x.token_a AND e.token_b = x.token_b
          AND e.weight <= x.weight;
        UPDATE pgrag.token_edge e SET weight = e.weight - x.weight
        FROM unnest(ea, eb, ew) AS x(token_a, token_b, weight)
        WHERE e.corpus_id = p_corpus AND e.token_a = x.token_a AND e.token_b = x.token_b;

        UPDATE pgrag.token t SET df = t.df - p.n
        FROM (SELECT ct.token_id, count(*) AS n FROM pgrag.chunk_token ct
              WHERE ct.corpus_id = p_corpus AND ct.chunk_id = ANY (chunks)
              GROUP BY ct.token_id) p
        WHERE t.corpus_id = p_corpus AND t.token_id = p.token_id;

        DELETE FROM pgrag.chunk c WHERE c.corpus_id = p_corpus AND c.chunk_id = ANY (chunks);
        DELETE FROM pgrag.token t WHERE t.corpus_id = p_corpus AND t.df = 0;
    END IF;

    DELETE FROM pgrag.sentence s WHERE s.corpus_id = p_corpus AND s.document_id = ANY (p_documents);
    IF p_keep_documents THEN
        UPDATE pgrag.document d SET indexed_hash = NULL
        WHERE d.corpus_id = p_corpus AND d.document_id = ANY (p_documents);
    ELSE
        DELETE FROM pgrag.document d WHERE d.corpus_id = p_corpus AND d.document_id = ANY (p_documents);
    END IF;
END
$$;

-- Delete documents of a corpus by external id, with every row derived from them
-- (kb.delete and the SQL face run this one function). Returns how many existed.
-- Takes the corpus write lock, so it waits for a concurrent ingest of the corpus.
CREATE OR REPLACE FUNCTION pgrag.delete_documents(corpus text, ids text[]) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
    docs bigint[];
BEGIN
    PERFORM pg_advisory_xact_lock(74142471, cid::int);
    SELECT coalesce(array_agg(d.document_id), '{}') INTO docs
    FROM pgrag.document d WHERE d.corpus_id = cid AND d.external_id = ANY (ids);
    IF cardinality(docs) > 0 THEN
        PERFORM pgrag_internal.unindex_documents(cid, docs, false);
    END IF;
    RETURN cardinality(docs);
END
$$;

-- One partial HNSW index per corpus and embedding table (chunk or triple), on the
-- embedding cast to the corpus's dimension; built after a corpus's first bulk load
-- (faster than row by row). p_table comes from pgrag's code, never from input, and
-- is checked against the two tables that have embeddings.
CREATE OR REPLACE FUNCTION pgrag_internal.ensure_hnsw_index(p_corpus bigint, p_table text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    dim integer;
    index_name text := p_table || '_embedding_hnsw_' || p_corpus;
BEGIN
    IF p_table NOT IN ('chunk', 'triple') THEN
        RAISE EXCEPTION 'pgrag: no embeddings in table %', quote_literal(p_table);
    END IF;
    -- Checked first: CREATE INDEX IF NOT EXISTS would still take a SHARE lock on
    -- the table, briefly blocking writers of every corpus.
    IF to_regclass(format('pgrag.%I', index_name)) IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT c.embedding_dim INTO STRICT dim FROM pgrag.corpus c WHERE c.corpus_id = p_corpus;
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON pgrag.%I USING hnsw ((embedding::vector(%s)) vector_cosine_ops) WHERE corpus_id = %s',
        index_name, p_table, dim, p_corpus);
END
$$;

CREATE OR REPLACE FUNCTION pgrag_internal.ensure_chunk_index(p_corpus bigint) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$ SELECT pgrag_internal.ensure_hnsw_index(p_corpus, 'chunk') $$;

CREATE OR REPLACE FUNCTION pgrag.drop_corpus(corpus text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
BEGIN
    EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', 'chunk_embedding_hnsw_' || cid);
    EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', 'triple_embedding_hnsw_' || cid);
    DELETE FROM pgrag.chunk_token WHERE corpus_id = cid;
    DELETE FROM pgrag.token_edge WHERE corpus_id = cid;
    DELETE FROM pgrag.corpus WHERE corpus_id = cid;
END
$$;

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

-- ---------------------------------------------------------------------------
-- TIGRAG (../shared/papers/tigrag.md §3)
-- ---------------------------------------------------------------------------

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
-- pgrag/graph.py (uniform restart over the seeds that are in the vocabulary,
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

-- ---------------------------------------------------------------------------
-- Triples and propositions (T2RAG's retrieval unit)
-- ---------------------------------------------------------------------------

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

-- ---------------------------------------------------------------------------
-- Roles and tenant isolation (README "Security and operations")
-- ---------------------------------------------------------------------------
-- Roles are cluster-wide, so pgrag never creates them: an administrator does
-- (CREATE ROLE app_ro LOGIN ...) and then grants pgrag's privileges in each
-- database. Every function here is SECURITY INVOKER: only the schema owner (or a
-- superuser) can actually grant, enable policies or write pgrag.corpus_acl.

-- The one exception to SECURITY INVOKER. Building or checking a corpus's HNSW
-- index is DDL, which PostgreSQL allows only to the table's owner, and ingest
-- needs it. The body takes no identifier from its caller (the table is checked
-- against a fixed list, the corpus id is a bigint, the dimension comes from
-- pgrag.corpus) and search_path is fixed, so running it as the owner is safe.
-- Re-applied here because CREATE OR REPLACE above resets it to INVOKER.
ALTER FUNCTION pgrag_internal.ensure_hnsw_index(bigint, text) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION pgrag_internal.ensure_hnsw_index(bigint, text) FROM PUBLIC;

-- Read access: the schema, every table (current ones, and through default
-- privileges those later migrations add), temporary tables (pgrag.ppr uses them)
-- and the schema holding pgvector. Retrieval functions are executable by PUBLIC.
CREATE OR REPLACE FUNCTION pgrag.grant_reader(role_name name) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    vector_schema name := (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                           WHERE e.extname = 'vector');
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA pgrag TO %I', role_name);
    -- the public functions call their helpers there, as the caller
    EXECUTE format('GRANT USAGE ON SCHEMA pgrag_internal TO %I', role_name);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', vector_schema, role_name);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA pgrag TO %I', role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag GRANT SELECT ON TABLES TO %I', role_name);
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO %I', current_database(), role_name);
END
$$;

-- Write access for ingest, on top of read access: rows of every table except the
-- access list, the identity sequences (ingest reserves chunk ids with nextval),
-- and the HNSW index helper above. Dropping a corpus (DROP INDEX) stays with the
-- owner.
CREATE OR REPLACE FUNCTION pgrag.grant_writer(role_name name) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pgrag.grant_reader(role_name);
    EXECUTE format('GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgrag TO %I', role_name);
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE ON pgrag.corpus_acl, pgrag.alembic_version FROM %I', role_name);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA pgrag TO %I', role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag GRANT INSERT, UPDATE, DELETE ON TABLES TO %I', role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag GRANT USAGE, SELECT ON SEQUENCES TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION pgrag_internal.ensure_hnsw_index(bigint, text) TO %I', role_name);
END
$$;

-- Undo grant_reader / grant_writer (e.g. before DROP ROLE).
CREATE OR REPLACE FUNCTION pgrag.revoke_role(role_name name) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA pgrag FROM %I', role_name);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgrag FROM %I', role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag REVOKE ALL ON TABLES FROM %I', role_name);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA pgrag REVOKE ALL ON SEQUENCES FROM %I', role_name);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION pgrag_internal.ensure_hnsw_index(bigint, text) FROM %I', role_name);
    EXECUTE format('REVOKE USAGE ON SCHEMA pgrag FROM %I', role_name);
    EXECUTE format('REVOKE USAGE ON SCHEMA pgrag_internal FROM %I', role_name);
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM %I', current_database(), role_name);
    DELETE FROM pgrag.corpus_acl a WHERE a.role_name = revoke_role.role_name;
END
$$;

-- Let a role (and every role that is a member of it) see a corpus once tenant
-- isolation is on. The role must exist; it is stored by name.
CREATE OR REPLACE FUNCTION pgrag.grant_corpus(role_name name, corpus text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = grant_corpus.role_name) THEN
        RAISE EXCEPTION 'pgrag: role % does not exist', quote_ident(role_name) USING ERRCODE = '42704';
    END IF;
    INSERT INTO pgrag.corpus_acl (corpus_id, role_name)
    VALUES (pgrag_internal.corpus_id(corpus), grant_corpus.role_name)
    ON CONFLICT DO NOTHING;
END
$$;

CREATE OR REPLACE FUNCTION pgrag.revoke_corpus(role_name name, corpus text) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    DELETE FROM pgrag.corpus_acl a
    WHERE a.corpus_id = pgrag_internal.corpus_id(corpus) AND a.role_name = revoke_corpus.role_name
$$;

-- Row-level security by corpus on every pgrag table. A corpus row is visible to
-- the roles in its access list (and their members); every other table's rows are
-- visible when their corpus is, and may only be written into such a corpus.
-- The schema owner, superusers and BYPASSRLS roles are not restricted (the
-- policies are not FORCEd), so migrations and administration see everything.
-- Re-run after migrations add tables (functions.sql does it on every upgrade).
-- Returns the number of tables under a policy.
--
-- On Citus the same isolation takes another form, because Citus refuses the
-- sublinks of the single-node policies (CREATE POLICY fails with "unexpected
-- non-SELECT command in SubLink" when it propagates them to the shards): the
-- policies call the two functions below instead, evaluated on the workers. The
-- access list is a reference table, present on every node, and reading it from
-- a shard query needs citus.allow_nested_distributed_execution, set on that one
-- function only (safe: a reference table's placement is local everywhere).
CREATE OR REPLACE FUNCTION pgrag_internal.is_role_member(role_name text) RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = is_role_member.role_name AND pg_catalog.pg_has_role(r.oid, 'MEMBER'))
$$;

CREATE OR REPLACE FUNCTION pgrag_internal.corpus_visible(p_corpus bigint) RETURNS boolean
LANGUAGE sql STABLE
SET search_path FROM CURRENT
SET citus.allow_nested_distributed_execution = on
AS $$
    SELECT EXISTS (SELECT 1 FROM pgrag.corpus_acl a
                   WHERE a.corpus_id = p_corpus AND pgrag_internal.is_role_member(a.role_name))
$$;

CREATE OR REPLACE FUNCTION pgrag.enable_tenant_isolation() RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    t name;
    n integer := 0;
    citus boolean := EXISTS (SELECT 1 FROM pg_extension e WHERE e.extname = 'citus');
    child_rule text := CASE WHEN citus THEN 'pgrag_internal.corpus_visible(corpus_id)'
                            ELSE 'corpus_id IN (SELECT c.corpus_id FROM pgrag.corpus c)' END;
BEGIN
    ALTER TABLE pgrag.corpus_acl ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS pgrag_tenant ON pgrag.corpus_acl;
    ALTER TABLE pgrag.corpus ENABLE ROW LEVEL SECURITY;
    DROP POLICY IF EXISTS pgrag_tenant ON pgrag.corpus;
    IF citus THEN
        CREATE POLICY pgrag_tenant ON pgrag.corpus_acl
            USING (pgrag_internal.is_role_member(role_name)) WITH CHECK (false);
        CREATE POLICY pgrag_tenant ON pgrag.corpus USING (pgrag_internal.corpus_visible(corpus_id));
    ELSE
        CREATE POLICY pgrag_tenant ON pgrag.corpus_acl
            USING (role_name IN (SELECT r.rolname FROM pg_catalog.pg_roles r
                                 WHERE pg_catalog.pg_has_role(r.oid, 'MEMBER')))
            WITH CHECK (false);
        -- Reads the access list through its own policy: only the caller's rows.
        CREATE POLICY pgrag_tenant ON pgrag.corpus
            USING (corpus_id IN (SELECT a.corpus_id FROM pgrag.corpus_acl a));
    END IF;
    FOR t IN
        SELECT c.table_name FROM information_schema.columns c
        WHERE c.table_schema = 'pgrag' AND c.column_name = 'corpus_id'
          AND c.table_name NOT IN ('corpus', 'corpus_acl')
          AND EXISTS (SELECT 1 FROM information_schema.tables x WHERE x.table_schema = 'pgrag'
                        AND x.table_name = c.table_name AND x.table_type = 'BASE TABLE')
        ORDER BY 1
    LOOP
        EXECUTE format('ALTER TABLE pgrag.%I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('DROP POLICY IF EXISTS pgrag_tenant ON pgrag.%I', t);
        EXECUTE format('CREATE POLICY pgrag_tenant ON pgrag.%I USING (%s) WITH CHECK (%s)', t, child_rule, child_rule);
        n := n + 1;
    END LOOP;
    RETURN n + 2;
END
$$;

CREATE OR REPLACE FUNCTION pgrag.disable_tenant_isolation() RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    t name;
    n integer := 0;
BEGIN
    FOR t IN SELECT p.tablename FROM pg_policies p WHERE p.schemaname = 'pgrag' AND p.policyname = 'pgrag_tenant'
    LOOP
        EXECUTE format('DROP POLICY pgrag_tenant ON pgrag.%I', t);
        EXECUTE format('ALTER TABLE pgrag.%I DISABLE ROW LEVEL SECURITY', t);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Once isolation is on, tables added by later migrations get their policy here.
DO $$
BEGIN
    IF (SELECT c.relrowsecurity FROM pg_class c WHERE c.oid = 'pgrag.corpus'::regclass) THEN
        PERFORM pgrag.enable_tenant_isolation();
    END IF;
END
$$;
