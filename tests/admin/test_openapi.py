"""The OpenAPI document says what the API answers (issue 32 items 1 and 9), and schemathesis holds the server
to it: generated requests (valid and invalid) with an admin token, a read token and none, on a real uvicorn
server over the embedded ZooKeeper; no answer may be a 5xx, and every status, content type and body must be
the declared one (the 422 bodies included). Bounded: a fixed number of examples (derandomized, so a run is
repeatable), a few seconds per token mode."""

from __future__ import annotations

import socket
from collections import Counter
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from bkaudit.admin import webhooks
from bkaudit.admin.apidoc import openapi_document
from bkaudit.store import ZkStore
from bkaudit.zk import paths, registry
from tests.admin.support import ADMIN, READER, add_cookie, add_ledger, serve
from tests.admin.support import settings as admin_settings

A, B = "10.0.0.1:3181", "10.0.0.2:3181"
EXAMPLES = 120  # per token mode, spread over every operation; about 10 s each on the loaded 2-core machine


def test_the_document_declares_every_error_status_and_the_bearer_scheme() -> None:
    doc = openapi_document()
    assert doc["components"]["securitySchemes"] == {"bearer": {
        "type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearer"]
        ["description"]}}
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's 422 body: never sent
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            codes = set(op["responses"])
            where = f"{method.upper()} {path}"
            assert "413" in codes, where
            if path == "/heartbeat":
                assert "security" not in op and "401" not in codes
                continue
            changing = method != "get" or "webhooks" in path
            assert op["security"] == ([{"bearer": []}] if changing else [{"bearer": []}, {}]), where
            assert {"401"} | ({"403"} if changing else set()) <= codes, where
            if any(p["name"] == "bookie" for p in op.get("parameters", [])):
                assert {"400", "422"} <= codes, where
            for code, answer in op["responses"].items():
                if code[0] in "45":
                    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
                    assert ref == ("ValidationErrorBody" if code == "422" else "ErrorBody"), (where, code)
    ops = doc["paths"]
    assert {"400", "404", "409"} <= set(ops["/api/v1/bookie/lifecycle"]["put"]["responses"])
    assert {"400", "404", "409", "502"} <= set(ops["/api/v1/bookie/state/readonly"]["put"]["responses"])
    assert {"400", "404", "409"} <= set(ops["/api/v1/bookie/cookie"]["delete"]["responses"])
    assert {"400", "404"} <= set(ops["/api/v1/webhooks/{hook_id}"]["delete"]["responses"])
    assert ops["/api/v1/bookie/state/readonly"]["put"]["requestBody"]["content"]["application/json"]


@pytest.fixture
def served(zk, zk_root, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """An API over a small cluster: bookies, a ledger, a webhook. Names other than IP literals and localhost
    do not resolve (a generated webhook URL never makes the test ask a DNS server)."""
    real = socket.getaddrinfo

    def offline(host: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if host in (None, "localhost") or webhooks._literal(str(host).strip("[]")) is not None:
                return real(host, *args, **kwargs)
        except ValueError:
            pass
        raise socket.gaierror(socket.EAI_NONAME, "not resolved in this test")

    monkeypatch.setattr(socket, "getaddrinfo", offline)
    for b in (A, B):
        add_cookie(zk, zk_root, b)
    zk.ensure_path(paths.readonly_root(root=zk_root))
    registry.register(zk, B, b"", readonly=True, root=zk_root)
    add_ledger(zk, zk_root, 7, (A, B))
    webhooks.register(ZkStore(zk, root=zk_root), url="http://127.0.0.1:9/hook", secret="s3cret-hook", by="t",
                      at="now", allow=admin_settings().allowed_networks())
    server = serve(zk, zk_root, webhook_max_attempts=1)
    try:
        yield server
    finally:
        server.stop()


def test_every_422_body_matches_the_declared_schema(served) -> None:  # type: ignore[no-untyped-def]
    doc = openapi_document()
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/ValidationErrorBody", "components": doc["components"]})
    with httpx.Client(base_url=served.url, timeout=30, headers=ADMIN) as api:
        answers = [
            api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, json={"readOnly": "yes"}),
            api.put("/api/v1/bookie/state/readonly", params={"bookie": A}, content=b"{not json",
                    headers={"Content-Type": "application/json"}),
            api.put("/api/v1/bookie/lifecycle", params={"bookie": A}, json={"state": "Draining", "x": 1}),
            api.put("/api/v1/bookie/lifecycle", json={"state": "Draining"}),
            api.get("/api/v1/audit/verdicts", params={"limit": "-1"}),
            api.get("/api/v1/bookie/list_bookies", params={"type": "x"}),
            api.post("/api/v1/webhooks", json=[1, 2]),
            api.get("/api/v1/autorecovery/list_under_replicated_ledger", params={"printmissingreplica": "x"}),
        ]
    for r in answers:
        assert r.status_code == 422, r.text
        validator.validate(r.json())


def _fuzz(server: Any, headers: dict[str, str]) -> Counter[int]:
    """Generated requests against `server` with `headers`; how many answers of each status it gave."""
    schema = schemathesis.openapi.from_dict(openapi_document())
    cases = st.one_of(schema.as_strategy(GenerationMode.POSITIVE),
                      schema.as_strategy(GenerationMode.NEGATIVE))
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]
    seen: Counter[int] = Counter()

    @given(case=cases)
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def one(case: Any) -> None:
        seen[case.call_and_validate(base_url=server.url, headers=headers, checks=checks, timeout=30)
             .status_code] += 1

    one()
    return seen


FUZZ = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")  # schemathesis'


@FUZZ
def test_schemathesis_with_an_admin_token(served) -> None:  # type: ignore[no-untyped-def]
    seen = _fuzz(served, ADMIN)
    assert seen[200] and seen[422] and seen[400], seen  # requests got past authorization and validation


@FUZZ
def test_schemathesis_without_a_token(served) -> None:  # type: ignore[no-untyped-def]
    seen = _fuzz(served, {})
    assert seen[401] and seen[200], seen  # anonymous reads answered, changes refused


@FUZZ
def test_schemathesis_with_a_read_token(served) -> None:  # type: ignore[no-untyped-def]
    seen = _fuzz(served, READER)
    assert seen[403] and seen[200], seen
