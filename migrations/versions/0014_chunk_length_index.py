"""BM25 in SQL reads chunk lengths from an index (pgrag.bm25, pgrag.hybrid)

Revision ID: 0014
Revises: 0013
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0014_chunk_length_index.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
