-- TIGRAG's cached postings matrix and graph (pgrag/index/postings.py,
-- pgrag/index/shared_files.py): full reads and the deltas since a cached version.
--
-- Named statements: a `-- name: x` line, `--` description lines, then the
-- statement. pgrag/queries.py parses every sql/queries_*.sql into one mapping (a
-- name defined twice, in one file or two, is an error); the Python layer runs them
-- by name over psycopg, and pgrag/spi.py over SPI inside the server. Parameters
-- are %(name)s and are always bound by the driver; Python never formats values
-- into SQL. Never applied to the database as a script.

-- name: token_df
-- Every token's document frequency, by id (the graph's nodes, in its order).
SELECT token_id, df FROM pgrag.token WHERE corpus_id = %(corpus_id)s ORDER BY token_id;

-- name: chunk_lengths
-- Every chunk's length in tokens and its document, by id.
SELECT chunk_id, n_tokens, document_id FROM pgrag.chunk WHERE corpus_id = %(corpus_id)s ORDER BY chunk_id;

-- name: postings_copy
-- Every posting (chunk, token, term frequency), as a binary COPY of three bigints.
COPY (SELECT chunk_id, token_id, tf::bigint FROM pgrag.chunk_token WHERE corpus_id = %(corpus_id)s)
TO STDOUT (FORMAT binary);

-- name: postings_arrays
-- Every posting as three arrays (inside the server, where there is no COPY).
SELECT coalesce(array_agg(chunk_id), ARRAY[]::bigint[]) AS chunk, coalesce(array_agg(token_id), ARRAY[]::bigint[]) AS token,
       coalesce(array_agg(tf::bigint), ARRAY[]::bigint[]) AS tf
FROM pgrag.chunk_token WHERE corpus_id = %(corpus_id)s;

-- name: graph_file_key
-- What names a corpus's shared graph files (pgrag/index/shared_files.py): the database
-- (name, oid, port) and the corpus (creation time, microseconds).
SELECT current_database(), (SELECT oid FROM pg_database WHERE datname = current_database()),
       current_setting('port'), (extract(epoch FROM c.created_at) * 1000000)::bigint
FROM pgrag.corpus c WHERE c.corpus_id = %(corpus_id)s;

-- name: delta_start
-- The graph version and the oldest version a delta can start from: the removal
-- log (pgrag.chunk_removal) holds every removal made after logged_from.
SELECT version, logged_from FROM pgrag.graph_version WHERE corpus_id = %(corpus_id)s;

-- name: chunks_after
-- Chunks added since a cached index (ids above its largest: ids only grow), with
-- their lengths in tokens and their documents.
SELECT chunk_id, n_tokens, document_id FROM pgrag.chunk
WHERE corpus_id = %(corpus_id)s AND chunk_id > %(after)s ORDER BY chunk_id;

-- name: removals_since
-- Chunks removed after a graph version, with the tokens they held and what each
-- added to each edge (token_a < token_b, weight), as pgrag_internal.unindex_documents logged them.
SELECT chunk_id, tokens, edge_a, edge_b, edge_w FROM pgrag.chunk_removal
WHERE corpus_id = %(corpus_id)s AND version > %(since)s ORDER BY chunk_id;

-- name: token_df_of
-- The document frequencies of some tokens (those gone from the vocabulary have no row).
SELECT token_id, df FROM pgrag.token
WHERE corpus_id = %(corpus_id)s AND token_id = ANY (%(token_ids)s::bigint[]) ORDER BY token_id;

-- name: tokens_after
-- Tokens added since a cached graph (ids above its largest), with their terms.
SELECT token_id, term FROM pgrag.token
WHERE corpus_id = %(corpus_id)s AND token_id > %(after)s ORDER BY token_id;

-- name: postings_of_chunks
-- The postings (chunk, token, term frequency) of some chunks.
SELECT chunk_id, token_id, tf FROM pgrag.chunk_token
WHERE corpus_id = %(corpus_id)s AND chunk_id = ANY (%(chunk_ids)s::bigint[]);

-- name: edges_of_chunks
-- What some chunks add to the co-occurrence edges (as pgrag_internal.index_chunks adds it).
SELECT token_a, token_b, weight FROM pgrag_internal.chunk_edge_counts(%(corpus_id)s, %(chunk_ids)s::bigint[]);

-- name: chunk_vectors
-- results: binary
-- The embeddings of some chunks (all of them for NULL), by id: TIGRAG's cached
-- rerank vectors.
SELECT chunk_id, embedding FROM pgrag.chunk
WHERE corpus_id = %(corpus_id)s AND (%(chunk_ids)s::bigint[] IS NULL OR chunk_id = ANY (%(chunk_ids)s::bigint[]))
ORDER BY chunk_id;

-- name: corpus_dim
-- A corpus's embedding dimension.
SELECT embedding_dim FROM pgrag.corpus WHERE corpus_id = %(corpus_id)s;
