"""Corpora that follow an application table: attachments and the sync queue

Revision ID: 0006
Revises: 0005
"""

from pathlib import Path

from alembic import op

from pgrag import distribute

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# Each revision runs exactly one plain-SQL file of the same name, statement by
# statement (pgrag.distribute.run_migration: Citus needs it) and without bind
# parameters so that % and : in function bodies stay as written.
SQL_FILE = Path(__file__).resolve().parent.parent / "sql" / "0006_follow.sql"


def upgrade() -> None:
    distribute.run_migration(op.get_bind().connection.driver_connection, SQL_FILE.read_text(encoding="utf-8"))


def downgrade() -> None:
    raise NotImplementedError("pgrag migrations are forward-only")
