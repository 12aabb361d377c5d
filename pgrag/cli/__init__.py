"""The ``pgrag`` command: parse, call one library function, render. Nothing more.

The root group is here; each module of this package holds one group of commands
(pgrag.cli.common: what they share)."""

from __future__ import annotations

import click

from . import bench, corpus, db, demo, evaluate, follow, server, ui
from .common import PgragGroup

__all__ = ["main"]


@click.group(cls=PgragGroup)
@click.version_option(package_name="pgrag-multihop")
def main() -> None:
    """pgrag: multi-hop retrieval inside PostgreSQL + pgvector.

    Without --dsn / PGRAG_DSN every command uses the embedded PostgreSQL server
    in PGRAG_DATA_DIR (default ~/.local/share/pgrag/pgdata), starting it if needed.
    """


for _command in (
    server.server, server.models, db.db, db.roles,
    corpus.ingest, corpus.extract, corpus.propositions, corpus.query, corpus.corpora, corpus.delete,
    corpus.threadrag_index, demo.demo, evaluate.eval_command, evaluate.export_trajectories, bench.bench,
    follow.attach, follow.detach, follow.worker, follow.status, follow.requeue,
    ui.mcp_command, ui.serve_command, ui.ui_command, ui.explain_command,
):
    main.add_command(_command)
