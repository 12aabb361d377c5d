-- Corpora that follow an application table (docs/follow.md): attach/detach,
-- the enqueue trigger, the source-row reader and the sync_status view.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): CREATE OR REPLACE definitions, so this file
-- is the single current definition of what it holds. A changed signature or
-- return type needs a migration that drops the old one.
--
-- Implementation: shared. pgrag.follow (Python) and `pgrag.index` call these.
--
-- Identifiers of the application's table and columns never come from input
-- unchecked: pgrag.attach() looks each one up in the catalog, stores the
-- catalog's spelling, and every statement built from them quotes them with
-- format('%I'); values are always bound (USING) or passed as trigger arguments
-- quoted with format('%L').

-- The search_path these functions capture is 00_search_path.sql's.

-- The row trigger behind every attachment (TG_ARGV: corpus id, id column). It
-- appends the key of the changed row to the queue, in the application's own
-- transaction (a rollback enqueues nothing), and notifies workers (one
-- notification per transaction and corpus: PostgreSQL folds duplicates). It
-- never reads or locks anything else, so an application write waits for no
-- worker.
--
-- SECURITY DEFINER, reviewed: the application role needs no privilege on pgrag
-- tables, only on its own table. The body takes no identifier from anywhere:
-- the id column is read as a jsonb key of the row (a value, not SQL), the corpus
-- id is cast to bigint, and every object is schema-qualified under a fixed
-- search_path that holds no schema other roles can create objects in. EXECUTE
-- is revoked from PUBLIC, so only pgrag's owner can create a trigger that uses
-- it (firing a trigger needs no EXECUTE privilege); pgrag.attach() does.
CREATE OR REPLACE FUNCTION pgrag_internal.follow_enqueue() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pgrag, pg_temp
AS $$
DECLARE
    cid bigint := TG_ARGV[0]::bigint;
    old_key text;
    new_key text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO pgrag.follow_queue (corpus_id, source_key, op)
        SELECT cid, d.external_id, 'delete' FROM pgrag.document d WHERE d.corpus_id = cid;
    ELSE
        IF TG_OP <> 'INSERT' THEN
            old_key := to_jsonb(OLD) ->> TG_ARGV[1];
        END IF;
        IF TG_OP <> 'DELETE' THEN
            new_key := to_jsonb(NEW) ->> TG_ARGV[1];
        END IF;
        IF new_key IS NOT NULL THEN
            INSERT INTO pgrag.follow_queue (corpus_id, source_key, op) VALUES (cid, new_key, lower(TG_OP));
        END IF;
        IF old_key IS NOT NULL AND old_key IS DISTINCT FROM new_key THEN
            INSERT INTO pgrag.follow_queue (corpus_id, source_key, op) VALUES (cid, old_key, 'delete');
        END IF;
    END IF;
    PERFORM pg_notify('pgrag_follow', cid::text);
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgrag_internal.follow_enqueue() FROM PUBLIC;

-- Raise a pgrag attach error (SQLSTATE PR006, pgrag.AttachError in Python).
CREATE OR REPLACE FUNCTION pgrag_internal.follow_error(message text) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    RAISE EXCEPTION 'pgrag: %', message USING ERRCODE = 'PR006';
END
$$;

-- A column of a table, checked: its catalog name and type, or an error naming it.
CREATE OR REPLACE FUNCTION pgrag_internal.follow_column(p_table oid, p_label text, p_column text,
                                               OUT attname text, OUT atttypid oid)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF p_column IS NULL OR p_column = '' THEN
        PERFORM pgrag_internal.follow_error(format('%s must name a column', p_label));
    END IF;
    SELECT a.attname::text, a.atttypid INTO attname, atttypid
    FROM pg_attribute a
    WHERE a.attrelid = p_table AND a.attname = p_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF attname IS NULL THEN
        PERFORM pgrag_internal.follow_error(format('%s %s: table %s has no such column',
                                          p_label, quote_ident(p_column), p_table::regclass));
    END IF;
END
$$;

-- Make corpus follow an application table. The table is 'schema.table' (or
-- 'table' in schema public). Checks that the table and columns exist, that the
-- id column is unique (a primary key or unique index on it alone) and of a key
-- type (text, varchar, smallint, integer, bigint, uuid), and that the text and
-- title columns are text-like; any failure raises SQLSTATE PR006 and changes
-- nothing. Creates the corpus if needed (with the given model and dimension),
-- records the attachment, creates the row triggers, and enqueues every existing
-- row (and every document the corpus already holds, so that what is not in the
-- table goes away). Returns the number of queue items added.
CREATE OR REPLACE FUNCTION pgrag.attach(
    corpus text, source text,
    id_column text, text_column text,
    title_column text DEFAULT NULL,
    metadata_columns text[] DEFAULT '{}',
    triples text DEFAULT NULL,
    embedding_model text DEFAULT 'all-MiniLM-L6-v2',
    embedding_dim integer DEFAULT 384,
    max_attempts integer DEFAULT 5,
    retry_seconds float8 DEFAULT 10)
RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    parts text[];
    src_schema text;
    src_table text;
    rel oid;
    kind "char";
    id_col record;
    text_col record;
    title_col record;
    meta_col record;
    meta_names text[] := '{}';
    watched text[];
    cid bigint;
    trigger_base text;
    args text;
    n_source bigint;
    n_docs bigint;
    c text;
BEGIN
    IF corpus IS NULL OR source IS NULL THEN
        PERFORM pgrag_internal.follow_error('attach needs a corpus name and a source table');
    END IF;
    BEGIN
        parts := parse_ident(source);
    EXCEPTION WHEN invalid_parameter_value THEN
        PERFORM pgrag_internal.follow_error(format('%s is not a table name (expected schema.table)', quote_literal(source)));
    END;
    IF cardinality(parts) = 1 THEN
        parts := ARRAY['public', parts[1]];
    ELSIF cardinality(parts) <> 2 THEN
        PERFORM pgrag_internal.follow_error(format('%s is not a table name (expected schema.table)', quote_literal(source)));
    END IF;
    src_schema := parts[1];
    src_table := parts[2];
    IF src_schema = 'pgrag' OR src_schema LIKE 'pg\_%' OR src_schema = 'information_schema' THEN
        PERFORM pgrag_internal.follow_error(format('cannot attach %I.%I: a corpus follows an application table, '
                                          'not a system or pgrag table', src_schema, src_table));
    END IF;
    SELECT k.oid, k.relkind INTO rel, kind
    FROM pg_class k JOIN pg_namespace n ON n.oid = k.relnamespace
    WHERE n.nspname = src_schema AND k.relname = src_table;
    IF rel IS NULL THEN
        PERFORM pgrag_internal.follow_error(format('table %I.%I does not exist', src_schema, src_table));
    ELSIF kind NOT IN ('r', 'p') THEN
        PERFORM pgrag_internal.follow_error(format('%I.%I is not a table (views and other relations cannot be followed)',
                                          src_schema, src_table));
    END IF;

    id_col := pgrag_internal.follow_column(rel, 'id_column', id_column);
    IF id_col.atttypid NOT IN ('text'::regtype, 'varchar'::regtype, 'int2'::regtype, 'int4'::regtype,
                               'int8'::regtype, 'uuid'::regtype) THEN
        PERFORM pgrag_internal.follow_error(format('id_column %I is %s; it must be text, varchar, smallint, integer, '
                                          'bigint or uuid', id_col.attname, format_type(id_col.atttypid, NULL)));
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i
        WHERE i.indrelid = rel AND i.indisunique AND i.indnkeyatts = 1 AND i.indkey[0] = (
                  SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = id_col.attname)
          AND i.indpred IS NULL AND i.indexprs IS NULL) THEN
        PERFORM pgrag_internal.follow_error(format('id_column %I of %I.%I is not unique: it needs a primary key or a '
                                          'unique index on that column alone', id_col.attname, src_schema, src_table));
    END IF;
    text_col := pgrag_internal.follow_column(rel, 'text_column', text_column);
    IF text_col.atttypid NOT IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype) THEN
        PERFORM pgrag_internal.follow_error(format('text_column %I is %s; it must be text, varchar or char',
                                          text_col.attname, format_type(text_col.atttypid, NULL)));
    END IF;
    watched := ARRAY[id_col.attname, text_col.attname];
    IF title_column IS NOT NULL THEN
        title_col := pgrag_internal.follow_column(rel, 'title_column', title_column);
        IF title_col.atttypid NOT IN ('text'::regtype, 'varchar'::regtype, 'bpchar'::regtype) THEN
            PERFORM pgrag_internal.follow_error(format('title_column %I is %s; it must be text, varchar or char',
                                              title_col.attname, format_type(title_col.atttypid, NULL)));
        END IF;
        watched := watched || title_col.attname;
    END IF;
    FOREACH c IN ARRAY coalesce(metadata_columns, '{}') LOOP
        meta_col := pgrag_internal.follow_column(rel, 'metadata column', c);
        IF meta_col.attname = ANY (meta_names) THEN
            PERFORM pgrag_internal.follow_error(format('metadata column %I is named twice', meta_col.attname));
        END IF;
        meta_names := meta_names || meta_col.attname;
    END LOOP;
    watched := ARRAY(SELECT DISTINCT w FROM unnest(watched || meta_names) AS w ORDER BY w);
    IF triples IS NOT NULL AND triples NOT IN ('spacy', 'llm') THEN
        PERFORM pgrag_internal.follow_error(format('triples must be NULL, ''spacy'' or ''llm'', not %s', quote_literal(triples)));
    END IF;
    IF max_attempts IS NULL OR max_attempts < 1 OR retry_seconds IS NULL OR retry_seconds < 0 THEN
        PERFORM pgrag_internal.follow_error('max_attempts must be at least 1 and retry_seconds at least 0');
    END IF;

    SELECT k.corpus_id INTO cid FROM pgrag.corpus k WHERE k.name = attach.corpus;
    IF cid IS NULL THEN
        INSERT INTO pgrag.corpus (name, embedding_model, embedding_dim)
        VALUES (attach.corpus, attach.embedding_model, attach.embedding_dim)
        RETURNING corpus_id INTO cid;
        INSERT INTO pgrag.graph_version (corpus_id, version) VALUES (cid, 0) ON CONFLICT DO NOTHING;
    ELSIF EXISTS (SELECT 1 FROM pgrag.follow f WHERE f.corpus_id = cid) THEN
        PERFORM pgrag_internal.follow_error(format(
            'corpus %s already follows %s; detach it first',
            quote_literal(attach.corpus),
            (SELECT format('%I.%I', f.source_schema, f.source_table) FROM pgrag.follow f WHERE f.corpus_id = cid)));
    END IF;

    INSERT INTO pgrag.follow (corpus_id, source_schema, source_table, id_column, text_column, title_column,
                              metadata_columns, triples, max_attempts, retry_seconds)
    VALUES (cid, src_schema, src_table, id_col.attname, text_col.attname, title_col.attname,
            meta_names, attach.triples, attach.max_attempts, attach.retry_seconds);

    trigger_base := 'pgrag_follow_' || cid;
    args := format('%L, %L', cid, id_col.attname);
    EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %I.%I FOR EACH ROW EXECUTE FUNCTION pgrag_internal.follow_enqueue(%s)',
                   trigger_base || '_insert', src_schema, src_table, args);
    -- Only an UPDATE that changes an attached column fires (the WHEN clause is
    -- evaluated without calling the function).
    EXECUTE format('CREATE TRIGGER %I AFTER UPDATE OF %s ON %I.%I FOR EACH ROW WHEN (%s) '
                   'EXECUTE FUNCTION pgrag_internal.follow_enqueue(%s)',
                   trigger_base || '_update',
                   (SELECT string_agg(format('%I', w), ', ') FROM unnest(watched) AS w),
                   src_schema, src_table,
                   (SELECT string_agg(format('OLD.%1$I IS DISTINCT FROM NEW.%1$I', w), ' OR ') FROM unnest(watched) AS w),
                   args);
    EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %I.%I FOR EACH ROW EXECUTE FUNCTION pgrag_internal.follow_enqueue(%s)',
                   trigger_base || '_delete', src_schema, src_table, args);
    EXECUTE format('CREATE TRIGGER %I AFTER TRUNCATE ON %I.%I FOR EACH STATEMENT EXECUTE FUNCTION pgrag_internal.follow_enqueue(%s)',
                   trigger_base || '_truncate', src_schema, src_table, args);

    EXECUTE format('INSERT INTO pgrag.follow_queue (corpus_id, source_key, op) '
                   'SELECT $1, s.%1$I::text, ''insert'' FROM %2$I.%3$I s WHERE s.%1$I IS NOT NULL',
                   id_col.attname, src_schema, src_table) USING cid;
    GET DIAGNOSTICS n_source = ROW_COUNT;
    INSERT INTO pgrag.follow_queue (corpus_id, source_key, op)
    SELECT cid, d.external_id, 'delete' FROM pgrag.document d WHERE d.corpus_id = cid;
    GET DIAGNOSTICS n_docs = ROW_COUNT;
    PERFORM pg_notify('pgrag_follow', cid::text);
    RETURN n_source + n_docs;
