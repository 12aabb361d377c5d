-- The catalogue's own documentation: a description of every function, table and
-- view of schema pgrag (the API), and of the columns whose meaning their name
-- does not say, so that `\df+ pgrag.retrieve` or `\d+ pgrag.chunk` in psql, or
-- any tool reading obj_description / col_description, explains them.
--
-- Applied by `pgrag db upgrade` after every migration, in the order of the file
-- names (pgrag.schema.upgrade_files): last, when every object below exists, on a
-- fresh database and on one upgraded from any older revision alike. COMMENT ON
-- replaces the previous text, so re-applying is harmless.
--
-- The one source: a function's first line is its summary, the very text of its
-- row in docs/sql.md's SQL reference; tests/migration/test_migrations.py fails
-- when an object of schema pgrag has no description here or the two disagree.
-- Then "Arguments:" and "Errors:" (pgrag's SQLSTATEs: PR000 any other pgrag
-- error, PR001 unknown corpus, PR002 a vector of the wrong dimension, PR003 no
-- PL/Python in this server, PR004 unknown method, PR005 bad input, PR006 a table
-- that cannot be followed, PR007 a method whose data the corpus does not
-- maintain, PR008 an option the method does not take or a value it cannot take,
-- PR010 the LLM failed under "strict", PR011 the model runtime is
-- unreachable).
--
-- Implementation: shared (no function here).

-- ---------------------------------------------------------------------------
-- Functions: ask
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION pgrag.retrieve(text, text, text, integer, jsonb) IS
'ranked chunks with provenance from any registered method (multi-hop in the server)
Runs the same method code as kb.retrieve, inside the server (PL/Python). One row a hit, best first; details holds the method''s per-hit figures.
Arguments: corpus (name); question (text, not empty); method (default ''tigrag''; any registered method or preset: dense, bm25, hybrid, tigrag and its presets, t2rag / threadrag / cirag retrieval without an LLM); k (hits, default 5, >= 1); options (the method''s settings as a JSON object, e.g. ''{"hops": 3}''; "filter": a metadata filter, docs/filters.md, taken by every method).
Errors: PR001 unknown corpus; PR003 no PL/Python; PR004 unknown method; PR005 bad input (NULL or empty question, options not an object, k < 1, a bad filter); PR007 the corpus does not maintain the method''s data (threadrag before pgrag.threadrag_index); PR008 an option the method does not take, or a value of the wrong type or out of range (docs/settings.md); PR011 model runtime unreachable; PR000 any other.';

COMMENT ON FUNCTION pgrag.retrieve_trace(text, text, text, integer, jsonb) IS
'pgrag.retrieve''s hits as one JSON document, with the method''s trace
{"hits": [...], "trace": {...}}: the hits of pgrag.retrieve and what the method did, step by step, with timings.
Arguments: as pgrag.retrieve (corpus, question, method default ''tigrag'', k default 5, options).
Errors: as pgrag.retrieve (PR001, PR003, PR004, PR005, PR007, PR008, PR011, PR000).';

COMMENT ON FUNCTION pgrag.answer(text, text, text, jsonb) IS
'an answering method''s answer, evidence, trace and token counts, with the server''s LLM
The LLM is set with pgrag.llm_base_url, pgrag.llm_model, pgrag.llm_api_key, pgrag.llm_timeout (SET, ALTER ROLE / DATABASE, postgresql.conf), else PGRAG_LLM_* in the server''s environment (see pgrag.llm_settings()). An LLM that fails gives finish = ''llm_error'' with the retrieval-only hits.
Arguments: corpus; question; method (default ''t2rag''; threadrag, cirag or any answering method); options (the method''s settings, plus "k" (default 5) and "strict": raise PR010 instead of finish = ''llm_error'').
Errors: PR001 unknown corpus; PR003 no PL/Python; PR004 unknown method; PR005 bad input or a retrieval-only method; PR007 data not maintained; PR008 a bad option (or "strict" not true or false); PR010 the LLM failed (strict only); PR000 any other.';

COMMENT ON FUNCTION pgrag.embed(text, text) IS
'a text''s vector from the corpus''s own model
For the functions that take a vector (pgrag.dense, pgrag.hybrid, pgrag.tigrag, pgrag.propositions, pgrag.cirag_candidates).
Arguments: corpus; input (the text).
Errors: PR001 unknown corpus; PR003 no PL/Python; PR011 model runtime unreachable.';

