-- Administration: the schema and roles, the in-server runtime and its settings,
-- Citus.
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

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

-- name: plpython_facts
-- Whether this server has PL/Python at all, and whether this database has it created.
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u'),
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'plpython3u');

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
