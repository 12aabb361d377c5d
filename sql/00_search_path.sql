-- The search_path every function below captures (SET search_path FROM CURRENT):
-- pg_catalog, pgrag, the schema holding pgvector, pg_temp last, so that objects
-- in a caller's schemas can never shadow ours. Set for this transaction only
-- (set_config's is_local), before the other files, which run in the same
-- transaction. Functions are SECURITY INVOKER (the default): they can do
-- nothing the calling role could not do itself.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared (no function here).

SELECT set_config(
    'search_path',
    'pg_catalog, pgrag, ' || quote_ident(n.nspname) || ', pg_temp',
    true)
FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
WHERE e.extname = 'vector';