COMMENT ON FUNCTION pgrag.llm_settings() IS
'the LLM settings this session would use, and where each came from
One row a setting (pgrag.llm_base_url, llm_model, llm_api_key, llm_timeout): its value and where it comes from (a setting of PostgreSQL''s, or PGRAG_LLM_* in the server''s environment). The key is only said to be set, never shown.
Arguments: none.
Errors: PR003 no PL/Python.';

COMMENT ON FUNCTION pgrag.runtime() IS
'the in-server runtime''s language (plpython3u), or NULL
NULL on a server without PL/Python, where pgrag.retrieve and the other in-server functions raise PR003.
Arguments: none.
Errors: none.';

COMMENT ON FUNCTION pgrag.model_runtime() IS
'where this backend''s models run (`pgrag.model_runtime`: shared, inprocess, a socket or a URL) and the shared runtime''s health
A JSON object: the setting in force and, for the shared runtime, its model, batches and queue.
Arguments: none.
Errors: PR003 no PL/Python.';

-- ---------------------------------------------------------------------------
-- Functions: single methods
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION pgrag.dense(text, vector, integer) IS
'cosine top-k by HNSW
Score = 1 - cosine distance, through the corpus''s HNSW index. Works without PL/Python.
Arguments: corpus; query_embedding (a vector of the corpus''s model and dimension, e.g. pgrag.embed(corpus, text)); k (default 10).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.bm25(text, text, integer, double precision, double precision) IS
'Okapi BM25 over the posting lists
IDF is ln(1 + (N - df + 0.5) / (df + 0.5)); the query goes through pgrag.tokenize, each term counting once. Works without PL/Python.
Arguments: corpus; query (text); k (default 10); k1 (default 1.2); b (default 0.75).
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.hybrid(text, text, vector, integer, integer, integer) IS
'BM25 and dense fused by RRF
score = sum over the two lists of 1 / (rrf_k + rank), each list contributing its top `depth` chunks. Works without PL/Python.
Arguments: corpus; query (text, for BM25); query_embedding (its vector, for dense); k (default 10); depth (default 100); rrf_k (default 60).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.tigrag(text, text, vector, integer, integer, double precision, double precision, double precision, integer, double precision) IS
'single-hop TIGRAG in pure SQL
Seeds = the question''s tokens in the vocabulary; PPR over the token graph; the top-gamma tokens weight BM25 (graph-weighted pooling); the cumulative-mass pool is reranked by cosine to query_embedding. SQL-only: multi-hop TIGRAG is pgrag.retrieve(corpus, question, ''tigrag'').
Arguments: corpus; question; query_embedding (the question''s vector); k (default 5); gamma (expanded tokens, default 20); damping (PPR, default 0.5); threshold (pool''s share of the mass, default 0.8); graph_weight (share of rho / max rho in the rerank, default 0.2; 0 is the paper''s pure cosine); max_pool (default 300); tolerance (PPR, default 1e-4).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.ppr(text, text[], double precision, integer, double precision, integer) IS
'Personalized PageRank over the token graph (scipy in the server, SQL without it)
Restart uniform over the seeds that are in the vocabulary; the same results from scipy (PL/Python, graph cached per backend) and the pure-SQL power iteration (pgrag_internal.ppr_sql).
Arguments: corpus; seeds (terms, as pgrag.tokenize gives them); damping (default 0.5); top (rows, default 100); tolerance (L1 change to stop at, default 1e-6); max_iterations (default 100).
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.propositions(text, vector, integer) IS
'propositions nearest one or several query vectors (T2RAG''s retrieval)
Propositions (the triples of pgrag.extract) by descending cosine to the query, taken until they cover unique_chunks distinct source chunks. Works without PL/Python.
Arguments: corpus; query_embedding (one vector); unique_chunks (default 5).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.propositions(text, vector[], integer) IS
'propositions nearest one or several query vectors (T2RAG''s retrieval)
One global pool: a proposition''s score is its best cosine over the query vectors (query says which, 1-based); taken until they cover unique_chunks distinct source chunks. Works without PL/Python.
Arguments: corpus; query_embeddings (vectors); unique_chunks (default 5).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.cirag_candidates(text, vector, integer, integer, text) IS
'CIRAG''s construction step: top documents, then their top triples
The triples of the top documents (each scored by its best chunk''s cosine) ranked by cosine to the query, with provenance down to the sentence. Ranks only the triples already stored (pgrag.extract). Works without PL/Python.
Arguments: corpus; query_embedding; documents (K, default 10); candidates (N, default 30); extractor (''spacy'' or ''llm''; NULL, the default, takes every extractor''s).
Errors: PR001 unknown corpus; PR002 a vector of the wrong dimension.';

