"""docs/http-api.md is generated from the OpenAPI document and must match it (regenerate:
`python -m bkaudit.admin.apidoc > docs/http-api.md`)."""

from __future__ import annotations

from pathlib import Path

from bkaudit.admin.apidoc import openapi_document, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"


def test_http_api_doc_is_in_sync_with_the_app() -> None:
    doc = openapi_document()
    assert DOC.read_text(encoding="utf-8") == render(doc), "regenerate docs/http-api.md (module docstring)"
    for path in doc["paths"]:
        assert f" {path}`" in DOC.read_text(encoding="utf-8")