END
$$;

-- When an attachment goes (pgrag.detach, or its corpus is dropped and the row
-- cascades away): drop its triggers (when the table still exists) and its queue.
CREATE OR REPLACE FUNCTION pgrag_internal.follow_forget() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    t text;
BEGIN
    IF to_regclass(format('%I.%I', OLD.source_schema, OLD.source_table)) IS NOT NULL THEN
        FOREACH t IN ARRAY ARRAY['insert', 'update', 'delete', 'truncate'] LOOP
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %I.%I', 'pgrag_follow_' || OLD.corpus_id || '_' || t,
                           OLD.source_schema, OLD.source_table);
        END LOOP;
    END IF;
    DELETE FROM pgrag.follow_queue q WHERE q.corpus_id = OLD.corpus_id;
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER follow_forget AFTER DELETE ON pgrag.follow
    FOR EACH ROW EXECUTE FUNCTION pgrag_internal.follow_forget();

-- Stop following: drop the triggers and the queue (pgrag_internal.follow_forget); with
-- drop_corpus, also the corpus and everything in it.
CREATE OR REPLACE FUNCTION pgrag.detach(corpus text, drop_corpus boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    cid bigint := pgrag_internal.corpus_id(corpus);
BEGIN
    DELETE FROM pgrag.follow x WHERE x.corpus_id = cid;
    IF NOT FOUND THEN
        PERFORM pgrag_internal.follow_error(format('corpus %s is not attached to a table', quote_literal(corpus)));
    END IF;
    IF drop_corpus THEN
        PERFORM pgrag.drop_corpus(corpus);
    END IF;
END
$$;

-- The current source rows for some keys, as documents: key, title ('' when
-- there is no title column or it is NULL), text (NULL when the row has none:
-- it is not indexed), metadata (the metadata columns as a jsonb object). Keys
-- with no row are absent. Runs as the caller, who needs SELECT on the table.
CREATE OR REPLACE FUNCTION pgrag_internal.follow_source(p_corpus bigint, p_keys text[])
RETURNS TABLE (source_key text, title text, body text, metadata jsonb)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    f pgrag.follow;
    rel regclass;
    id_type text;
BEGIN
    SELECT * INTO f FROM pgrag.follow x WHERE x.corpus_id = p_corpus;
    IF NOT FOUND THEN
        PERFORM pgrag_internal.follow_error(format('corpus %s is not attached to a table', p_corpus));
    END IF;
    rel := to_regclass(format('%I.%I', f.source_schema, f.source_table));
    IF rel IS NULL THEN
        PERFORM pgrag_internal.follow_error(format('the source table %I.%I of corpus %s no longer exists',
                                          f.source_schema, f.source_table, p_corpus));
    END IF;
    SELECT format_type(a.atttypid, NULL) INTO id_type
    FROM pg_attribute a WHERE a.attrelid = rel AND a.attname = f.id_column AND NOT a.attisdropped;
    IF id_type IS NULL THEN
        PERFORM pgrag_internal.follow_error(format('column %I of %s no longer exists', f.id_column, rel));
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT s.%1$I::text, %2$s, s.%3$I::text, %4$s FROM %5$I.%6$I s WHERE s.%1$I = ANY ($1::%7$s[])',
        f.id_column,
        CASE WHEN f.title_column IS NULL THEN '''''::text'
             ELSE format('coalesce(s.%I::text, '''')', f.title_column) END,
        f.text_column,
        CASE WHEN cardinality(f.metadata_columns) = 0 THEN '''{}''::jsonb'
             ELSE 'jsonb_build_object(' || (SELECT string_agg(format('%L, s.%I', m, m), ', ')
                                            FROM unnest(f.metadata_columns) AS m) || ')' END,
        f.source_schema, f.source_table, id_type)
    USING p_keys;
END
$$;

-- Per attached corpus: items waiting (pending, including those waiting out a
-- retry delay), being processed right now (in_progress: held by a worker's open
-- transaction), failed at least once and waiting to retry (retrying), parked
-- after too many failures (parked, with the latest error), when a worker last
-- committed a batch, and the lag (age of the oldest unparked item). Workers
-- mark the items they hold with advisory locks (74142472, item_id mod 2^31-1),
-- which is what in_progress counts. security_invoker: row-level security of the
-- caller applies.
CREATE OR REPLACE VIEW pgrag.sync_status WITH (security_invoker = true) AS
SELECT f.corpus_id,
       c.name AS corpus,
       format('%I.%I', f.source_schema, f.source_table) AS source,
       count(q.item_id) FILTER (WHERE q.parked_at IS NULL AND l.objid IS NULL) AS pending,
       count(q.item_id) FILTER (WHERE l.objid IS NOT NULL) AS in_progress,
       count(q.item_id) FILTER (WHERE q.parked_at IS NULL AND q.attempts > 0) AS retrying,
       count(q.item_id) FILTER (WHERE q.parked_at IS NOT NULL) AS parked,
       (array_agg(q.last_error ORDER BY q.attempts DESC, q.item_id DESC)
            FILTER (WHERE q.last_error IS NOT NULL))[1] AS last_error,
       f.last_processed_at,
       coalesce(now() - min(q.enqueued_at) FILTER (WHERE q.parked_at IS NULL), interval '0') AS lag
FROM pgrag.follow f
JOIN pgrag.corpus c ON c.corpus_id = f.corpus_id
LEFT JOIN pgrag.follow_queue q ON q.corpus_id = f.corpus_id
LEFT JOIN pg_catalog.pg_locks l
       ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = 74142472::oid
      AND l.objid = (q.item_id % 2147483647)::oid
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database())
GROUP BY f.corpus_id, c.name, f.source_schema, f.source_table, f.last_processed_at;
