-- The in-server runtime, where the server has PL/Python (plpython3u): pgrag's own
-- Python package runs inside the backend (pgrag/inserver.py), imported once per
-- backend from the paths the schema owner recorded in pgrag_internal._python_path().
--
-- Step 80 of `pgrag db upgrade` (pgrag.schema.upgrade_files) has two
-- alternatives: this file where the server has plpython3u and the role may
-- create its functions, else 80_runtime_missing.sql.
--
-- Implementation: PL/Python (the one function every SQL entry point calls).

-- Record where the server imports pgrag from. Only the owner of schema pgrag can
-- replace pgrag_internal._python_path(), so no other role can point the server's
-- sys.path at code of its own (which would run as the server's OS user).
CREATE OR REPLACE FUNCTION pgrag_internal._record_python_path(paths text[]) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    EXECUTE format('CREATE OR REPLACE FUNCTION pgrag_internal._python_path() RETURNS text[] '
                   'LANGUAGE sql IMMUTABLE SET search_path FROM CURRENT AS %L', format('SELECT %L::text[]', paths));
END
$$;
REVOKE ALL ON FUNCTION pgrag_internal._record_python_path(text[]) FROM PUBLIC;

-- The one PL/Python function: every SQL entry point of sql/90_inserver.sql calls it
-- with its name and its arguments as JSON. SECURITY INVOKER, so the caller's
-- role and row-level security hold for every query it runs.
CREATE OR REPLACE FUNCTION pgrag_internal._py(call text, payload jsonb) RETURNS jsonb
LANGUAGE plpython3u VOLATILE
SET search_path FROM CURRENT
AS $$
rt = GD.get("pgrag.runtime")
if rt is None:
    import sys
    paths = plpy.execute("SELECT pgrag_internal._python_path() AS p")[0]["p"] or []
    sys.path[0:0] = [p for p in paths if p not in sys.path]
    # pgrag imported in the postmaster (pgrag/preload.py) serves this backend only
    # if it is the one this database records and unchanged on disk since.
    pre = sys.modules.get("pgrag.preload")
    if pre is not None and not pre.current(paths):
        pre.forget()
    import pgrag.inserver as rt
    GD["pgrag.runtime"] = rt
return rt.call(plpy, GD, call, payload)
$$;

CREATE OR REPLACE FUNCTION pgrag.runtime() RETURNS text
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$ SELECT 'plpython3u'::text $$;
