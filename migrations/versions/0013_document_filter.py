"""A GIN index for metadata filters (pgrag.filters): the expression their path predicates run over

Revision ID: 0013
Revises: 0012
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0013_document_filter.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
