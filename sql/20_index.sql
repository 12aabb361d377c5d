-- Corpus names, index upkeep and the corpus lifecycle: resolving a corpus, the
-- postings and co-occurrence graph of chunks added or removed, HNSW indexes,
-- deleting documents and corpora.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. The Python layer (named queries) and SQL callers run these same
-- functions; there is no second implementation.

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
        -- (pgrag.index.delta.advance): the chunks, the tokens they held and what
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
        -- reads the corpus whole anyway (pgrag.index.delta.DELTA_MAX_SHARE), so the
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

-- Every corpus has its HNSW indexes, also where its rows came without them: a
-- data-only restore into a schema pgrag made (docs/managed.md, "Moving a
-- database") brings rows, not the per-corpus indexes that ingest creates. The
-- check is a catalogue lookup a corpus, so re-applying this on every upgrade costs
-- nothing once they exist.
-- (A corpus's triples are looked up by its id, not by a subquery correlated with
-- pgrag.corpus, which Citus refuses over its reference table; the loop reads only
-- pgrag.corpus, as CREATE INDEX refuses a table the same statement still scans.)
DO $$
DECLARE
    corpus bigint;
BEGIN
    FOR corpus IN SELECT c.corpus_id FROM pgrag.corpus c ORDER BY 1 LOOP
        PERFORM pgrag_internal.ensure_hnsw_index(corpus, 'chunk');
        IF EXISTS (SELECT 1 FROM pgrag.triple t WHERE t.corpus_id = corpus) THEN
            PERFORM pgrag_internal.ensure_hnsw_index(corpus, 'triple');
        END IF;
    END LOOP;
END
$$;

-- The planner's statistics of the tables a corpus fills, refreshed when they do
-- not know the corpus. Autovacuum analyzes a table once a tenth of it has
-- changed, so a corpus much smaller than the database's others stays out of the
-- statistics after its ingest; the planner then estimates its rows at about one
-- and, for the foreign keys' row-by-row checks, takes any index that starts
-- with corpus_id and walks the whole corpus through it. Dropping a freshly
-- ingested 300-document corpus beside two of 6,119 took 18.3 s (1.3 s when the
-- drop analyzes first, 0.3 s after an ingest that did), 1,500 documents over 9
-- minutes; lookups by chunk id pay the same way.
-- The estimate of the corpus's chunks is the probe: at least 20 chunks and ten
-- times the estimate analyze every table that holds a corpus's rows (0.7 s on
-- that database). Returns whether it did.
CREATE OR REPLACE FUNCTION pgrag_internal.refresh_statistics(p_corpus bigint) RETURNS boolean
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    actual bigint;
    plan json;
BEGIN
    SELECT count(*) INTO actual FROM pgrag.chunk c WHERE c.corpus_id = p_corpus;
    IF actual < 20 THEN
        RETURN false;
    END IF;
    EXECUTE 'EXPLAIN (FORMAT JSON) SELECT 1 FROM pgrag.chunk WHERE corpus_id = $1' INTO plan USING p_corpus;
    IF (plan -> 0 -> 'Plan' ->> 'Plan Rows')::float8 * 10 >= actual THEN
        RETURN false;
    END IF;
    ANALYZE pgrag.document, pgrag.sentence, pgrag.chunk, pgrag.token, pgrag.chunk_token, pgrag.token_edge,
            pgrag.chunk_entity, pgrag.triple, pgrag.chunk_extraction, pgrag.semantic_node, pgrag.semantic_edge,
            pgrag.entity_vector;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION pgrag.drop_corpus(corpus text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
BEGIN
    -- before the deletes: their cascades check row by row, with these statistics
    PERFORM pgrag_internal.refresh_statistics(cid);
    EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', 'chunk_embedding_hnsw_' || cid);
    EXECUTE format('DROP INDEX IF EXISTS pgrag.%I', 'triple_embedding_hnsw_' || cid);
    DELETE FROM pgrag.chunk_token WHERE corpus_id = cid;
    DELETE FROM pgrag.token_edge WHERE corpus_id = cid;
    DELETE FROM pgrag.corpus WHERE corpus_id = cid;
END
$$;
