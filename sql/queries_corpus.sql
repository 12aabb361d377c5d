-- The server, corpora and documents: facts, locks, the corpus lifecycle and
-- ingest.
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

-- name: server_facts
-- Server version, database encoding, whether pgvector is installed on the server,
-- created in this database, and whether this role may create it (a superuser, or
-- a trusted pgvector and the right to create in this database).
SELECT current_setting('server_version_num')::int,
       pg_encoding_to_char(d.encoding),
       EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector'),
       EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'),
       (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
       OR (has_database_privilege(current_database(), 'CREATE')
           AND EXISTS (SELECT 1 FROM pg_available_extension_versions v
                       WHERE v.name = 'vector' AND v.trusted)),
       current_database(), current_user
FROM pg_database d WHERE d.datname = current_database();

-- name: shared_buffers_mb
-- The server's shared_buffers in MB (the setting counts blocks).
SELECT setting::bigint * current_setting('block_size')::bigint / 1048576
FROM pg_settings WHERE name = 'shared_buffers';

-- name: migration_lock
-- Serialise concurrent migrators (released at commit).
SELECT pg_advisory_xact_lock(%(key)s);

-- name: corpus_by_name
-- A corpus's row.
SELECT corpus_id, name, embedding_model, embedding_dim, chunk_sentences, chunk_overlap, edge_window, families
FROM pgrag.corpus WHERE name = %(name)s;

-- name: corpus_families
-- The method families a corpus maintains at ingest (read under its write lock by writers).
SELECT families FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;

-- name: add_corpus_family
-- Start maintaining a method family (a no-op when it already is).
UPDATE pgrag.corpus
SET families = CASE WHEN %(family)s::text = ANY (families) THEN families ELSE families || %(family)s::text END
WHERE corpus_id = %(corpus_id)s;

-- name: remove_corpus_family
-- Stop maintaining a method family (its rows stay unless dropped as well).
UPDATE pgrag.corpus SET families = array_remove(families, %(family)s::text) WHERE corpus_id = %(corpus_id)s;

-- name: corpus_settings
-- A corpus's free-form settings (what was built, when, how long it took).
SELECT settings FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;

-- name: add_corpus_seconds
-- Add seconds to a build cost kept in a corpus's settings (one atomic update).
UPDATE pgrag.corpus
SET settings = settings || jsonb_build_object(%(key)s::text,
                                              coalesce((settings ->> %(key)s::text)::float8, 0) + %(seconds)s)
WHERE corpus_id = %(corpus_id)s;

-- name: create_corpus
-- Create a corpus and its graph version row (no-op if the corpus exists).
WITH ins AS (
    INSERT INTO pgrag.corpus (name, embedding_model, embedding_dim, chunk_sentences, chunk_overlap, edge_window)
    VALUES (%(name)s, %(model)s, %(dim)s, %(sentences)s, %(overlap)s, %(window)s)
    ON CONFLICT (name) DO NOTHING
    RETURNING corpus_id
)
INSERT INTO pgrag.graph_version (corpus_id, version) SELECT corpus_id, 0 FROM ins
ON CONFLICT DO NOTHING;

-- name: list_corpora
-- Every corpus with its size. Counts grouped by corpus, then joined: on Citus
-- each count is one statement over every shard (administration, not retrieval),
-- where correlated subqueries per corpus are refused.
SELECT c.name, c.embedding_model, c.embedding_dim,
       coalesce(d.n, 0) AS documents, coalesce(k.n, 0) AS chunks, coalesce(t.n, 0) AS tokens,
       coalesce(e.n, 0) AS edges, coalesce(d.pending, 0) AS pending, c.families
FROM pgrag.corpus c
LEFT JOIN (SELECT corpus_id, count(*) AS n,
                  count(*) FILTER (WHERE indexed_hash IS DISTINCT FROM content_hash) AS pending
           FROM pgrag.document GROUP BY corpus_id) d ON d.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.chunk GROUP BY corpus_id) k ON k.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.token GROUP BY corpus_id) t ON t.corpus_id = c.corpus_id
