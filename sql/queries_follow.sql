-- Following an application table (pgrag.follow; sql/70_follow.sql).
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

-- name: follow_attach
-- Attach a corpus to an application table; returns the number of items enqueued.
SELECT pgrag.attach(%(corpus)s, %(source)s, id_column => %(id_column)s, text_column => %(text_column)s,
                    title_column => %(title_column)s, metadata_columns => %(metadata_columns)s::text[],
                    triples => %(triples)s, embedding_model => %(embedding_model)s,
                    embedding_dim => %(embedding_dim)s, max_attempts => %(max_attempts)s,
                    retry_seconds => %(retry_seconds)s);

-- name: follow_detach
-- Remove a corpus's triggers and queue (and, optionally, the corpus).
SELECT pgrag.detach(%(corpus)s, %(drop_corpus)s);

-- name: follow_list
-- Every attachment (or the named corpus's), with its corpus row.
SELECT f.corpus_id, c.name, f.source_schema, f.source_table, f.id_column, f.text_column, f.title_column,
       f.metadata_columns, f.triples, f.max_attempts, f.retry_seconds, f.attached_at, f.last_processed_at
FROM pgrag.follow f JOIN pgrag.corpus c ON c.corpus_id = f.corpus_id
WHERE %(corpus)s::text IS NULL OR c.name = %(corpus)s::text
ORDER BY c.name;

-- name: follow_take
-- Lock a batch of due queue items (FOR UPDATE SKIP LOCKED: other workers take
-- others), plus every other unlocked item of the same keys, parked ones
-- included: one write of a key's current row settles them all.
WITH picked AS (
    SELECT q.source_key FROM pgrag.follow_queue q
    WHERE q.corpus_id = %(corpus_id)s AND q.parked_at IS NULL
      AND (q.run_after IS NULL OR q.run_after <= clock_timestamp())
      AND (%(keys)s::text[] IS NULL OR q.source_key = ANY (%(keys)s::text[]))
    ORDER BY q.item_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
SELECT q.item_id, q.source_key, q.attempts
FROM pgrag.follow_queue q
WHERE q.corpus_id = %(corpus_id)s AND q.source_key IN (SELECT p.source_key FROM picked p)
ORDER BY q.item_id
FOR UPDATE SKIP LOCKED;

-- name: follow_hold
-- Mark held items in progress for pgrag.sync_status (advisory locks, released at commit).
SELECT count(*) FILTER (WHERE pg_try_advisory_xact_lock(74142472, (x.item_id %% 2147483647)::int))
FROM unnest(%(item_ids)s::bigint[]) AS x(item_id);

-- name: follow_source
-- The source table's current rows for some keys (absent keys have no row).
SELECT source_key, title, body, metadata FROM pgrag_internal.follow_source(%(corpus_id)s, %(keys)s::text[]);

-- name: follow_done
-- Delete processed queue items.
DELETE FROM pgrag.follow_queue
WHERE corpus_id = %(corpus_id)s AND item_id = ANY (%(item_ids)s::bigint[]);

-- name: follow_failed
-- Record failures: per key, older items are dropped and the newest gets one more
-- attempt, an error and a retry time (retry_seconds * 2^(attempts-1)), or is
-- parked once attempts reach the corpus's max_attempts.
WITH gone AS (
    DELETE FROM pgrag.follow_queue
    WHERE corpus_id = %(corpus_id)s AND item_id = ANY (%(drop_ids)s::bigint[])
)
UPDATE pgrag.follow_queue q
SET attempts = x.attempts,
    last_error = x.error,
    run_after = clock_timestamp() + make_interval(secs => f.retry_seconds * power(2, x.attempts - 1)),
    parked_at = CASE WHEN x.attempts >= f.max_attempts THEN clock_timestamp() END
FROM unnest(%(item_ids)s::bigint[], %(attempts)s::integer[], %(errors)s::text[]) AS x(item_id, attempts, error),
     pgrag.follow f
WHERE q.corpus_id = %(corpus_id)s AND q.item_id = x.item_id AND f.corpus_id = q.corpus_id
RETURNING q.source_key, q.parked_at IS NOT NULL;

-- name: follow_processed
-- When a worker last committed a batch of a corpus.
UPDATE pgrag.follow SET last_processed_at = now() WHERE corpus_id = %(corpus_id)s;

-- name: follow_requeue
-- Put parked items (all, or some keys') back in the queue with a fresh retry count.
WITH back AS (
    UPDATE pgrag.follow_queue q
    SET parked_at = NULL, attempts = 0, run_after = NULL
    WHERE q.corpus_id = %(corpus_id)s AND q.parked_at IS NOT NULL
      AND (%(keys)s::text[] IS NULL OR q.source_key = ANY (%(keys)s::text[]))
    RETURNING q.item_id
)
SELECT count(*), pg_notify('pgrag_follow', %(corpus_id)s::text) FROM back;

-- name: follow_parked
-- Parked items of a corpus with their errors.
SELECT item_id, source_key, op, attempts, last_error, enqueued_at, parked_at
FROM pgrag.follow_queue
WHERE corpus_id = %(corpus_id)s AND parked_at IS NOT NULL
ORDER BY item_id;

-- name: follow_next_due
-- Seconds until the earliest item waiting out a retry delay becomes due (NULL if none).
SELECT extract(epoch FROM min(run_after) - clock_timestamp())::float8
FROM pgrag.follow_queue
WHERE corpus_id = ANY (%(corpus_ids)s::bigint[]) AND parked_at IS NULL AND run_after > clock_timestamp();

-- name: follow_wake
-- Wake every listening worker.
SELECT pg_notify('pgrag_follow', 'wake');

-- name: sync_status
-- The pgrag.sync_status view (every attached corpus, or one).
SELECT corpus, source, pending, in_progress, retrying, parked, last_error, last_processed_at,
       extract(epoch FROM lag)::float8
FROM pgrag.sync_status
WHERE %(corpus)s::text IS NULL OR corpus = %(corpus)s::text
ORDER BY corpus;
