-- Every statement the Python layer runs, by name. Parameters are %(name)s and are
-- always bound by the driver; Python never formats values into SQL.

-- name: server_facts
-- Server version, database encoding and whether pgvector can be installed.
SELECT current_setting('server_version_num')::int,
       pg_encoding_to_char(encoding),
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector')
FROM pg_database WHERE datname = current_database();

-- name: migration_lock
-- Serialise concurrent migrators (released at commit).
SELECT pg_advisory_xact_lock(%(key)s);