COMMENT ON FUNCTION pgrag.chunk_sentences(text, bigint) IS
'sentence-level provenance of a chunk
The chunk''s sentences, in order, with their offsets into the document''s body (code points, end exclusive). No rows for an unknown chunk.
Arguments: corpus; p_chunk (a chunk_id, as a hit gives it).
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.tokenize(text) IS
'the token pipeline (the one definition)
NFC-normalise, lowercase, split on anything not a letter or digit (Unicode''s rules, through the pg_c_utf8 collation, or C.UTF-8 on PostgreSQL 16: docs/sql.md, Supported servers), drop stopwords and tokens shorter than 3 or longer than 64 characters. Ingest and queries, from Python or SQL, all go through it.
Arguments: input (text; NULL gives NULL).
Errors: none.';

-- ---------------------------------------------------------------------------
-- Functions: keep a corpus current
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION pgrag.index(text) IS
'index pending documents and an attached table''s queue (and its triples)
As kb.index(): the documents inserted or changed directly in pgrag.document, then the queue of an attached table. Runs in the caller''s transaction: a failure leaves everything as it was. Returns the ingest report (documents, chunks, seconds...).
Arguments: corpus.
Errors: PR001 unknown corpus; PR003 no PL/Python; PR011 model runtime unreachable; PR000 any other.';

COMMENT ON FUNCTION pgrag.extract(text, text) IS
'triples and propositions for chunks not yet extracted (resumable)
As kb.extract_triples(): prepares a corpus for T2RAG and CIRAG. A second call does only what is left. Returns the extraction report.
Arguments: corpus; triples (the extractor: ''spacy'', the default, or ''llm'' with the LLM settings of pgrag.answer).
Errors: PR001 unknown corpus; PR003 no PL/Python; PR005 unknown extractor; PR000 any other.';

COMMENT ON FUNCTION pgrag.threadrag_index(text) IS
'enable ThreadRAG and build its semantic nodes (resumable)
Every later ingest, pgrag.index() included, maintains the nodes; builds those of the documents that have none, in one statement. Returns the report (documents, nodes, seconds...).
Arguments: corpus.
Errors: PR001 unknown corpus; PR003 no PL/Python; PR011 model runtime unreachable; PR000 any other.';

COMMENT ON FUNCTION pgrag.threadrag_disable(text, boolean) IS
'stop maintaining ThreadRAG''s nodes (drop => true deletes them)
Later ingests skip the nodes and ThreadRAG raises PR007 until pgrag.threadrag_index is called again. Returns {"dropped": rows deleted, "families": what the corpus still maintains}.
Arguments: corpus; drop (default false: keep the nodes and their edges).
Errors: PR001 unknown corpus; PR003 no PL/Python.';

COMMENT ON FUNCTION pgrag.delete_documents(text, text[]) IS
'delete documents with everything derived
By external id, with every derived row; document frequencies and edge weights become what a rebuild without them gives. Takes the corpus write lock (waits for a concurrent ingest). Returns how many existed. Works without PL/Python.
Arguments: corpus; ids (external ids; unknown ones are skipped).
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.drop_corpus(text) IS
'delete a corpus
The corpus, everything in it and its HNSW indexes (needs the owner of the tables for DROP INDEX).
Arguments: corpus.
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.attach(text, text, text, text, text, text[], text, text, integer, integer, double precision) IS
'follow an application table (docs/follow.md)
Row triggers enqueue every change of the table; a worker (pgrag worker, or pgrag.index()) brings the corpus up to date from the current rows. Creates the corpus if needed and enqueues every existing row. Returns the number of queue items added.
Arguments: corpus; source (''schema.table'', or ''table'' in public); id_column (unique, of a key type); text_column; title_column (optional); metadata_columns (optional); triples (an extractor to run on ingest, optional); embedding_model and embedding_dim (for a new corpus); max_attempts (before an item is parked, default 5); retry_seconds (first retry delay, default 10).
Errors: PR006 the table or a column cannot be followed (nothing is changed).';