LEFT JOIN (SELECT corpus_id, count(*) AS n FROM pgrag.token_edge GROUP BY corpus_id) e ON e.corpus_id = c.corpus_id
ORDER BY c.name;

-- name: drop_corpus
-- Delete a corpus and everything in it.
SELECT pgrag.drop_corpus(%(name)s);

-- name: corpus_write_lock
-- One writer per corpus at a time (released at commit); readers are never blocked.
SELECT pg_advisory_xact_lock(74142471, %(corpus_id)s::int);

-- name: document_states
-- Current hashes of the given documents.
SELECT external_id, document_id, content_hash, indexed_hash
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s);

-- name: document_states_for_update
-- Same, locking the rows for this transaction.
SELECT external_id, document_id, content_hash, indexed_hash
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s)
FOR UPDATE;

-- name: pending_documents
-- Documents whose derived rows are missing or stale (e.g. inserted through the ORM).
SELECT external_id, title, body, metadata
FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND indexed_hash IS DISTINCT FROM content_hash
ORDER BY document_id;

-- name: insert_documents
-- Insert new documents from parallel arrays; returns their ids.
INSERT INTO pgrag.document (corpus_id, external_id, title, body, metadata)
SELECT %(corpus_id)s, x.external_id, x.title, x.body, x.metadata
FROM unnest(%(ids)s::text[], %(titles)s::text[], %(bodies)s::text[], %(metadata)s::jsonb[])
     AS x(external_id, title, body, metadata)
RETURNING external_id, document_id;

-- name: update_document
-- Replace a document's content (its derived rows are rebuilt by the caller).
UPDATE pgrag.document
SET title = %(title)s, body = %(body)s, metadata = %(metadata)s, updated_at = now()
WHERE corpus_id = %(corpus_id)s AND document_id = %(document_id)s;

-- name: unindex_documents
-- Remove derived rows of documents, keeping or deleting the document rows.
SELECT pgrag_internal.unindex_documents(%(corpus_id)s, %(document_ids)s::bigint[], %(keep)s);

-- name: allocate_chunk_ids
-- Reserve chunk ids so that entities can reference chunks in the same COPY batch.
SELECT nextval(pg_get_serial_sequence('pgrag.chunk', 'chunk_id'))
FROM generate_series(1, %(n)s);

-- name: index_chunks
-- Postings, document frequencies and co-occurrence edges of new chunks.
SELECT pgrag_internal.index_chunks(%(corpus_id)s, %(chunk_ids)s::bigint[]);

-- name: mark_indexed
-- Record that documents' derived rows match their content.
UPDATE pgrag.document SET indexed_hash = content_hash
WHERE corpus_id = %(corpus_id)s AND document_id = ANY (%(document_ids)s::bigint[]);

-- name: ensure_chunk_index
-- Build the corpus's HNSW index if it does not exist yet.
SELECT pgrag_internal.ensure_chunk_index(%(corpus_id)s);

-- name: delete_documents
-- Delete documents by external id with everything derived from them (SQL pgrag.delete_documents).
SELECT pgrag.delete_documents(%(corpus)s, %(ids)s::text[]);

-- name: document_ids
-- Internal ids of documents by external id.
SELECT document_id FROM pgrag.document
WHERE corpus_id = %(corpus_id)s AND external_id = ANY (%(ids)s);

-- name: document_chunk_counts
-- Every document of a corpus with its metadata and its number of chunks
-- (pgrag bench filters labels them and counts the chunks a filter keeps).
SELECT d.document_id, d.external_id, d.title, d.metadata, count(c.chunk_id)
FROM pgrag.document d
LEFT JOIN pgrag.chunk c ON c.corpus_id = d.corpus_id AND c.document_id = d.document_id
WHERE d.corpus_id = %(corpus_id)s
GROUP BY d.corpus_id, d.document_id
ORDER BY d.document_id;

-- name: refresh_statistics
-- ANALYZE the corpus tables when the planner's statistics do not know this corpus yet; whether it did.
SELECT pgrag_internal.refresh_statistics(%(corpus_id)s);
