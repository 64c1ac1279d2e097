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
need a read or admin token unless `[admin] anonymous_read = true` (the default). The webhook endpoints are
admin-only, reads included (their URLs are configuration). No or an unknown token: **401**
(`WWW-Authenticate: Bearer`); a read token on a changing call: **403**.

The token is checked from the request's headers alone, **before any byte of the body is read or parsed**:
a refused request is answered at once (with `Connection: close` when it announced a body, which is then never
read), so a malformed body without a token is 401, not 422, and an unauthenticated upload cannot make the
server buffer anything. The OpenAPI document declares the scheme (`bearer`) on every operation that takes it
(optional on reads while anonymous reads are on).

| page | token |
|---|---|
| `GET /heartbeat` (liveness) and `GET /` (a redirect to `/dashboard`) | never |
| `GET /dashboard`, `GET /openapi.json`, every other `GET` | a read token, unless `anonymous_read = true` |
| `GET /api/v1/webhooks...` and every `PUT`/`POST`/`DELETE` | an admin token |
| an unknown path (**404**), a method the path lacks (**405**, `Allow`) | none, and no body is read |

There is no `/docs` or `/redoc`: FastAPI's pages load Swagger UI / ReDoc from a CDN (broken offline, and a
third party trusted with the page). This page is the reference; `/openapi.json` is the machine-readable
document. tests/security/test_admin_tokens.py checks the roles for every route the app declares,
tests/admin/test_guard.py the order, docs/security.md has the whole threat model.

## Limits and headers

Every request body, on every route, is bounded by `[admin] max_body_bytes` (64 KiB by default; the largest
body the API takes, a webhook, is about 2.5 KB): an announced `Content-Length` above it is **413** before a
byte is read, a chunked body is cut off with **413** when it passes it. Every answer carries
`Content-Security-Policy` (`default-src 'none'`; the dashboard's own inline script and style allowed by their
SHA-256 hashes, its calls by `connect-src 'self'`; `frame-ancestors 'none'`), `X-Frame-Options: DENY`,
`X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer` and `Cache-Control: no-store`.

## Errors

Always JSON: `{"error": "<message>", ...}` (schema `ErrorBody` in the OpenAPI document, which lists every
status each operation can answer). Bad input is **400** (a bad value: an unknown state, a refused webhook URL,
a bookie id outside BookKeeper's `BookieId` rule `[a-zA-Z0-9:-_.\\-]+` — a NUL, a `/`, a space — which is
never handed to ZooKeeper) or **422** (the request's shape: missing or unknown fields, wrong types, malformed
JSON; `{"error", "detail": [{"loc", "msg", "type"}]}`, schema `ValidationErrorBody`). Bodies are strict:
`{"readOnly": "yes"}` or `{"readOnly": 1}` is 422, only JSON `true`/`false` are booleans. An unknown bookie or
webhook is **404**; a refused transition is **409** and lists the ledgers in the way (`blockers`); a
malformed znode is reported, never guessed. An unexpected failure is a JSON **500** (the type of the error,
details in the server's log); the server keeps serving, and the client's connection stays usable.

## The read-only switch

`PUT /api/v1/bookie/state/readonly {"readOnly": true|false}` records the switch in ZooKeeper
(`{state}/serving/<bookie>`), which every bkaudit bookie watches. An Apache BookKeeper bookie watches
nothing of bkaudit's, so for `true` the call goes on as the drain does (`bkaudit.lifecycle.serving`,
docs/lifecycle.md): a bookie registered writable that does not follow the switch is made read-only through
its own HTTP admin API (`PUT /api/v1/bookie/state/readonly {"readOnly": true}` on the `http` endpoint of its
registration,
`httpServerEnabled`), within `[lifecycle] bookie_http_timeout_s`. The answer says what happened (`serving`:
`follows_state`, `made_read_only`, `read_only`, `absent`; `serving_url`). When the bookie still takes writes
the switch stays recorded and the answer is an error: **409** when asking again cannot help (no http endpoint
in its registration, or the bookie refused: `readOnlyModeEnabled=false`), **502** for a transient failure
(its API did not answer). `{"readOnly": false}` is recorded but never sent to a BookKeeper bookie: it can be
read-only for its own reasons (disks full, `forceReadOnlyBookie`) that bkaudit cannot see; use the bookie's
own API for that.

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

Where a webhook may go (an admin token must not turn the server into a proxy into its own network):
- the URL is absolute `http`/`https` without spaces or control characters, with a valid port (1-65535) and
  **no credentials** (`user:password@` is 400: receivers check the signature instead);
- its host, and every address its name resolves to, must be a public address: **loopback, link-local
  (169.254.169.254 included), private (10/8, 172.16/12, 192.168/16, fc00::/7), multicast, unspecified
  (0.0.0.0, ::), shared (100.64/10) and reserved addresses are refused** (400), IPv4 inside IPv6 (`::ffff:`,
  6to4, NAT64) judged as that IPv4, unless `[admin] webhook_allow_networks` lists a network holding it;
- the same check runs **again at every delivery attempt**, on the addresses the name resolves to then, and
  the connection goes to one of those checked addresses (the Host header and TLS still name the host), so a
  DNS answer that changes after registration (DNS rebinding) is refused; deliveries use no proxy and do not
  follow redirects (a 3xx is a failure).

A delivery record says `delivered` or `failed`, and each failed attempt only a class of error: `refused` (the
rules above; not retried), `unreachable` (no HTTP answer: the name did not resolve, the connection was refused
or timed out, TLS failed, the port does not speak HTTP) or `http_status` (an answer other than 2xx). Neither
the target's error text nor its status code is recorded, so the records cannot tell one internal port from
another; the server's log has the details, naming the webhook id and `scheme://host:port` only. URLs are
shown and logged without credentials (`<redacted>@`), also those registered before credentials were refused.

## Dashboard

`GET /dashboard`: bookies (rack, lifecycle state, serving mode, disk use from GetBookieInfo, drain progress),
the under-replication queue, data-loss records and the latest checker run's verdict and categories. One
server-rendered page with a few lines of inline script (allowed by its hash in the CSP, nothing else is) and
no external resources (works offline). Drain, mark drained and remove buttons appear after logging in with
an admin token (kept in the tab's sessionStorage); they call the API below, which does every check. Loading
the page is a read: a browser sends no bearer token when it navigates, so with `anonymous_read = false` the
page answers 401 (put it behind the site's own authentication, or keep anonymous reads on; changes still need
the admin token).

## Endpoints

Generated from the OpenAPI document (`/openapi.json`). Every operation also answers **413** (body over
`max_body_bytes`); those that take a token **401**, and the admin ones **403**.
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
    from bkaudit.store.memory import MemoryStore

    doc: dict[str, Any] = create_app(MemoryStore(), settings=AdminSettings()).openapi()
    plain: dict[str, Any] = json.loads(json.dumps(doc))
    return plain


if __name__ == "__main__":
    print(render(openapi_document()), end="")