COMMENT ON FUNCTION pgrag.detach(text, boolean) IS
'stop following an application table
Drops the triggers and the queue; the corpus stays unless drop_corpus.
Arguments: corpus; drop_corpus (default false).
Errors: PR001 unknown corpus; PR006 the corpus is not attached to a table.';

-- ---------------------------------------------------------------------------
-- Functions: roles and tenant isolation
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION pgrag.grant_reader(name) IS
'let a role read and retrieve
USAGE on schemas pgrag, pgrag_internal and pgvector''s; SELECT on every table, now and (default privileges) those later migrations add; temporary tables. Run as the schema owner.
Arguments: role_name (an existing role).
Errors: PostgreSQL''s (42704 no such role; 42501 not the owner).';

COMMENT ON FUNCTION pgrag.grant_writer(name) IS
'let a role read, retrieve and ingest
On top of grant_reader: rows of every table but the access list, the identity sequences and the HNSW index helper. Dropping a corpus stays with the owner. Run as the schema owner.
Arguments: role_name (an existing role).
Errors: PostgreSQL''s (42704 no such role; 42501 not the owner).';

COMMENT ON FUNCTION pgrag.grant_corpus(name, text) IS
'under tenant isolation, let a role see a corpus
The role and every role that is a member of it; stored by name in pgrag.corpus_acl.
Arguments: role_name (an existing role); corpus.
Errors: 42704 no such role; PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.revoke_role(name) IS
'take back what the grants gave a role
Undoes grant_reader, grant_writer and grant_corpus (e.g. before DROP ROLE).
Arguments: role_name.
Errors: PostgreSQL''s (42704 no such role; 42501 not the owner).';

COMMENT ON FUNCTION pgrag.revoke_corpus(name, text) IS
'take back one corpus from a role
Removes the role''s row of the corpus''s access list.
Arguments: role_name; corpus.
Errors: PR001 unknown corpus.';

COMMENT ON FUNCTION pgrag.enable_tenant_isolation() IS
'row-level security by corpus on every table
A corpus is visible to the roles of its access list (pgrag.grant_corpus) and their members; every other row when its corpus is. The schema owner, superusers and BYPASSRLS roles are not restricted. Tables added by later migrations get their policy on upgrade. Returns the number of tables under a policy.
Arguments: none.
Errors: PostgreSQL''s (42501 not the owner).';

COMMENT ON FUNCTION pgrag.disable_tenant_isolation() IS
'turn tenant isolation off
Drops the tenant policies and disables row-level security. Returns how many tables had a policy.
Arguments: none.
Errors: PostgreSQL''s (42501 not the owner).';

-- ---------------------------------------------------------------------------
-- Tables, the view, the type
-- ---------------------------------------------------------------------------

COMMENT ON TABLE pgrag.alembic_version IS
'The migration (Alembic revision) this schema is at; `pgrag db upgrade` moves it to head.';

COMMENT ON TABLE pgrag.corpus IS
'A corpus: a named collection of documents with its embedding model and chunking settings. Every other table carries its corpus_id (the tenant key).';
COMMENT ON COLUMN pgrag.corpus.embedding_dim IS 'Dimension of embedding_model''s vectors; each corpus has its own HNSW index on embedding::vector(embedding_dim).';
COMMENT ON COLUMN pgrag.corpus.chunk_sentences IS 'Sentences a chunk holds.';
COMMENT ON COLUMN pgrag.corpus.chunk_overlap IS 'Sentences consecutive chunks share (less than chunk_sentences).';
COMMENT ON COLUMN pgrag.corpus.edge_window IS 'Size, in tokens, of the sliding window that counts co-occurrences (pgrag.token_edge).';
COMMENT ON COLUMN pgrag.corpus.settings IS 'Free-form facts about the corpus: what was built, when, how long it took.';
COMMENT ON COLUMN pgrag.corpus.families IS 'The method families maintained at ingest beyond the core (''threadrag''); pgrag.threadrag_index adds, pgrag.threadrag_disable removes.';

