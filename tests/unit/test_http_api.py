"""`pgrag serve`'s HTTP layer without a database (pgrag/http_api.py): each error
becomes its JSON body and status, requests are checked before anything runs,
bodies are bounded, the API key is asked, calls run concurrently, and the OpenAPI
document is valid and names every route. A stand-in Database raises the error a
test chooses; tests/integration/test_http_api.py runs the real methods."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import pytest
from starlette.testclient import TestClient

from pgrag import methods
from pgrag.exceptions import (
    AnswerFailed,
    ConnectionFailed,
    CorpusNotFound,
    InputError,
    MethodNotBuilt,
    ModelRuntimeUnavailable,
    PgragError,
)
from pgrag.http_api import MAX_BODY_BYTES, Service, create_app, openapi
from pgrag.llm import LLMError, LLMSettings

BASE = "http://127.0.0.1:8765"
ASK = {"question": "When did Lothair II's mother die?", "method": "bm25", "k": 3}


class StandIn:
    """What the service calls of a Database, each call raising ``error`` if set."""

    def __init__(self, error: BaseException | None = None, wait: threading.Barrier | None = None) -> None:
        self.error = error
        self.wait = wait
        self.opened: list[str] = []

    def _call(self) -> None:
        if self.wait is not None:
            self.wait.wait(timeout=10)
        if self.error is not None:
            raise self.error

    def corpus(self, name: str, *, create: bool = True) -> Any:
        self.opened.append(name)
        self._call()
        raise AssertionError("a test's stand-in always raises")

    def corpora(self) -> list[dict[str, Any]]:
        self._call()
        return [{"name": "wiki", "documents": 5, "families": []}]

    def fetch_row(self, name: str, params: Any = None) -> tuple:
        self._call()
        return (180000, "UTF8", True)


def client(database: Any = None, **kwargs: Any) -> TestClient:
    return TestClient(create_app(database or StandIn(), **kwargs), base_url=BASE, raise_server_exceptions=False)


def post(c: TestClient, body: Any = ASK, corpus: str = "wiki", kind: str = "retrieve", **kwargs: Any) -> httpx.Response:
    return c.post(f"/v1/corpora/{corpus}/{kind}", json=body, **kwargs)


@pytest.mark.parametrize(("error", "status", "sqlstate"), [
    (CorpusNotFound("corpus 'wiki' does not exist"), 404, "PR001"),
    (MethodNotBuilt("run pgrag threadrag-index"), 409, "PR007"),
    (InputError("bad"), 400, "PR005"),
    (AnswerFailed("no answer"), 502, "PR010"),
    (LLMError("the LLM endpoint refused the API key"), 502, "PR000"),
    (ModelRuntimeUnavailable("down"), 503, "PR011"),
    (ConnectionFailed("no server"), 503, "PR000"),
    (PgragError("permission denied for table corpus"), 500, "PR000"),
])
def test_a_pgrag_error_is_its_json_body_with_a_fitting_status(error, status, sqlstate):
    response = post(client(StandIn(error)))
    assert response.status_code == status
    assert response.json() == {"error": {"message": str(error), "sqlstate": sqlstate, "type": type(error).__name__}}


def test_a_bug_is_500_with_no_traceback_and_no_message(caplog):
    response = post(client(StandIn(RuntimeError("internal detail /srv/secret.py line 3"))))
    assert response.status_code == 500
    assert response.json() == {"error": {"message": "internal error (see the service's log)", "sqlstate": None,
                                         "type": "InternalError"}}
    assert "secret.py" not in response.text and "Traceback" not in response.text
    assert "internal detail" in caplog.text   # the service's log has it


@pytest.mark.parametrize(("body", "message"), [
    ({"method": "bm25"}, "question must be a string"),
    ({**ASK, "k": 0}, "k must be an integer from 1 to 100"),
    ({**ASK, "k": True}, "k must be an integer"),
    ({**ASK, "k": 101}, "k must be an integer"),
    ({**ASK, "method": 3}, "method must be a string"),
    ({**ASK, "options": []}, "options must be a JSON object"),
    ({**ASK, "filter": "kind"}, "filter must be a JSON object"),
    ({**ASK, "filter": {"a": 1}, "options": {"filter": {"b": 2}}}, "give the filter once"),
    ({**ASK, "options": {"llm": "http://elsewhere"}}, "option 'llm' is the service's"),
    ({**ASK, "top": 3}, "unknown field(s) top"),
    ({**ASK, "method": "tigrag", "options": {"gama": 5}}, "does not take option(s) 'gama'"),
    ([ASK], "the body must be a JSON object"),
])
def test_a_bad_request_is_400_inputerror_before_the_database_is_asked(body, message):
    database = StandIn()
    response = post(client(database), body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    # a method's own option is checked by its settings: OptionError, PR008 (an InputError too)
    assert message in error["message"] and error["sqlstate"] == ("PR008" if "option(s)" in message else "PR005")
    assert database.opened == []


def test_an_unknown_method_is_400_with_pr004():
    response = post(client(), {**ASK, "method": "nope"})
    assert response.status_code == 400
    assert response.json()["error"]["sqlstate"] == "PR004" and response.json()["error"]["type"] == "UnknownMethod"


def test_answer_refuses_a_method_that_does_not_answer():
    response = post(client(), {**ASK, "method": "bm25"}, kind="answer")
    assert response.status_code == 400
    assert "retrieves but does not answer" in response.json()["error"]["message"]


def test_a_body_that_is_not_json_is_400():
    response = client().post("/v1/corpora/wiki/retrieve", content=b"{question: ", headers={
        "Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["sqlstate"] == "PR005" and "not JSON" in response.json()["error"]["message"]


def test_a_body_not_sent_as_json_is_415():
    """A web page may post a form or text/plain to 127.0.0.1 without asking first; not JSON."""
    response = client().post("/v1/corpora/wiki/retrieve", content=b'{"question": "q"}',
                             headers={"Content-Type": "text/plain"})
    assert response.status_code == 415


def test_a_body_over_the_limit_is_413_declared_or_streamed():
    assert MAX_BODY_BYTES == 1_000_000
    big = b'{"question": "' + b"x" * 1_000_000 + b'"}'
    c = client()
    under = c.post("/v1/corpora/wiki/retrieve", content=big[:900_000] + b'", "k": 0}',
                   headers={"Content-Type": "application/json"})   # read, then checked
    assert under.status_code == 400 and "k must be" in under.json()["error"]["message"]
    response = c.post("/v1/corpora/wiki/retrieve", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["error"]["sqlstate"] == "PR005"

    def chunks():   # no Content-Length: counted as it comes
        for start in range(0, len(big), 65536):
            yield big[start:start + 65536]

    response = c.post("/v1/corpora/wiki/retrieve", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413


def test_the_api_key_is_asked_of_every_endpoint_but_health():
    database = StandIn()
    c = client(database, api_key="s3cret")
    for path in ("/v1/corpora", "/v1/methods", "/openapi.json"):
        assert c.get(path).status_code == 401
        assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    response = post(c)
    assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["type"] == "Unauthorized"
    assert database.opened == []
    assert c.get("/health").status_code == 200
    assert c.get("/v1/corpora", headers={"Authorization": "Bearer s3cret"}).json()["corpora"][0]["name"] == "wiki"


def test_health_is_503_when_the_database_does_not_answer():
    assert client().get("/health").json()["status"] == "ok"
    response = client(StandIn(ConnectionFailed("could not connect"))).get("/health")
    assert response.status_code == 503 and "could not connect" in response.json()["error"]["message"]


def test_an_unknown_route_or_verb_is_a_json_error():
    c = client()
    assert c.get("/v2/anything").status_code == 404
    assert c.get("/v2/anything").json()["error"]["type"] == "NotFound"
    response = c.get("/v1/corpora/wiki/retrieve")
    assert response.status_code == 405 and response.json()["error"]["type"] == "MethodNotAllowed"


def test_another_host_name_is_refused_unless_listening_everywhere():
    """DNS rebinding: a page whose name resolves to 127.0.0.1 must not read the corpora."""
    assert client().get("/v1/corpora", headers={"Host": "evil.example"}).status_code == 400
    assert client(host="0.0.0.0").get("/v1/corpora", headers={"Host": "evil.example"}).status_code == 200


def test_the_llm_key_never_shows_in_a_response():
    llm = LLMSettings(base_url="http://127.0.0.1:9/v1", model="m", api_key="sk-very-secret")
    response = post(client(StandIn(LLMError("refused key sk-very-secret")), llm=llm))
    assert response.status_code == 502 and "sk-very-secret" not in response.text and "***" in response.text


def test_methods_lists_every_method_with_its_options_and_what_it_takes():
    listed = {m["name"]: m for m in client().get("/v1/methods").json()["methods"]}
    assert set(methods.MAIN) <= set(listed) and all(listed[n]["main"] for n in methods.MAIN)
    assert listed["tigrag"]["options"]["hops"] == methods.get("tigrag").settings.hops
    assert listed["bm25"]["options"] == {} and listed["bm25"]["filter"] is True and listed["bm25"]["llm"] is False
    assert listed["cirag"]["llm"] is True and listed["cirag"]["answers"] is True
    assert listed["threadrag"]["family"] == "threadrag"


def test_calls_run_concurrently():
    """Two requests meet inside the database calls: each in a worker thread, not one after the other."""
    meet = threading.Barrier(2)
    app = create_app(StandIn(wait=meet))   # type: ignore[arg-type]

    async def both() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            return list(await asyncio.gather(c.get("/v1/corpora"), c.get("/v1/corpora")))

    assert [r.status_code for r in asyncio.run(both())] == [200, 200]
    assert not meet.broken


def test_the_openapi_document_is_valid_and_names_every_route():
    from openapi_spec_validator import validate

    document = client().get("/openapi.json").json()
    validate(document)
    assert document["openapi"].startswith("3.1")
    routes = {route.path for route in create_app(StandIn()).routes}   # type: ignore[arg-type]
    assert set(document["paths"]) == routes
    schema = document["components"]["schemas"]
    assert schema["RetrieveRequest"]["properties"]["method"]["default"] == "dense"
    assert schema["AnswerRequest"]["properties"]["method"]["default"] == "t2rag"
    assert set(methods.MAIN) <= set(schema["RetrieveRequest"]["properties"]["method"]["enum"])
    assert openapi(Service(StandIn())) == document   # type: ignore[arg-type]
