"""Test fixtures: a real embedded PostgreSQL (with pgvector) for the session, a
template database migrated once, and a fresh copy of it for every test."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

# Test tiers that must run, not skip, where their data or tools are missing
# (.ci/run sets PGRAG_TEST_REQUIRE=citus,2wiki): read before the settings are cleared.
REQUIRED = frozenset(t.strip() for t in os.environ.get("PGRAG_TEST_REQUIRE", "").split(",") if t.strip())
# The managed tier's server (tests/managed/conftest.py): pgserver's PostgreSQL 16
# unless this names another PostgreSQL's bin folder (with pgvector installed in it).
MANAGED_BIN = os.environ.get("PGRAG_TEST_MANAGED_BIN") or None
# Tests must not pick up a developer's settings.
for _name in [n for n in os.environ if n.startswith("PGRAG_")]:
    del os.environ[_name]
# The shared graph files of this test session (pgrag/index/shared_files.py): a folder of
# its own, which the embedded server's OS user can enter (its backends inherit the
# variable from the server this session starts).
GRAPH_FILES = Path(tempfile.mkdtemp(prefix="pgrag-test-graphs-"))
GRAPH_FILES.chmod(0o755)
os.environ["PGRAG_GRAPH_DIR"] = str(GRAPH_FILES / "graphs")
# Nor a developer's running server: with no PGRAG_DATA_DIR, the default data
# directory (~/.local/share/pgrag/pgdata) is where `make demo` leaves its server
# and model runtime, and a test process would find that runtime's socket and
# embed through it. An empty folder of the session's own holds no server.
# (Backends are unaffected: in the server the socket is relative to its data.)
os.environ["PGRAG_DATA_DIR"] = str(GRAPH_FILES / "no-default-server")

# A test that leaves a thread running fails (tests/leaks.py).
pytest_plugins = ["tests.leaks"]

TEMPLATE = "pgrag_template"
# The shared benchmark data sits beside the checkout (../shared/bench); a fresh
# clone elsewhere has none, and the tests that read it skip.
BENCH_2WIKI = Path(__file__).resolve().parents[2] / "shared" / "bench" / "2wiki"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--dump-corpus", choices=("sample", "2wiki"), default="sample",
                     help="The corpus tests/managed/test_dump_restore.py moves: the bundled sample (the default, "
                          "seconds) or ../shared/bench/2wiki with its 111 questions (a measurement: about half an "
                          "hour on two cores).")


def skip_unless_required(tier: str, reason: str) -> None:
    """Skip with ``reason``; fail instead when ``tier`` is in PGRAG_TEST_REQUIRE
    (CI must not pass by skipping a tier it is meant to run)."""
    if tier in REQUIRED:
        pytest.fail(f"{reason} (and PGRAG_TEST_REQUIRE asks for the {tier} tier)", pytrace=False)
    pytest.skip(reason)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that drive the real local LLM are slow (model start-up, generation):
    they carry the ``llm`` and ``slow`` markers, so `make test-fast` skips them;
    so are the Citus tier's."""
    for item in items:
        if "local_llm_url" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.llm)
            item.add_marker(pytest.mark.slow)
        # The Citus tier starts a coordinator and two workers: `make test` runs it,
        # the development loop (`make test-fast`) does not.
        if "citus_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def bench_2wiki() -> Path:
    """../shared/bench/2wiki, or a skip saying where it was looked for."""
    if not (BENCH_2WIKI / "corpus.json").is_file() or not (BENCH_2WIKI / "questions.jsonl").is_file():
        skip_unless_required("2wiki", f"the 2Wiki benchmark data is absent (looked for {BENCH_2WIKI}/corpus.json "
                             "and questions.jsonl: ../shared/bench/2wiki beside the checkout)")
    return BENCH_2WIKI


def _with_database(uri: str, name: str) -> str:
    base, _, params = uri.partition("?")
    return base.rsplit("/", 1)[0] + "/" + name + ("?" + params if params else "")