COMMENT ON TABLE pgrag.document IS
'A document of a corpus, as given (external id, title, body, metadata). Insert or update rows here, then call pgrag.index(corpus).';
COMMENT ON COLUMN pgrag.document.external_id IS 'The caller''s id of the document, unique in its corpus.';
COMMENT ON COLUMN pgrag.document.content_hash IS 'Derived by the database from title and body, so that rows written by any client are seen as pending.';
COMMENT ON COLUMN pgrag.document.indexed_hash IS 'content_hash when the derived rows were last built; a document whose indexed_hash differs is pending (pgrag.index).';

COMMENT ON TABLE pgrag.sentence IS
'The sentences of each document, with offsets into document.body (code points, end exclusive).';
COMMENT ON COLUMN pgrag.sentence.ordinal IS 'Position of the sentence in its document (chunks name their sentences by it).';

COMMENT ON TABLE pgrag.chunk IS
'The retrieval unit: a window of consecutive sentences of one document, with its text and embedding.';
COMMENT ON COLUMN pgrag.chunk.first_sentence IS 'The ordinal of the chunk''s first sentence (pgrag.sentence).';
COMMENT ON COLUMN pgrag.chunk.last_sentence IS 'The ordinal of the chunk''s last sentence, inclusive.';
COMMENT ON COLUMN pgrag.chunk.char_start IS 'Offset of the chunk in document.body (code points).';
COMMENT ON COLUMN pgrag.chunk.char_end IS 'End offset in document.body, exclusive.';
COMMENT ON COLUMN pgrag.chunk.n_tokens IS 'Length of the chunk''s token stream (title and text through pgrag.tokenize), for BM25.';
COMMENT ON COLUMN pgrag.chunk.embedding IS 'Vector of the document title and the chunk''s text by the corpus''s model; no fixed dimension, as corpora differ.';

COMMENT ON TABLE pgrag.token IS
'The vocabulary of a corpus: the nodes of its token graph.';
COMMENT ON COLUMN pgrag.token.df IS 'Document frequency: the number of chunks holding the term.';

COMMENT ON TABLE pgrag.chunk_token IS
'The postings: which chunks hold which token, how often and where (BM25, and the provenance of graph edges).';
COMMENT ON COLUMN pgrag.chunk_token.tf IS 'Term frequency in the chunk.';
COMMENT ON COLUMN pgrag.chunk_token.positions IS 'The token''s positions (from 1) in the chunk''s token stream, so that edge weights are subtracted exactly when the chunk goes away.';

COMMENT ON TABLE pgrag.token_edge IS
'The token graph: undirected co-occurrence edges, stored once with token_a < token_b.';
COMMENT ON COLUMN pgrag.token_edge.weight IS 'The number of sliding windows (corpus.edge_window tokens) holding both tokens.';

COMMENT ON TABLE pgrag.chunk_entity IS
'Named entities found in chunks at ingest, with offsets into document.body.';
COMMENT ON COLUMN pgrag.chunk_entity.label IS 'The entity''s kind (spaCy''s label: PERSON, GPE, DATE...).';

COMMENT ON TABLE pgrag.graph_version IS
'A counter per corpus, bumped with every change to its token graph: the key of graph caches in processes and backends.';
COMMENT ON COLUMN pgrag.graph_version.logged_from IS 'The oldest version pgrag.chunk_removal holds every removal since: a cache older than it reads the corpus whole.';

COMMENT ON TABLE pgrag.chunk_removal IS
'A log of removed chunks with what they held, from which a cached ranking index applies a change as a small overlay instead of reading the corpus again.';
COMMENT ON COLUMN pgrag.chunk_removal.version IS 'The graph version the removal made.';
COMMENT ON COLUMN pgrag.chunk_removal.tokens IS 'The chunk''s distinct token ids.';
COMMENT ON COLUMN pgrag.chunk_removal.edge_a IS 'With edge_b and edge_w: what the chunk added to each co-occurrence edge (token_a, token_b, weight).';

