"""Bad options and filters (issue 71 item 6): from SQL, each is a pgrag error
with a PR SQLSTATE and a short message that names the option, never a Python
exception's name, a traceback or PostgreSQL running out of stack; from Python,
``kb.retrieve`` raises the same pgrag exception."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgrag
from pgrag.filters import MAX_CONDITIONS, FilterError
from tests.conftest import seeded_database

database_uri = seeded_database("wiki", methods=("threadrag",))

BIG_KEY = "k" * 10_000_000


def nested(levels: int, operator: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "film"}
    for _ in range(levels):
        spec = {operator: [spec]} if operator in ("$and", "$or") else {operator: spec}
    return spec


def nested_json(levels: int, operator: str) -> str:
    """``{"filter": nested(levels, operator)}`` as JSON text (Python's own writer,
    like its reader, recurses once a level and gives up near 1,000)."""
    opening, closing = ('{"%s": [' % operator, "]}") if operator in ("$and", "$or") else ('{"%s": ' % operator, "}")
    return '{"filter": ' + opening * levels + '{"type": "film"}' + closing * levels + "}"


def exists_all(n: int, operator: str = "$and") -> dict[str, Any]:
    return {operator: [{f"k{i}": {"$exists": True}} for i in range(n)]}


# (method, options, what the message names, the pgrag exception from Python)
CASES = [
    ("tigrag", {"hops": 1.5}, "'hops' takes an integer", pgrag.OptionError),
    ("tigrag", {"damping": 2}, "'damping' takes a number in (0, 1)", pgrag.OptionError),
    ("tigrag", {"damping": "x"}, "'damping' takes a number", pgrag.OptionError),
    ("tigrag", {"max_pool": []}, "'max_pool' takes an integer", pgrag.OptionError),
    ("threadrag", {"depth": "x"}, "'depth' takes an integer", pgrag.OptionError),
    ("tigrag", {"hops": True}, "'hops' takes an integer", pgrag.OptionError),
    ("tigrag", {"rerank": "no"}, "'rerank' takes true or false", pgrag.OptionError),
    ("tigrag", {BIG_KEY: 1}, "does not take option(s) 'kkkk", pgrag.OptionError),
    ("tigrag", {"filter": nested(1_000, "$and")}, "a filter nests at most 16 levels", FilterError),
    ("bm25", {"filter": nested(1_000, "$not")}, "a filter nests at most 16 levels", FilterError),
    ("bm25", {"filter": nested(10_000, "$not")}, "a filter nests at most 16 levels", FilterError),
    ("bm25", {"filter": exists_all(20_000)}, f"a filter has at most {MAX_CONDITIONS:,} conditions", FilterError),
    ("dense", {"filter": {BIG_KEY: 1}}, "a filter key is a metadata key of 1 to 200 characters", FilterError),
    ("dense", {"filter": {"type": {BIG_KEY: 1}}}, "unknown filter operator 'kkkk", FilterError),
]
IDS = ["hops-1.5", "damping-2", "damping-x", "max_pool-list", "threadrag-depth-x", "hops-true", "rerank-no",
       "10MB-option", "filter-1000-and", "filter-1000-not", "filter-10000-not", "filter-20000-exists",
       "filter-10MB-key", "filter-10MB-operator"]
PYTHON_ERROR = re.compile(r"\b[A-Z]\w*(Error|Exception):")


@pytest.fixture
def conn(database_uri: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_uri, autocommit=True) as c:
        yield c


@pytest.fixture
def kb(database_uri: str) -> Iterator[pgrag.Corpus]:
    db = pgrag.connect(database_uri)
    yield db.corpus("wiki", create=False)
    db.close()


# The SQL texts of the nested filters, by case id (Python's JSON writer cannot write them).
TEXTS = {"filter-1000-and": nested_json(1_000, "$and"), "filter-1000-not": nested_json(1_000, "$not"),
         "filter-10000-not": nested_json(10_000, "$not")}


def sql_error(conn: psycopg.Connection, method: str, options: dict[str, Any] | str) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("SELECT * FROM pgrag.retrieve('wiki', 'Who is the mother of Lothair II?', %s, 5, %s::jsonb)",
                     (method, options if isinstance(options, str) else json.dumps(options))).fetchall()
    assert conn.execute("SELECT 1").fetchone() == (1,)   # the session goes on
    return caught.value


def assert_pgrag_message(error: psycopg.Error, names: str) -> None:
    message = error.diag.message_primary or ""
    everything = "\n".join(filter(None, (str(error), error.diag.message_detail, error.diag.context)))
    assert error.sqlstate is not None and error.sqlstate.startswith("PR"), (error.sqlstate, message[:300])
    assert message.startswith("pgrag: ") and len(message) < 300, message[:400]
    assert "Traceback" not in everything and "PL/Python" not in everything, everything[:400]
    assert not PYTHON_ERROR.search(everything), everything[:400]
    assert names in message, message


@pytest.mark.parametrize(("method", "options", "names", "exception"), CASES, ids=IDS)
def test_from_sql_each_bad_option_is_a_pgrag_error(conn, request, method, options, names, exception):
    error = sql_error(conn, method, TEXTS.get(request.node.callspec.id, options))
    assert_pgrag_message(error, names)
    assert error.sqlstate == exception.sqlstate


@pytest.mark.parametrize(("method", "options", "names", "exception"), CASES, ids=IDS)
def test_from_python_each_bad_option_raises_the_pgrag_exception(kb, method, options, names, exception):
    with pytest.raises(exception) as caught:
        kb.retrieve("Who is the mother of Lothair II?", method=method, k=5, **options)
    assert names in str(caught.value) and len(str(caught.value)) < 300


def test_the_most_conditions_a_filter_takes_run_in_the_server(conn):
    """MAX_CONDITIONS of $exists under one $and and one $or: PostgreSQL's jsonpath
    evaluates them without running out of stack (a chain of them did past ~10,060)."""
    question = "Who is the mother of Lothair II?"
    every = conn.execute("SELECT count(*) FROM pgrag.retrieve('wiki', %s, 'bm25', 5)", (question,)).fetchone()
    for operator, expected in (("$and", 0), ("$or", 0)):
        options = {"filter": exists_all(MAX_CONDITIONS, operator)}
        rows = conn.execute("SELECT count(*) FROM pgrag.retrieve('wiki', %s, 'bm25', 5, %s::jsonb)",
                            (question, json.dumps(options))).fetchone()
        assert rows == (expected,), operator   # no document has k0 ... k9999
    kept = {"$or": [*exists_all(MAX_CONDITIONS - 1, "$or")["$or"], {"$external_id": {"$exists": True}}]}
    rows = conn.execute("SELECT count(*) FROM pgrag.retrieve('wiki', %s, 'bm25', 5, %s::jsonb)",
                        (question, json.dumps({"filter": kept}))).fetchone()
    assert rows == every


@pytest.mark.parametrize(("call", "argument", "names"), [
    ("SELECT * FROM pgrag.retrieve(%s, 'Lothair')", BIG_KEY, "corpus 'kkkk"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', %s)", BIG_KEY, "unknown method 'kkkk"),
    ("SELECT * FROM pgrag.retrieve('wiki', 'Lothair', 'tigrag', 5, %s::jsonb)", '{"hops": 1' + "0" * 5_000 + "}",
     "integer of more than 100 digits"),
    ("SELECT * FROM pgrag.answer('wiki', 'Lothair', 'threadrag', %s::jsonb)", '{"strict": "yes"}',
     "'strict' takes true or false"),
    ("SELECT * FROM pgrag.answer('wiki', 'Lothair', 'threadrag', %s::jsonb)", '{"k": 1' + "0" * 30 + "}",
     "k must be an integer of at least 1"),
], ids=["10MB-corpus", "10MB-method", "5000-digits", "strict-yes", "answer-k-1e30"])
def test_long_names_huge_numbers_and_answer_options_are_pgrag_errors(conn, call, argument, names):
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(call, (argument,)).fetchall()
    assert_pgrag_message(caught.value, names)


def test_good_options_still_retrieve(conn, kb):
    question = "When did Lothair II's mother die?"
    options = {"hops": 2.0, "damping": 0.85, "entity_labels": ["PERSON", "GPE"], "rerank": False}
    rows = conn.execute("SELECT external_id FROM pgrag.retrieve('wiki', %s, 'tigrag', 3, %s::jsonb)",
                        (question, json.dumps(options))).fetchall()
    assert [r[0] for r in rows] == [h.provenance.external_id for h in kb.retrieve(question, method="tigrag", k=3,
                                                                                    **options)]
    assert rows


def test_the_python_client_maps_pr008_back_to_option_error(database_uri):
    db = pgrag.connect(database_uri)
    try:
        with pytest.raises(pgrag.OptionError, match="'hops' takes an integer of at least 1, not 1.5"):
            db.fetchall("retrieve_sql", {"corpus": "wiki", "question": "x", "method": "tigrag", "k": 5,
                                         "options": '{"hops": 1.5}'})
    finally:
        db.close()
