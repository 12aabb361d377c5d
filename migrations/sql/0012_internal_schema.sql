-- One public SQL surface (README "SQL reference"): schema pgrag holds what users
-- call; the helpers behind it (the PL/Python entry point, the index and follow
-- machinery, row-level security's test, the single-method building blocks) move
-- to schema pgrag_internal, which PUBLIC may not use. Roles get it with
-- pgrag.grant_reader. ALTER ... SET SCHEMA keeps each function's identity, so
-- the triggers and policies that call them keep working; sql/*.sql then
-- re-creates them there on every upgrade.

CREATE SCHEMA IF NOT EXISTS pgrag_internal;

REVOKE ALL ON SCHEMA pgrag_internal FROM PUBLIC;

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'pgrag' AND p.proname IN ('_checked', '_py', '_python_path', '_record_python_path', 'bump_graph_version', 'chunk_cosines', 'chunk_edge_counts', 'chunk_edge_counts_by_chunk', 'chunk_search_text', 'chunk_terms', 'cirag_documents', 'cirag_triples', 'cirag_triples_in', 'corpus_id', 'corpus_visible', 'ensure_chunk_index', 'ensure_hnsw_index', 'ensure_triple_index', 'follow_column', 'follow_enqueue', 'follow_error', 'follow_forget', 'follow_source', 'hit_sentences', 'hits', 'index_chunks', 'is_role_member', 'ppr_sql', 'stopwords', 'tigrag_pool', 'unindex_documents')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA pgrag_internal', f);
    END LOOP;
END
$$;

-- Roles that read or write pgrag already: the schema too.
DO $$
DECLARE
    r name;
BEGIN
    FOR r IN
        SELECT DISTINCT pg_get_userbyid(a.grantee) FROM pg_namespace n, aclexplode(n.nspacl) a
        WHERE n.nspname = 'pgrag' AND a.privilege_type = 'USAGE' AND a.grantee <> 0
          AND a.grantee <> n.nspowner
    LOOP
        EXECUTE format('GRANT USAGE ON SCHEMA pgrag_internal TO %I', r);
    END LOOP;
END
$$;
