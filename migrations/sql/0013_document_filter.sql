-- Metadata filters (pgrag.filters, docs/filters.md).
--
-- A filter compiles to one SQL/JSON path predicate over a document's metadata
-- with its external id beside it: pgrag_internal.filterable(metadata,
-- external_id). The GIN index covers that very expression (jsonb_path_ops: the
-- @@ operator), so that a selective equality filter reads its documents from
-- the index instead of every document's metadata. Ranges and $exists fall back
-- to a scan of the corpus's documents, once per filtered retrieval.

-- IMMUTABLE so that an index may use it: jsonb_build_object is only STABLE in
-- general (any argument type's output function), but of a text argument it
-- depends on nothing but its inputs.
CREATE FUNCTION pgrag_internal.filterable(metadata jsonb, external_id text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT metadata || jsonb_build_object('$external_id', external_id) $$;

CREATE INDEX document_filter_idx ON pgrag.document
    USING gin (pgrag_internal.filterable(metadata, external_id) jsonb_path_ops);
