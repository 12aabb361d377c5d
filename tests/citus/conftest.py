"""The Citus tier: a real coordinator and 2 workers (tests/citus/cluster.py),
started once per session from embedded data directories and stopped at
teardown, even when tests fail. Skips, with the reason, where Citus's source is
not beside the checkout (../shared/vendor) or `make citus` has not built it; fails
instead under PGRAG_TEST_REQUIRE=citus, as CI runs it (.ci/run)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import WIKI, scratch_database, skip_unless_required

from .cluster import LocalCitusCluster, citus_installed

VENDOR = Path(__file__).resolve().parents[2].parent / "shared" / "vendor"
SHARDS = 8          # per distributed table; Citus's default is 32 (fewer: quicker DDL in tests)
DATABASE = "pgrag_citus"

# Six small corpora spread over the workers by the hash of their id.
CORPORA = {f"tenant{i}": [
    {"id": f"t{i}-a", "title": f"Tenant {i} river", "text": f"The river Arden{i} flows through the town of Bel{i}. "
                                                          f"It was named after a king of Bel{i}."},
    {"id": f"t{i}-b", "title": f"Tenant {i} king", "text": f"King Osric{i} ruled Bel{i} for forty years. "
                                                         f"His daughter married the duke of Arden{i}."},
] for i in range(1, 7)}


def _skip_reason() -> str | None:
    if not any(VENDOR.glob("citus-*.tar.gz")):
        return (f"Citus tier skipped: no Citus source in {VENDOR} (../shared/vendor beside the checkout); "
                "see docs/SCALING.md for running pgrag on a real Citus cluster")
    if not citus_installed():
        return "Citus tier skipped: Citus is not built into the embedded PostgreSQL yet; run `make citus`"
    return None


@pytest.fixture(scope="session")
def citus_cluster() -> Iterator[LocalCitusCluster]:
    reason = _skip_reason()
    if reason:
        skip_unless_required("citus", reason)
    root = Path(tempfile.mkdtemp(prefix="pgrag-citus-"))
    cluster = LocalCitusCluster(root, workers=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def citus_uri(citus_cluster: LocalCitusCluster) -> str:
    """Coordinator DSN of a database migrated and distributed by pgrag."""
    import pgrag
    from pgrag import distribute

    uri = citus_cluster.form(DATABASE)
    db = pgrag.connect(uri)
    try:
        distribute.distribute(db, shard_count=SHARDS)
    finally:
        db.close()
    return uri


def _load(db: "pgrag.Database") -> None:  # noqa: F821
    kb = db.corpus("wiki", methods=["threadrag"])
    kb.ingest([dict(d) for d in WIKI], progress=False)
    kb.extract_triples("spacy", progress=False)
    for name, docs in CORPORA.items():
        db.corpus(name).ingest([dict(d) for d in docs], progress=False)


@pytest.fixture(scope="session")
def citus_db(citus_uri: str) -> Iterator["pgrag.Database"]:  # noqa: F821
    """The distributed database through the coordinator, with the wiki corpus
    (and its spaCy triples) and six tenant corpora."""
    import pgrag

    db = pgrag.connect(citus_uri)
    _load(db)
    yield db
    db.close()


@pytest.fixture(scope="session")
def single_db(pg_uri: str, template_uri: str) -> Iterator["pgrag.Database"]:  # noqa: F821
    """The same data on a single PostgreSQL (the reference for every result)."""
    import pgrag

    with scratch_database(pg_uri, "pgrag_single_", "pgrag_template") as uri:
        db = pgrag.connect(uri)
        _load(db)
        yield db
        db.close()


def strict(uri: str) -> str:
    """The DSN with Citus set to refuse any statement that runs on more than one
    shard (citus.multi_task_query_log_level = error)."""
    sep = "&" if "?" in uri else "?"
    return uri + sep + "options=-c%20citus.multi_task_query_log_level%3Derror"


def workers_touched(uri: str, statement: str, params: dict | None = None) -> tuple[list[tuple], set[int]]:
    """Run one statement on the coordinator with citus.log_remote_commands on;
    return its rows and the ports of the nodes that Citus sent commands to."""
    seen: set[int] = set()
    with psycopg.connect(uri, autocommit=True) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)

        def notice(diag: psycopg.errors.Diagnostic) -> None:
            detail = diag.message_detail or ""
            if detail.startswith("on server"):
                seen.add(int(detail.split(":")[1].split()[0]))

        conn.add_notice_handler(notice)
        conn.execute("SET citus.log_remote_commands = on")
        conn.execute("SET client_min_messages = notice")
        rows = conn.execute(statement, params).fetchall()
    return rows, seen
