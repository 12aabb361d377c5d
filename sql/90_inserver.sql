-- The SQL face of pgrag's Python: thin wrappers around pgrag_internal._py (PL/Python,
-- sql/80_runtime_plpython.sql), the same in both kinds of server. An application in
-- any language asks a multi-hop question in one statement, with no vector
-- computed outside the database:
--   SELECT rank, title, details FROM pgrag.retrieve('wiki', 'When did Lothair II''s mother die?', 'tigrag', 5);
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files), after the runtime of step 80.
--
-- Implementation: PL/Python, through the runtime (a server without it raises
-- PR003 here: 80_runtime_missing.sql).

-- pgrag_internal._py's result, or its error raised with pgrag's message and SQLSTATE.
CREATE OR REPLACE FUNCTION pgrag_internal._checked(result jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF result ? 'error' THEN
        RAISE EXCEPTION USING MESSAGE = result -> 'error' ->> 'message',
                              ERRCODE = result -> 'error' ->> 'sqlstate';
    END IF;
    RETURN result;
END
$$;

-- Ranked chunks with provenance, from any registered method (dense, bm25, hybrid,
-- tigrag and its presets, and t2rag / threadrag / cirag retrieval without an
-- LLM). options: the method's settings as a JSON object, e.g. '{"hops": 3}'.
CREATE OR REPLACE FUNCTION pgrag.retrieve(corpus text, question text, method text DEFAULT 'tigrag',
                                          k integer DEFAULT 5, options jsonb DEFAULT '{}')
RETURNS TABLE (rank integer, chunk_id bigint, score float8, document_id bigint, external_id text, title text,
               chunk_ordinal integer, first_sentence integer, last_sentence integer, char_start integer,
               char_end integer, text text, details jsonb)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT h.rank, h.chunk_id, h.score, h.document_id, h.external_id, h.title, h.chunk_ordinal,
           h.first_sentence, h.last_sentence, h.char_start, h.char_end, h.text, h.details
    FROM jsonb_to_recordset(pgrag_internal._checked(pgrag_internal._py('retrieve', jsonb_build_object(
             'corpus', corpus, 'question', question, 'method', method, 'k', k, 'options', options))) -> 'hits')
         AS h(rank integer, chunk_id bigint, score float8, document_id bigint, external_id text, title text,
              chunk_ordinal integer, first_sentence integer, last_sentence integer, char_start integer,
              char_end integer, text text, details jsonb)
    ORDER BY h.rank
$$;

-- The same retrieval as one JSON document: {"hits": [...], "trace": {...}} (the
-- trace says what the method did, step by step, with timings).
CREATE OR REPLACE FUNCTION pgrag.retrieve_trace(corpus text, question text, method text DEFAULT 'tigrag',
                                                k integer DEFAULT 5, options jsonb DEFAULT '{}')
RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('retrieve', jsonb_build_object(
        'corpus', corpus, 'question', question, 'method', method, 'k', k, 'options', options, 'trace', true)))
$$;

-- The embedding of a text with the corpus's own model, for the functions that take
-- a vector (pgrag.dense, pgrag.hybrid, pgrag.tigrag, pgrag.propositions).
CREATE OR REPLACE FUNCTION pgrag.embed(corpus text, input text) RETURNS vector
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT (pgrag_internal._checked(pgrag_internal._py('embed', jsonb_build_object('corpus', corpus, 'text', input))) ->> 'vector')::vector
$$;

-- Personalized PageRank over the token graph: scipy in the server (the graph
-- cached per backend, keyed by graph version) where PL/Python is present, else
-- the pure-SQL power iteration (pgrag_internal.ppr_sql). Same results either way.
CREATE OR REPLACE FUNCTION pgrag.ppr(corpus text, seeds text[], damping float8 DEFAULT 0.5,
                                     top integer DEFAULT 100, tolerance float8 DEFAULT 1e-6,
                                     max_iterations integer DEFAULT 100)
RETURNS TABLE (term text, score float8)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF pgrag.runtime() IS NULL THEN
        RETURN QUERY SELECT * FROM pgrag_internal.ppr_sql(corpus, seeds, damping, top, tolerance, max_iterations);
        RETURN;
    END IF;
    RETURN QUERY
    SELECT r.term, r.score
    FROM jsonb_to_recordset(pgrag_internal._checked(pgrag_internal._py('ppr', jsonb_build_object(
             'corpus', corpus, 'seeds', seeds, 'damping', damping, 'top', top, 'tolerance', tolerance,
             'max_iterations', max_iterations))) -> 'rows') AS r(term text, score float8);
