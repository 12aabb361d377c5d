"""Alembic environment for pgrag.

pgrag runs migrations itself (``pgrag.db.Database.upgrade``), handing Alembic an
open connection inside its transaction; the version table lives in schema pgrag.
"""

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run pgrag migrations through `pgrag db upgrade` or pgrag.connect()")

connection.exec_driver_sql("CREATE SCHEMA IF NOT EXISTS pgrag")
context.configure(
    connection=connection,
    version_table_schema="pgrag",
    transactional_ddl=True,
)
with context.begin_transaction():
    context.run_migrations()
