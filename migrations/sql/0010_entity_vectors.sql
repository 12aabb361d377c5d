-- ThreadRAG's name vectors (part of the threadrag family, README "Method families").
--
-- ThreadRAG retrieves documents for names: the question's entities and, without
-- an LLM, the bridge entities of its top document, which are stored names of the
-- corpus. Encoding them at query time was a second model call per question; the
-- vector of each name a document mentions is therefore computed once, at ingest
-- (or by `pgrag threadrag-index`), and looked up by its key.
--
-- The key is the name lower-cased with single spaces (pgrag.nlp.name_key): the
-- default model is uncased, so the key's vector is the name's own. Queries use
-- the table only with such a model (pgrag.embed's Embedder.uncased); any name
-- not found is encoded as before.
--
-- Rows are per document (a name two documents mention is stored twice) so that
-- they are a function of one document, equal to a rebuild after any sequence of
-- changes: they cascade with the sentence of the name's first mention, which
-- replacing or deleting the document removes, as semantic nodes do.
--
-- Every statement stands alone (no session state, no DO blocks), so the file can
-- also be run one statement at a time (e.g. by a Citus-aware migrator).

CREATE TABLE pgrag.entity_vector (
    corpus_id    bigint NOT NULL,
    document_id  bigint NOT NULL,
    key          text NOT NULL,          -- pgrag.nlp.name_key of the name
    sentence     integer NOT NULL,       -- the sentence of its first mention
    embedding    vector NOT NULL,
    PRIMARY KEY (corpus_id, document_id, key),
    FOREIGN KEY (corpus_id, document_id, sentence)
        REFERENCES pgrag.sentence (corpus_id, document_id, ordinal) ON DELETE CASCADE,
    CHECK (key <> '')
);

-- The lookup: a corpus's names by key, the first document's copy of each.
CREATE INDEX entity_vector_key_idx ON pgrag.entity_vector (corpus_id, key, document_id);
