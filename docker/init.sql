-- Extensions pgrag uses. pgrag's own schema is created by its migrations
-- (`pgrag db upgrade`, or automatically on pgrag.connect()).
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS plpython3u;
