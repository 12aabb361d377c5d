-- ThreadRAG's node terms (part of the threadrag family, README "Method families").
--
-- ThreadRAG links two nodes that share a rare term. Its query (threadrag_nodes)
-- used to run pgrag.tokenize on every node it read: about 60 µs a node, 1 ms of
-- a 2Wiki question (docs/BENCHMARKS.md). The writers of semantic nodes now store the
-- terms with the node, pgrag.tokenize(text): the INSERT inside the server applies
-- it, and a client asks the server for them before its COPY (pgrag/bulk.py).
--
-- Nodes written before this revision have NULL terms; the query falls back to
-- pgrag.tokenize for them, and `pgrag threadrag-index` fills them in. The column
-- is not filled here because pgrag.tokenize (sql/functions.sql) is defined after
-- the migrations run.

ALTER TABLE pgrag.semantic_node ADD COLUMN terms text[];
