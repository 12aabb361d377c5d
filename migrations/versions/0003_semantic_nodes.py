"""Semantic nodes and edges (ThreadRAG)

Revision ID: 0003
Revises: 0002
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it, and it distributes
# new tables on a distributed database) and without bind parameters so that %
# and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0003_semantic_nodes.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
