-- Corpora that follow an application's own table (README "Following an
-- application table"). pgrag.attach() records the source table and columns in
-- pgrag.follow and puts row triggers on the table; the triggers append the
-- changed row's key to pgrag.follow_queue in the application's transaction, and
-- a worker (pgrag worker, or pgrag.index() in the server) brings the corpus up
-- to date from the source table's current rows, deleting the items it handled
-- in the same transaction.
--
-- Every statement stands alone (no session state, no DO blocks), so the file can
-- also be run one statement at a time (e.g. by a Citus-aware migrator).

-- One attachment per corpus. The source is kept by name (schema, table), not by
-- oid, so that a dump and restore keeps it; pgrag.attach() checks it against the
-- catalog, and every statement that uses it quotes it with format('%I').
CREATE TABLE pgrag.follow (
    corpus_id          bigint PRIMARY KEY REFERENCES pgrag.corpus (corpus_id) ON DELETE CASCADE,
    source_schema      text NOT NULL,
    source_table       text NOT NULL,
    id_column          text NOT NULL,
    text_column        text NOT NULL,
    title_column       text,
    metadata_columns   text[] NOT NULL DEFAULT '{}',
    triples            text CHECK (triples IN ('spacy', 'llm')),
    max_attempts       integer NOT NULL DEFAULT 5 CHECK (max_attempts >= 1),
    retry_seconds      float8 NOT NULL DEFAULT 10 CHECK (retry_seconds >= 0),
    attached_at        timestamptz NOT NULL DEFAULT now(),
    last_processed_at  timestamptz
);

-- Queue item ids come from a plain sequence (not an identity column), which a
-- distributed (Citus) table can also use.
CREATE SEQUENCE pgrag.follow_queue_item_id_seq AS bigint;

-- Append-only from the triggers' side (no upsert, so an application write never
-- waits on a row a worker holds). An item only names a key: the worker reads the
-- source row as it is when processing, so several items for one key collapse
-- into one update. attempts/run_after/last_error/parked_at are the retry state.
-- No foreign key to pgrag.corpus, on purpose: its check would run a query and
-- take a KEY SHARE lock on the corpus row for every application row written
-- (and make application writes wait behind a corpus being dropped). Items go
-- away with their attachment instead (pgrag.follow_forget, sql/follow.sql).
CREATE TABLE pgrag.follow_queue (
    corpus_id    bigint NOT NULL,
    item_id      bigint NOT NULL DEFAULT nextval('pgrag.follow_queue_item_id_seq'),
    source_key   text NOT NULL,
    op           text NOT NULL CHECK (op IN ('insert', 'update', 'delete')),
    enqueued_at  timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0,
    run_after    timestamptz,
    last_error   text,
    parked_at    timestamptz,
    PRIMARY KEY (corpus_id, item_id)
);
ALTER SEQUENCE pgrag.follow_queue_item_id_seq OWNED BY pgrag.follow_queue.item_id;
CREATE INDEX follow_queue_key_idx ON pgrag.follow_queue (corpus_id, source_key);
CREATE INDEX follow_queue_parked_idx ON pgrag.follow_queue (corpus_id) WHERE parked_at IS NOT NULL;
