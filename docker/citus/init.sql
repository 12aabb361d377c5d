-- Runs once per node, when its data directory is first initialised (the citus
-- extension is created by the image's own 001 script). pgvector must exist on
-- every node: Citus propagates CREATE EXTENSION but needs the files everywhere.
CREATE EXTENSION IF NOT EXISTS vector;
