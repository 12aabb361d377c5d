"""Each semantic node's terms (pgrag.tokenize of its text), stored when the node is written, so ThreadRAG reads them instead of tokenizing at query time

Revision ID: 0011
Revises: 0010
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0011_node_terms.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
