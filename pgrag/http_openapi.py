"""The OpenAPI 3.1 document of ``pgrag serve`` (pgrag.http_api), declared once
here and served at GET /openapi.json. tests/unit/test_http_openapi.py checks that
it is a valid document and that it names every route the application has."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

JSON = "application/json"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _ok(schema: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


def _errors(*statuses: int) -> dict[str, Any]:
    said = {400: "A bad request: not JSON, a bad field, an unknown method or option, a bad filter "
                 "(InputError PR005, UnknownMethod PR004).",
            401: "The API key is missing or wrong (the service was started with --api-key).",
            404: "No such corpus (CorpusNotFound PR001), or no such endpoint.",
            409: "The corpus does not maintain what the method needs (MethodNotBuilt PR007).",
            413: "The body is over 1 MB.",
            415: "The body is not sent as application/json.",
            500: "Any other pgrag error (its message), or a bug (no traceback: see the service's log).",
            502: "The LLM endpoint failed (AnswerFailed PR010 under strict, or the endpoint refused).",
            503: "The model runtime or the database is unreachable (ModelRuntimeUnavailable PR011)."}
    return {str(s): {"description": said[s], "content": {JSON: {"schema": _ref("Error")}}} for s in statuses}


def _schemas(methods: Sequence[str], defaults: Mapping[str, str], max_k: int) -> dict[str, Any]:
    nullable_int = {"type": ["integer", "null"]}
    hit_fields = {
        "rank": {"type": "integer", "description": "1-based rank."},
        "chunk_id": {"type": "integer"},
        "score": {"type": "number"},
        "document_id": {"type": "integer"},
        "external_id": {"type": "string", "description": "The application's id of the document."},
        "title": {"type": "string"},
        "chunk_ordinal": {"type": "integer"},
        "first_sentence": nullable_int,
        "last_sentence": nullable_int,
        "char_start": {"type": "integer", "description": "Code-point offset into the document body."},
        "char_end": {"type": "integer", "description": "End offset, exclusive: body[char_start:char_end] == text."},
        "text": {"type": "string"},
        "details": {"type": "object", "description": "What the method says of the hit (e.g. TIGRAG's hop)."},
        "hop": {**nullable_int, "description": "TIGRAG's hop that found the chunk; null for other methods."},
    }

    def ask(kind: str) -> dict[str, Any]:
        return {
            "type": "object", "required": ["question"], "additionalProperties": False,
            "properties": {
                "question": {"type": "string", "minLength": 1, "maxLength": 10000},
                "method": {"type": "string", "enum": list(methods), "default": defaults[kind]},
                "k": {"type": "integer", "minimum": 1, "maximum": max_k, "default": 5},
                "options": {"type": "object", "description": "The method's settings (GET /v1/methods)"
                            + (", and strict: a failed LLM is an error (502), not finish = llm_error."
                               if kind == "answer" else ".")},
                "filter": {"type": ["object", "null"], "description": "A metadata filter (docs/filters.md)."},
            },
        }

    retrieved = {"corpus": {"type": "string"}, "method": {"type": "string"}, "k": {"type": "integer"},
                 "answer": {"type": ["string", "null"]},
                 "hits": {"type": "array", "items": _ref("Hit")}, "trace": _ref("Trace")}
    return {
        "RetrieveRequest": ask("retrieve"),
        "AnswerRequest": ask("answer"),
        "Hit": {"type": "object", "required": list(hit_fields), "properties": hit_fields},
        "Trace": {"type": "object", "description": "How the retrieval ran (pgrag.results.Trace).",
                  "properties": {"method": {"type": "string"}, "query": {"type": "string"},
                                 "steps": {"type": "array", "items": {"type": "object"}},
                                 "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
                                 "prompt_tokens": {"type": "integer"}, "completion_tokens": {"type": "integer"},
                                 "llm_calls": {"type": "integer"},
                                 "outcome": {"type": "object", "additionalProperties": {"type": "string"}}}},
        "RetrieveResponse": {"type": "object", "required": list(retrieved), "properties": retrieved},
        "AnswerResponse": {"type": "object", "required": [*retrieved, "finish"], "properties": {
            **retrieved, "llm_calls": {"type": "integer"}, "prompt_tokens": {"type": "integer"},
            "completion_tokens": {"type": "integer"},
            "finish": {"type": "string", "description": "natural, forced, llm_error (the LLM failed), ..."}}},
        "Method": {"type": "object", "required": ["name", "options", "filter", "llm", "answers"], "properties": {
            "name": {"type": "string"}, "main": {"type": "boolean"},
            "options": {"type": "object", "description": "Each option with its default."},
            "filter": {"type": "boolean", "description": "Takes a metadata filter."},
            "llm": {"type": "boolean", "description": "Uses the service's LLM when one is configured."},
            "answers": {"type": "boolean", "description": "Answers (POST .../answer), not only retrieves."},
            "needs_triples": {"type": "boolean"}, "family": {"type": ["string", "null"]}}},
        "Methods": {"type": "object", "required": ["methods"],
                    "properties": {"methods": {"type": "array", "items": _ref("Method")}}},
        "Corpus": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "embedding_model": {"type": "string"}, "embedding_dim": {"type": "integer"},
            "documents": {"type": "integer"}, "chunks": {"type": "integer"}, "tokens": {"type": "integer"},
            "edges": {"type": "integer"}, "pending": {"type": "integer"},
            "families": {"type": "array", "items": {"type": "string"}}}},
        "Corpora": {"type": "object", "required": ["corpora"],
                    "properties": {"corpora": {"type": "array", "items": _ref("Corpus")}}},
        "Health": {"type": "object", "required": ["status"],
                   "properties": {"status": {"const": "ok"}, "version": {"type": "string"}}},
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["message", "sqlstate", "type"], "properties": {
                "message": {"type": "string"},
                "sqlstate": {"type": ["string", "null"], "pattern": "^PR[0-9]{3}$",
                             "description": "pgrag's SQLSTATE, as SQL's pgrag.retrieve raises it; "
                                            "null for an error of HTTP itself (401, 404 route, 405)."},
                "type": {"type": "string", "description": "The pgrag exception class (InputError, ...)."}}}}},
    }


def document(version: str, methods: Sequence[str], defaults: Mapping[str, str], max_k: int) -> dict[str, Any]:
    """The document: ``methods`` the names the service knows, ``defaults`` the
    default method of retrieve and of answer, ``max_k`` the largest k."""
    corpus = {"name": "corpus", "in": "path", "required": True, "schema": {"type": "string"},
              "description": "The corpus name."}

    def post(kind: str, summary: str, response: str) -> dict[str, Any]:
        return {"post": {
            "operationId": kind, "summary": summary, "parameters": [corpus],
            "requestBody": {"required": True, "content": {JSON: {"schema": _ref(f"{kind.title()}Request")}}},
            "responses": {"200": _ok(response, "The result."),
                          **_errors(400, 401, 404, 409, 413, 415, 500, 502, 503)}}}

    def get(operation: str, summary: str, schema: str, *errors: int) -> dict[str, Any]:
        return {"get": {"operationId": operation, "summary": summary,
                        "responses": {"200": _ok(schema, "The result."), **_errors(*errors)}}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "pgrag", "version": version,
                 "description": "Multi-hop retrieval over the corpora of one PostgreSQL database: the methods, "
                                "options, filters and errors of SQL's pgrag.retrieve, over HTTP (docs/http.md)."},
        "paths": {
            "/v1/corpora/{corpus}/retrieve": post(
                "retrieve", "Top-k chunks for a question with one method, with provenance and the trace.",
                "RetrieveResponse"),
            "/v1/corpora/{corpus}/answer": post(
                "answer", "Answer a question with an answering method (t2rag, threadrag, cirag) and the "
                          "service's LLM.", "AnswerResponse"),
            "/v1/methods": get("methods", "Every method: its options with defaults, whether it takes a filter "
                                          "or the LLM.", "Methods", 401, 500),
            "/v1/corpora": get("corpora", "The corpora the service's role may read.", "Corpora", 401, 500, 503),
            "/health": {"get": {**get("health", "The database answers.", "Health", 503)["get"],
                                "security": []}},   # no API key: for a load balancer's probe
            "/openapi.json": {"get": {"operationId": "openapi", "summary": "This document.",
                                      "responses": {"200": {"description": "The OpenAPI document.",
                                                            "content": {JSON: {"schema": {"type": "object"}}}},
                                                    **_errors(401)}}},
        },
        "components": {
            "schemas": _schemas(methods, defaults, max_k),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer",
                                           "description": "Only when the service has --api-key / PGRAG_API_KEY."}},
        },
        # Optional: an empty requirement lets a service without a key be called as it is.
        "security": [{"apiKey": []}, {}],
    }
