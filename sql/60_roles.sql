-- Roles and tenant isolation (README "Security and operations").
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. The Python layer (named queries) and SQL callers run these same
-- functions; there is no second implementation.

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
-- The same for refreshing the planner's statistics after an ingest
-- (pgrag_internal.refresh_statistics): ANALYZE is the owner's too, the body
-- takes only a bigint and names a fixed list of tables.
ALTER FUNCTION pgrag_internal.refresh_statistics(bigint) SECURITY DEFINER;
REVOKE EXECUTE ON FUNCTION pgrag_internal.refresh_statistics(bigint) FROM PUBLIC;

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
-- and the two helpers above that run as the owner. Dropping a corpus (DROP
-- INDEX) stays with the owner.
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
    EXECUTE format('GRANT EXECUTE ON FUNCTION pgrag_internal.refresh_statistics(bigint) TO %I', role_name);
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
    EXECUTE format('REVOKE EXECUTE ON FUNCTION pgrag_internal.refresh_statistics(bigint) FROM %I', role_name);
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
-- Re-run after migrations add tables (this file does it on every upgrade).
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

--
-- The setting is written only where Citus is installed: elsewhere it is an unknown
-- placeholder, which only a superuser may attach to a function, and a database
-- owner that is not one (a managed service's application role) could not apply
-- this file. Without Citus the function is used by nothing.
DO $do$
DECLARE
    nested text := CASE WHEN EXISTS (SELECT 1 FROM pg_extension e WHERE e.extname = 'citus')
                        THEN 'SET citus.allow_nested_distributed_execution = on' ELSE '' END;
BEGIN
    EXECUTE format($fn$
        CREATE OR REPLACE FUNCTION pgrag_internal.corpus_visible(p_corpus bigint) RETURNS boolean
        LANGUAGE sql STABLE
        SET search_path FROM CURRENT
        %s
        AS $body$
            SELECT EXISTS (SELECT 1 FROM pgrag.corpus_acl a
                           WHERE a.corpus_id = p_corpus AND pgrag_internal.is_role_member(a.role_name))
        $body$$fn$, nested);
END
$do$;

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