@pytest.fixture(scope="session")
def pg_data_dir() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="pgrag-tests-"))
    yield root / "pgdata"
    shutil.rmtree(root, ignore_errors=True)  # after pg_uri has stopped the server
    shutil.rmtree(GRAPH_FILES, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_uri(pg_data_dir: Path) -> Iterator[str]:
    """URI of the session's embedded server (admin database 'postgres'), started
    as users start it: with the model runtime beside it (``shared_models``), so
    that backends embed through it unless a test's session says otherwise."""
    from pgrag import embedded

    uri = embedded.start(pg_data_dir)
    yield uri
    embedded.stop(pg_data_dir)


@pytest.fixture(scope="session")
def template_uri(pg_uri: str) -> str:
    """A database migrated to head, used as the template of every test database."""
    from pgrag.database import open_database

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(TEMPLATE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    uri = _with_database(pg_uri, TEMPLATE)
    open_database(uri).close()  # migrate, then close every connection to it
    return uri


@contextlib.contextmanager
def scratch_database(pg_uri: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """A uniquely named database (optionally cloned from ``template``), dropped on exit."""
    name = prefix + uuid.uuid4().hex[:12]
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        create = sql.SQL("{} TEMPLATE {}").format(create, sql.Identifier(template))
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(create)
    try:
        yield _with_database(pg_uri, name)
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def database_uri(pg_uri: str, template_uri: str) -> Iterator[str]:
    """URI of a fresh database cloned from the migrated template."""
    with scratch_database(pg_uri, "pgrag_test_", TEMPLATE) as uri:
        yield uri


@pytest.fixture(scope="session")
def shared_models(pg_uri: str, pg_data_dir: Path) -> str:
    """The model runtime the session's server started beside it (at its data
    directory's socket, as ``pgrag.connect()`` starts one), as a
    ``pgrag.model_runtime`` value: for a client that should embed through it too,
    or a database that names it (``use_shared_models``). Every new backend then
    skips loading torch and MiniLM (seconds each)."""
    from pgrag import model_service

    return f"unix:{model_service.files(pg_data_dir)[0]}"


def use_shared_models(uri: str, setting: str) -> None:
    """Every later connection to ``uri``'s database uses the model runtime ``setting``."""
    name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} SET pgrag.model_runtime = {}").format(
            sql.Identifier(name), sql.Literal(setting)))


@pytest.fixture(scope="session")
def seeded_templates(pg_uri: str, template_uri: str) -> Iterator[dict[tuple, str]]:
    """Template databases that already hold a corpus (see ``seeded_database``), by recipe."""
    built: dict[tuple, str] = {}
    yield built
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for name in built.values():
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def seeded_database(corpus: str, *, docs: list[dict] | None = None, methods: tuple[str, ...] = (),
                    triples: bool = False):
    """A ``database_uri`` fixture for a module whose tests start from one corpus.
    The corpus is ingested once a session (per xdist worker) into a template
    database; every test gets a fresh clone of that template, a file copy with
    no model work, and is otherwise what ``database_uri`` gives. Assign it in
    the module: ``database_uri = seeded_database("thread", methods=("threadrag",))``."""
    recipe = (corpus, repr(docs), methods, triples)

    @pytest.fixture
    def database_uri(pg_uri: str, seeded_templates: dict[tuple, str]) -> Iterator[str]:
        import pgrag

        if recipe not in seeded_templates:
            name = "pgrag_seed_" + uuid.uuid4().hex[:12]
            with psycopg.connect(pg_uri, autocommit=True) as conn:
                conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name),
                                                                              sql.Identifier(TEMPLATE)))
            database = pgrag.connect(_with_database(pg_uri, name))
            try:
                database.corpus(corpus, methods=list(methods)).ingest(
                    WIKI if docs is None else docs, progress=False, extract_triples="spacy" if triples else False)
            except BaseException:   # no half-built template for the next test to clone
                database.close()
                with psycopg.connect(pg_uri, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
                raise
            database.close()
            seeded_templates[recipe] = name
        with scratch_database(pg_uri, "pgrag_test_", seeded_templates[recipe]) as uri:
            yield uri

    return database_uri


@pytest.fixture
def db(database_uri: str) -> Iterator["pgrag.Database"]:  # noqa: F821
    import pgrag

    database = pgrag.connect(database_uri)
    yield database
    database.close()


@pytest.fixture
def empty_uri(pg_uri: str) -> Iterator[str]:
    """A database with no pgrag schema at all."""
    with scratch_database(pg_uri, "pgrag_empty_") as uri:
        yield uri


WIKI = [
    {"id": "lothair", "title": "Lothair II",
     "text": "Lothair II was the king of Lotharingia from 855 until his death. He was the second son of "
             "Emperor Lothair I and Ermengarde of Tours. He was married to Teutberga, daughter of Boso the Elder."},
    {"id": "ermengarde", "title": "Ermengarde of Tours",
     "text": "Ermengarde of Tours was the daughter of Hugh of Tours, a member of the Etichonen family. "
             "In October 821 in Thionville, she married the Carolingian emperor Lothair I. She died on 20 March 851."},
    {"id": "minaj", "title": "Nicki Minaj",
     "text": "Onika Tanya Maraj, known professionally as Nicki Minaj, is a rapper and singer. "
             "She was born in Port of Spain, Trinidad and Tobago, and moved to Queens at age five."},
    {"id": "changed", "title": "Changed It",
     "text": "\"Changed It\" is a song by rapper Nicki Minaj and American rapper Lil Wayne. "
             "It was released in 2017 together with two other singles."},
    {"id": "long", "title": "A long document",
     "text": " ".join(f"Sentence number {i} talks about topic{i % 7} and river{i % 3} in the valley."
                      for i in range(15))
             + "\n\nA second paragraph mentions Lotharingia once more. It ends here."},
]


@pytest.fixture
def wiki_docs() -> list[dict]:
    return [dict(d) for d in WIKI]


@pytest.fixture(scope="session")
def local_llm_url() -> Iterator[str]:
    """Base URL of a real llama.cpp server running SmolLM2-135M (see pgrag/local_llm.py)."""
    from pgrag import local_llm

    with local_llm.running() as url:
        yield url
