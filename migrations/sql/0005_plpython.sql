-- PL/Python for the in-server runtime (pgrag/inserver.py), where the server has
-- it and the migrating role may create it (plpython3u is untrusted: superuser).
-- Elsewhere nothing changes: the SQL entry points that need it raise PR003 and
-- name the alternative (sql/runtime_missing.sql).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'plpython3u') THEN
        CREATE EXTENSION IF NOT EXISTS plpython3u;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'pgrag: plpython3u not enabled (%); the in-server runtime stays off', SQLERRM;
END
$$;
