-- pgrag on Citus (docs/citus.md): run by `pgrag db distribute` on the
-- coordinator, and again by every `pgrag db upgrade` of a distributed database
-- so that tables added by later migrations are distributed too. Needs the citus
-- extension; on a single PostgreSQL nothing here is installed or called.
--
-- Layout: pgrag.corpus and pgrag.corpus_acl become reference tables (copied to
-- every node: resolving a corpus name never leaves the node); every other table
-- with a corpus_id column is distributed by corpus_id, all co-located with
-- pgrag.document, so one corpus lives whole in one shard group on one worker and
-- every join and foreign key of pgrag stays on that worker. alembic_version stays
-- a local table of the coordinator (migrations run there).
--
-- Run inside migrations' transaction too: the search_path is set per function,
-- never for the session.
--
-- Not one of the upgrade's numbered files: applied only on Citus, by
-- pgrag.distribute (`pgrag db distribute`, and before the migrations of an
-- upgrade of a distributed database).
--
-- Implementation: shared (SQL only exists for this; no Python alternative).

-- Convert what is not converted yet (idempotent) and return the layout.
--
-- Foreign keys are dropped first and re-created afterwards: Citus refuses to
-- distribute a table that references a plain table, and once pgrag.corpus is a
-- reference table it turns every table referencing it into a "Citus local
-- table", which create_distributed_table then refuses because of the identity
-- columns ("cannot complete operation on a table with identity column"). Without
-- its foreign keys such a table falls back to a plain table and distributes.
-- Everything runs in the caller's transaction, in sequential mode (Citus cannot
-- add foreign keys after parallel shard DDL in one transaction).
CREATE OR REPLACE FUNCTION pgrag.distribute(p_shard_count integer DEFAULT NULL)
RETURNS TABLE (table_name text, kind text, colocation_id integer, shards integer)
LANGUAGE plpgsql
SET search_path = pg_catalog, pgrag, pg_temp
AS $$
DECLARE
    reference constant text[] := ARRAY['corpus', 'corpus_acl'];
    anchor constant text := 'document';
    todo text[];
    t text;
    fk record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension e WHERE e.extname = 'citus') THEN
        RAISE EXCEPTION 'pgrag: the citus extension is not installed in database %', quote_ident(current_database())
            USING ERRCODE = 'PR000',
                  HINT = 'shared_preload_libraries = ''citus'' on every node, CREATE EXTENSION citus, add the workers, then distribute';
    END IF;
    PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);

    -- pgrag's tables that are neither a reference table nor hash-distributed yet
    -- (plain tables, or Citus local tables created by a migration).
    SELECT array_agg(c.relname::text ORDER BY c.relname) INTO todo
    FROM pg_class c
    WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind IN ('r', 'p')
      -- Following an application table stays on the coordinator, beside the
      -- application's table and its triggers: Citus refuses triggers on
      -- distributed tables (pgrag.follow has one), and the queue joins it.
      AND c.relname <> ALL (ARRAY['follow', 'follow_queue'])
      AND (c.relname = ANY (reference)
           OR EXISTS (SELECT 1 FROM pg_attribute a
                      WHERE a.attrelid = c.oid AND a.attname = 'corpus_id' AND NOT a.attisdropped))
      AND NOT EXISTS (SELECT 1 FROM pg_dist_partition p
                      WHERE p.logicalrelid = c.oid AND (p.partmethod = 'h' OR p.repmodel = 't'));

    IF todo IS NOT NULL THEN
        CREATE TEMP TABLE pgrag_distribute_fk ON COMMIT DROP AS
        SELECT format('pgrag.%I', r.relname) AS tbl, k.conname::text AS name, pg_get_constraintdef(k.oid) AS def
        FROM pg_constraint k
        JOIN pg_class r ON r.oid = k.conrelid
        JOIN pg_class f ON f.oid = k.confrelid
        WHERE k.contype = 'f' AND k.connamespace = 'pgrag'::regnamespace
          AND (r.relname::text = ANY (todo) OR f.relname::text = ANY (todo))
        ORDER BY r.relname, k.conname;
        FOR fk IN SELECT * FROM pgrag_distribute_fk LOOP
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tbl, fk.name);
        END LOOP;

        FOREACH t IN ARRAY reference LOOP
            IF t = ANY (todo) THEN
                PERFORM create_reference_table(format('pgrag.%I', t)::regclass);
            END IF;
        END LOOP;
        IF anchor = ANY (todo) THEN
            IF p_shard_count IS NULL THEN
                PERFORM create_distributed_table('pgrag.document'::regclass, 'corpus_id');
            ELSE
                PERFORM create_distributed_table('pgrag.document'::regclass, 'corpus_id',
                                                 shard_count => p_shard_count);
            END IF;
        END IF;
        FOREACH t IN ARRAY todo LOOP
            IF NOT (t = ANY (reference)) AND t <> anchor THEN
                PERFORM create_distributed_table(format('pgrag.%I', t)::regclass, 'corpus_id',
                                                 colocate_with => 'pgrag.document');
            END IF;
        END LOOP;

        FOR fk IN SELECT * FROM pgrag_distribute_fk LOOP
            EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', fk.tbl, fk.name, fk.def);
        END LOOP;
        DROP TABLE pgrag_distribute_fk;
    END IF;

    RETURN QUERY SELECT * FROM pgrag.distribution();
