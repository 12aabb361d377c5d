"""ThreadRAG name vectors stored per document (the threadrag family), so a query looks names up instead of encoding them

Revision ID: 0010
Revises: 0009
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0010_entity_vectors.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
