-- The in-server runtime where the server has no PL/Python (a managed service
-- without plpython3u): the same entry points fail with SQLSTATE PR003 and say
-- what to do instead. The pure-SQL functions (bm25, dense, hybrid, tigrag with a
-- vector, ppr) keep working.
--
-- Step 80 of `pgrag db upgrade` (pgrag.schema.upgrade_files) has two
-- alternatives: this file, applied instead of 80_runtime_plpython.sql where the
-- server has no plpython3u or the role may not create its functions.
--
-- Implementation: SQL-only (plpgsql stand-ins for the PL/Python entry point).

CREATE OR REPLACE FUNCTION pgrag_internal._py(call text, payload jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION 'pgrag: pgrag.%() needs PL/Python (plpython3u) inside the server, which this server does not have', call
        USING ERRCODE = 'PR003',
              HINT = 'Call pgrag from Python instead: pgrag.connect(dsn).corpus(name).retrieve(question, method=...); '
                     'or install plpython3u on the server and run `pgrag db upgrade`.';
END
$$;

CREATE OR REPLACE FUNCTION pgrag.runtime() RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$ SELECT NULL::text $$;

-- No runtime, so nothing is imported from anywhere.
CREATE OR REPLACE FUNCTION pgrag_internal._python_path() RETURNS text[]
LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS $$ SELECT NULL::text[] $$;