END
$$;

-- Index the documents inserted or changed directly in pgrag.document, as
-- kb.index() does: a non-Python application ingests by INSERTing rows and
-- calling this. Returns the ingest report (documents, chunks, seconds...).
-- Runs in the caller's transaction: a failure leaves everything as it was.
CREATE OR REPLACE FUNCTION pgrag.index(corpus text) RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('index', jsonb_build_object('corpus', corpus)))
$$;

-- An answering method's answer with its evidence (t2rag, threadrag, cirag, or any
-- method registered as answering), the LLM called from the server. The LLM is set
-- with pgrag.llm_base_url, pgrag.llm_model, pgrag.llm_api_key, pgrag.llm_timeout
-- (SET, set_config, ALTER ROLE / DATABASE, postgresql.conf), else PGRAG_LLM_* in
-- the server's environment. options: the method's settings, plus "k" (default 5)
-- and "strict" (raise PR010 when the LLM fails instead of finish = 'llm_error'
-- with the retrieval-only hits).
CREATE OR REPLACE FUNCTION pgrag.answer(corpus text, question text, method text DEFAULT 't2rag',
                                        options jsonb DEFAULT '{}')
RETURNS TABLE (answer text, hits jsonb, trace jsonb, llm_calls integer, prompt_tokens integer,
               completion_tokens integer, finish text)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT r ->> 'answer', r -> 'hits', r -> 'trace', (r ->> 'llm_calls')::integer,
           (r ->> 'prompt_tokens')::integer, (r ->> 'completion_tokens')::integer, r ->> 'finish'
    FROM pgrag_internal._checked(pgrag_internal._py('answer', jsonb_build_object(
             'corpus', corpus, 'question', question, 'method', method, 'options', options))) AS r
$$;

-- Each LLM setting the server would use now and where it comes from (the key is
-- only said to be set, never shown).
CREATE OR REPLACE FUNCTION pgrag.llm_settings()
RETURNS TABLE (setting text, value text, source text)
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT s.setting, s.value, s.source
    FROM jsonb_to_recordset(pgrag_internal._checked(pgrag_internal._py('llm_settings', '{}'::jsonb)) -> 'rows')
         AS s(setting text, value text, source text)
$$;

-- Enable ThreadRAG for a corpus (every later ingest, pgrag.index() included,
-- maintains its semantic nodes) and build the nodes of the documents that have
-- none, as `pgrag threadrag-index` does. One statement, so a failure leaves
-- nothing half done; a second call does only what is left. Returns the report
-- (documents, nodes, seconds...).
CREATE OR REPLACE FUNCTION pgrag.threadrag_index(corpus text) RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('threadrag_index', jsonb_build_object('corpus', corpus)))
$$;

-- Stop maintaining ThreadRAG's semantic nodes for a corpus (later ingests skip
-- them and ThreadRAG refuses to run until pgrag.threadrag_index is called
-- again); with drop => true also delete the nodes and their edges. Returns
-- {"dropped": rows deleted, "families": what the corpus still maintains}.
CREATE OR REPLACE FUNCTION pgrag.threadrag_disable(corpus text, drop boolean DEFAULT false) RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('threadrag_disable', jsonb_build_object('corpus', corpus, 'drop', drop)))
$$;

-- Triples and their proposition embeddings for the chunks not yet processed by
-- the extractor ('spacy', or 'llm' with the LLM settings above), as
-- kb.extract_triples() does: a non-Python application prepares a corpus for
-- T2RAG and CIRAG with it. Resumable (a second call does only what is left);
-- returns the extraction report.
CREATE OR REPLACE FUNCTION pgrag.extract(corpus text, triples text DEFAULT 'spacy') RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('extract', jsonb_build_object('corpus', corpus, 'triples', triples)))
$$;

-- Which model runtime this backend embeds and parses with (the setting
-- pgrag.model_runtime: shared, inprocess, unix:PATH or an embeddings URL), and the
-- shared runtime's health: its model, batches and queue.
CREATE OR REPLACE FUNCTION pgrag.model_runtime() RETURNS jsonb
LANGUAGE sql VOLATILE
SET search_path FROM CURRENT
AS $$
    SELECT pgrag_internal._checked(pgrag_internal._py('model_runtime', '{}'::jsonb))
$$;