END
$$;

-- How each pgrag table is laid out on Citus.
CREATE OR REPLACE FUNCTION pgrag.distribution()
RETURNS TABLE (table_name text, kind text, colocation_id integer, shards integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgrag, pg_temp
AS $$
    SELECT c.relname::text,
           CASE WHEN p.partmethod = 'h' THEN 'distributed by ' || column_to_column_name(p.logicalrelid, p.partkey)
                WHEN p.repmodel = 't' THEN 'reference'
                WHEN p.logicalrelid IS NOT NULL THEN 'citus local'
                ELSE 'local (coordinator)' END,
           p.colocationid,
           (SELECT count(*)::integer FROM pg_dist_shard s WHERE s.logicalrelid = c.oid)
    FROM pg_class c
    LEFT JOIN pg_dist_partition p ON p.logicalrelid = c.oid
    WHERE c.relnamespace = 'pgrag'::regnamespace AND c.relkind IN ('r', 'p')
    ORDER BY 2 DESC, 1
$$;

-- Where a corpus lives: the worker holding its shard group (one shard of each
-- distributed table).
CREATE OR REPLACE FUNCTION pgrag.corpus_placement(corpus text)
RETURNS TABLE (table_name text, shard_id bigint, node_name text, node_port integer)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pgrag, pg_temp
AS $$
    SELECT r.relname::text, s.shardid, n.nodename::text, n.nodeport
    FROM pg_dist_partition p
    JOIN pg_class r ON r.oid = p.logicalrelid AND r.relnamespace = 'pgrag'::regnamespace
    CROSS JOIN LATERAL (SELECT get_shard_id_for_distribution_column(
                            p.logicalrelid, (SELECT c.corpus_id FROM pgrag.corpus c WHERE c.name = corpus))
                        AS shardid) s
    JOIN pg_dist_placement pl ON pl.shardid = s.shardid
    JOIN pg_dist_node n ON n.groupid = pl.groupid
    WHERE p.partmethod = 'h'
    ORDER BY 1
$$;

-- The catalogue's descriptions (as sql/95_comments.sql gives the rest of schema
-- pgrag): these functions exist only on Citus.
COMMENT ON FUNCTION pgrag.distribute(integer) IS
'convert pgrag''s tables to Citus reference and distributed tables (idempotent) and return the layout
pgrag.corpus and pgrag.corpus_acl become reference tables; every other table with a corpus_id is distributed by it, co-located with pgrag.document. Runs in the caller''s transaction.
Arguments: p_shard_count (shards of each distributed table; NULL, the default, is Citus''s citus.shard_count).
Errors: Citus''s and PostgreSQL''s (the citus extension must be installed).';
COMMENT ON FUNCTION pgrag.distribution() IS
'how each pgrag table is laid out on Citus
One row a table: reference, distributed by a column, Citus local or local (coordinator), its colocation group and its shard count.
Arguments: none.
Errors: none.';
COMMENT ON FUNCTION pgrag.corpus_placement(text) IS
'where a corpus lives on Citus: the worker holding its shard group
One row a distributed table: the shard holding the corpus and its node.
Arguments: corpus (name).
Errors: none (no rows for an unknown corpus).';
