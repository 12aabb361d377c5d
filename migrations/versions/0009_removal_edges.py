"""Each removed chunk's own edge counts in the removal log, so a delta after a delete subtracts them instead of probing the edges again

Revision ID: 0009
Revises: 0008
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0009_removal_edges.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
