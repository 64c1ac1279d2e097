"""docs/http-api.md from the app's OpenAPI document: `python -m bkaudit.admin.apidoc > docs/http-api.md`.

A test compares the file with this output, so the page cannot drift from the code.
"""

from __future__ import annotations

import json
from typing import Any

INTRO = """# HTTP management API

`bkaudit admin serve` runs one cluster-level API and the [dashboard](#dashboard) over ZooKeeper, so every
call works while a bookie host is down (docs/lifecycle.md). It follows BookKeeper's HTTP admin conventions:
`/api/v1/...`, JSON bodies, and BookKeeper's endpoint names where one exists (`/api/v1/bookie/state`,
`/api/v1/bookie/state/readonly`, `/api/v1/bookie/list_bookies`, `/api/v1/bookie/list_bookie_info`,
`/api/v1/autorecovery/list_under_replicated_ledger`, `/api/v1/autorecovery/who_is_auditor`, `/heartbeat`).
BookKeeper serves those per bookie (`httpServerEnabled`); here one server manages every bookie, so the
per-bookie paths take `?bookie=<id>`. The lifecycle, cookie, drain, data-loss, audit and webhook endpoints are
bkaudit's additions (BookKeeper has no equivalent).

```
bkaudit admin hash-token --name ops          # prints a new token (stderr) and its entry "ops:<sha256>"
BKAUDIT_ADMIN__ADMIN_TOKENS=ops:<sha256> bkaudit admin serve --zk zk1:2181 --port 8000 \\
    [--warehouse /data/bkaudit] [--tls-cert cert.pem --tls-key key.pem]
curl -H "Authorization: Bearer $TOKEN" -X PUT -d '{"state": "Draining", "reason": "scale down"}' \\
    'http://localhost:8000/api/v1/bookie/lifecycle?bookie=10.0.0.7:3181'
```

## Authentication

Bearer tokens, configured only as SHA-256 hashes (`[admin] admin_tokens`, `read_tokens`: `name:<hex>`; the
name is recorded as `api:<name>` in every change it makes). Every changing call needs an admin token; reads
are open while `[admin] anonymous_read = true` (the default), else they need a read or admin token.
No or an unknown token: **401** (`WWW-Authenticate: Bearer`); a read token on a changing call: **403**.
tests/security/test_admin_tokens.py checks this for every changing route the app declares; docs/security.md
has the whole threat model.

## Errors

Always JSON: `{"error": "<message>", ...}`. Bad input is **400** (a bad value, e.g. an unknown state or a
bookie id with `/`) or **422** (the request's shape: missing or unknown fields, wrong types, with `detail`);
an unknown bookie or webhook is **404**; a refused transition is **409** and lists the ledgers in the way
(`blockers`); a malformed znode is reported, never guessed. An unexpected failure is a JSON **500**; the
server keeps serving.

## Webhooks

`POST /api/v1/webhooks {"url", "secret"}` registers a URL in ZooKeeper (`{state}/webhooks/<id>`, where
`{state}` is `[zk] state_root`, default `/bkaudit<root>`; so it survives restarts and is shared by several
admin servers). Every lifecycle transition recorded after the registration is POSTed once as JSON
`{"webhook", "event": "lifecycle_transition", "bookie", "record", "transition": {"state", "previous", "by",
"at", "reason"}}` with `X-Bkaudit-Signature: sha256=<hex of
HMAC-SHA256(secret, body)>` and `X-Bkaudit-Delivery: <id>/<bookie>~<record>`. A non-2xx answer or an error is
retried `webhook_max_attempts` times with exponential backoff from `webhook_backoff_s`; each delivery and
its attempts are recorded under `{state}/webhook-deliveries/<id>/` (`GET .../deliveries`).
Delivery is claimed before it is sent (a znode create), so two servers never both send it; a receiver that
answered but whose answer was lost may see a retry (verify the signature, de-duplicate on the delivery id).

## Dashboard

`GET /dashboard`: bookies (rack, lifecycle state, serving mode, disk use from GetBookieInfo, drain progress),
the under-replication queue, data-loss records and the latest checker run's verdict and categories. One
server-rendered page with a few lines of inline script and no external resources (works offline). Drain,
mark drained and remove buttons appear after logging in with an admin token (kept in the tab's
sessionStorage); they call the API below, which does every check. Loading the page is a read: a browser
sends no bearer token when it navigates, so with `anonymous_read = false` the page answers 401 (put it behind
the site's own authentication, or keep anonymous reads on; changes still need the admin token).

## Endpoints

Generated from the OpenAPI document (`/openapi.json`; interactive at `/docs`).
"""


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    kind = str(schema.get("type", "object"))
    if kind == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    return kind


def render(openapi: dict[str, Any]) -> str:
    lines = [INTRO]
    groups: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, methods in openapi["paths"].items():
        for method, op in methods.items():
            groups.setdefault((op.get("tags") or ["other"])[0], []).append((path, method.upper(), op))
    for tag in sorted(groups):
        lines.append(f"### {tag}\n")
        for path, method, op in sorted(groups[tag]):
            lines.append(f"#### `{method} {path}`\n")
            if op.get("summary"):
                lines.append(op["summary"][0].upper() + op["summary"][1:] + ".\n")
            params = op.get("parameters") or []
            if params:
                lines.append("| parameter | in | required | type |\n|---|---|---|---|")
                for p in params:
                    lines.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                                 f"{_schema_name(p.get('schema', {}))} |")
                lines.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body:
                lines.append(f"Body: `{_schema_name(body)}`.\n")
            codes = ", ".join(sorted(op.get("responses", {})))
            lines.append(f"Responses: {codes}.\n")
    schemas = openapi.get("components", {}).get("schemas", {})
    bodies = {k: v for k, v in schemas.items() if k.endswith("Body")}
    if bodies:
        lines.append("### Request bodies\n")
        for name, schema in sorted(bodies.items()):
            fields = ", ".join(
                f"`{f}` ({_schema_name(s)}{', required' if f in schema.get('required', []) else ''})"
                for f, s in schema.get("properties", {}).items()
            )
            lines.append(f"- `{name}`: {fields}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document, built without ZooKeeper (routes only)."""
    from bkaudit.admin.app import create_app
    from bkaudit.admin.settings import AdminSettings

    doc: dict[str, Any] = create_app(None, root="/ledgers", settings=AdminSettings()).openapi()
    plain: dict[str, Any] = json.loads(json.dumps(doc))
    return plain


if __name__ == "__main__":
    print(render(openapi_document()), end="")