COMMENT ON TABLE pgrag.llm_cache IS
'Every LLM request and its reply, per corpus, so that a re-run costs nothing and one tenant''s cache never answers another''s. The API key is never stored.';
COMMENT ON COLUMN pgrag.llm_cache.key IS 'sha256 of the model, the messages and the parameters.';

COMMENT ON TABLE pgrag.triple IS
'(subject, predicate, object) triples extracted from chunks, each also a proposition with an embedding (T2RAG, CIRAG).';
COMMENT ON COLUMN pgrag.triple.extractor IS 'What extracted it: ''spacy'' or ''llm''.';
COMMENT ON COLUMN pgrag.triple.proposition IS 'The triple as one sentence, "subject predicate object"; the embedding is its vector.';
COMMENT ON COLUMN pgrag.triple.char_start IS 'The source sentence''s offsets into document.body (with char_end).';

COMMENT ON TABLE pgrag.chunk_extraction IS
'Which chunks an extractor has processed, even when it found nothing, so that an interrupted extraction resumes where it stopped.';
COMMENT ON COLUMN pgrag.chunk_extraction.failed IS 'The extractor''s reply was unusable.';

COMMENT ON TABLE pgrag.semantic_node IS
'ThreadRAG''s semantic nodes: runs of consecutive sentences of one document, with exact offsets into document.body and an embedding.';
COMMENT ON COLUMN pgrag.semantic_node.terms IS 'pgrag.tokenize(text), stored with the node; NULL for nodes written before migration 0011 until `pgrag threadrag-index` fills them.';

COMMENT ON TABLE pgrag.semantic_edge IS
'ThreadRAG''s stored edges between semantic nodes of one document (narrative), stored once with node_a < node_b. Edges across documents are built at query time.';
COMMENT ON COLUMN pgrag.semantic_edge.kind IS 'The edge''s kind (''narrative'').';
COMMENT ON COLUMN pgrag.semantic_edge.weight IS 'The edge''s own strength (1 for narrative edges); per-kind weights are query settings.';

COMMENT ON TABLE pgrag.entity_vector IS
'ThreadRAG''s name vectors: the vector of each name a document mentions, computed once at ingest and looked up by key.';
COMMENT ON COLUMN pgrag.entity_vector.key IS 'The name lower-cased with single spaces (pgrag.nlp.name_key).';
COMMENT ON COLUMN pgrag.entity_vector.sentence IS 'The ordinal of the sentence the name was first seen in.';

COMMENT ON TABLE pgrag.corpus_acl IS
'The access list of tenant isolation: the roles (by name) that may see each corpus (pgrag.grant_corpus, pgrag.revoke_corpus).';

COMMENT ON TABLE pgrag.follow IS
'One row per corpus that follows an application table (pgrag.attach): the source table and columns, by name, and the retry settings.';
COMMENT ON COLUMN pgrag.follow.triples IS 'The extractor run on what the worker ingests, or NULL for none.';
COMMENT ON COLUMN pgrag.follow.max_attempts IS 'Attempts before a queue item is parked.';
COMMENT ON COLUMN pgrag.follow.retry_seconds IS 'The first retry''s delay; later ones grow.';

COMMENT ON TABLE pgrag.follow_queue IS
'The keys of changed rows of followed tables, appended by their triggers in the application''s transaction and deleted by the worker that processes them.';
COMMENT ON COLUMN pgrag.follow_queue.source_key IS 'The changed row''s id column, as text; the worker reads the row as it is when it processes the item.';
COMMENT ON COLUMN pgrag.follow_queue.op IS 'What the trigger saw: insert, update or delete.';
COMMENT ON COLUMN pgrag.follow_queue.run_after IS 'Not processed before this time (a retry''s delay).';
COMMENT ON COLUMN pgrag.follow_queue.parked_at IS 'Set when the item failed max_attempts times; parked items wait for `pgrag requeue`.';

COMMENT ON VIEW pgrag.sync_status IS
'Each attached table''s queue: pending, in progress, retrying and parked items, the last error, and how far the corpus lags behind the table.';
COMMENT ON COLUMN pgrag.sync_status.lag IS 'Age of the oldest item not parked (0 when there is none).';

COMMENT ON TYPE pgrag.hit IS
'One ranked retrieval result with its provenance, as pgrag.bm25, pgrag.dense, pgrag.hybrid and pgrag.tigrag return it; offsets are into document.body.';
