"""The admin dashboard: one server-rendered page, a few lines of inline script for the actions, no CDN.

The page's one inline script and one inline style are allowed by their SHA-256 in the Content-Security-Policy
(bkaudit.admin.guard), nothing else is: no inline event handlers, no `style=` attributes, no external
resources.

Tables come straight from the same read models as the API. Actions (drain, mark drained, remove) call the
API with the admin token entered in the login box (kept in the tab's sessionStorage, sent as a bearer token);
the API does every check, so the page holds no rules of its own.
"""

from __future__ import annotations

from html import escape
from typing import Any

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}h1{font-size:1.4em}
h2{font-size:1.1em;margin-top:1.6em}table{border-collapse:collapse;margin:.4em 0}
th,td{border:1px solid #ccc;padding:.25em .6em;font-size:.9em;text-align:left}
th{background:#f2f2f2}.Draining{background:#fff4d6}.DrainingFailed{background:#ffd9d9}.Drained{background:#e3f1ff}
.critical{color:#b00;font-weight:bold}.warning{color:#a60}.clean{color:#070;font-weight:bold}
button{margin-right:.3em}#status{margin-left:1em;font-weight:bold}.muted{color:#777}
"""

SCRIPT = """
const token = () => sessionStorage.getItem('bkauditToken');
function show() {
  const on = !!token();
  document.querySelectorAll('.admin').forEach(e => e.style.display = on ? '' : 'none');
  document.getElementById('login-form').style.display = on ? 'none' : '';
  document.getElementById('logout').hidden = !on;
}
async function login(ev) {
  ev.preventDefault();
  const t = document.getElementById('token').value.trim();
  const r = await fetch('/api/v1/webhooks', {headers: {Authorization: 'Bearer ' + t}});
  if (r.ok) { sessionStorage.setItem('bkauditToken', t); setStatus('logged in'); }
  else { setStatus('login refused (' + r.status + ')'); }
  show();
}
function logout() { sessionStorage.removeItem('bkauditToken'); show(); setStatus('logged out'); }
function setStatus(text) { document.getElementById('status').textContent = text; }
async function act(bookie, action) {
  const q = '?bookie=' + encodeURIComponent(bookie);
  const headers = {Authorization: 'Bearer ' + token(), 'Content-Type': 'application/json'};
  const reason = 'dashboard';
  const req = action === 'remove'
    ? fetch('/api/v1/bookie/cookie' + q, {method: 'DELETE', headers, body: JSON.stringify({reason})})
    : fetch('/api/v1/bookie/lifecycle' + q, {method: 'PUT', headers,
        body: JSON.stringify({state: action === 'drain' ? 'Draining' : 'Drained', reason})});
  const r = await req;
  const body = await r.json().catch(() => ({}));
  if (r.ok) { setStatus(bookie + ': ' + (body.state || 'done')); setTimeout(() => location.reload(), 500); }
  else { setStatus(bookie + ': ' + r.status + ' ' + (body.error || '') +
         (body.blockers && body.blockers.length ? ' [' + body.blockers.join(', ') + ']' : '')); }
}
document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('login-form').addEventListener('submit', login);
  document.getElementById('logout').addEventListener('click', logout);
  document.querySelectorAll('button[data-action]').forEach(
    b => b.addEventListener('click', () => act(b.dataset.bookie, b.dataset.action)));
  show();
});
"""

ACTIONS = {"Active": ("drain",), "DrainingFailed": ("mark-drained",), "Drained": ("remove",)}


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _human_bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(n)


def _table(table_id: str, headers: list[str], rows: list[str], empty: str) -> str:
    if not rows:
        return f'<p id="{table_id}" class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _bookie_row(b: dict[str, Any]) -> str:
    disk = b.get("disk")
    if disk and disk.get("total_disk"):
        used = disk["total_disk"] - disk["free_disk"]
        disk_text = f"{100 * used / disk['total_disk']:.0f}% of {_human_bytes(disk['total_disk'])}"
    else:
        disk_text = "n/a"
    p = b.get("progress") or {}
    progress = (f"{p.get('ledgers_left')} ledgers, {_human_bytes(p.get('bytes_left'))} left, "
                f"{p.get('failures', 0)} failures" if p else "")
    buttons = "".join(
        f'<button class="admin" data-bookie="{_e(b["bookie"])}" data-action="{a}">{a}</button>'
        for a in ACTIONS.get(b["state"], ())
    )
    cells = [b["bookie"], b.get("rack"), b["state"], b["registration"], disk_text, progress]
    tds = "".join(f"<td>{_e(c)}</td>" for c in cells)
    return f'<tr class="{_e(b["state"])}" data-bookie="{_e(b["bookie"])}">{tds}<td>{buttons}</td></tr>'


def render(
    *, bookies: list[dict[str, Any]], queue: dict[str, Any], data_loss: list[dict[str, Any]],
    verdict: dict[str, Any] | None, verdict_error: str, cluster_label: str, version: str,
) -> str:
    bookie_rows = [_bookie_row(b) for b in bookies]
    queue_rows = [
        f"<tr><td>{_e(r['ledger_id'])}</td><td>{_e(', '.join(r.get('replicas', [])))}</td>"
        f"<td>{_e(r.get('locked_by') or '')}</td></tr>"
        for r in queue["ledgers"]
    ]
    loss_rows = [
        f"<tr><td>{_e(r['ledger_id'])}</td><td>{_e(r.get('lost_entries'))}</td>"
        f"<td>{_e(', '.join(r.get('bookies', [])))}</td><td>{_e(r.get('detected_at'))}</td></tr>"
        for r in data_loss
    ]
    if verdict is None:
        audit = f'<p id="verdict" class="muted">{_e(verdict_error)}</p>'
    else:
        cat_rows = [
            f"<tr><td>{_e(c)}</td><td class=\"{_e(v['severity'])}\">{_e(v['severity'])}</td>"
            f"<td>{_e(v['count'])}</td></tr>"
            for c, v in sorted(verdict["categories"].items())
        ]
        audit = (
            f'<p>run <code>{_e(verdict["run_id"])}</code> finished {_e(verdict["finished_at"])}: '
            f'<span id="verdict" class="{_e(verdict["verdict"])}">{_e(verdict["verdict"])}</span></p>'
            + _table("categories", ["category", "severity", "violations"], cat_rows, "no violations")
        )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>bkaudit admin</title>
<style>{STYLE}</style><script>{SCRIPT}</script></head>
<body>
<h1>bkaudit admin <span class="muted">{_e(cluster_label)} · bkaudit {_e(version)}</span></h1>
<form id="login-form">admin token <input id="token" type="password" autocomplete="off">
<button id="login" type="submit">log in</button></form>
<button id="logout" hidden>log out</button><span id="status"></span>
<h2>Bookies</h2>
{_table("bookies", ["bookie", "rack", "state", "serving", "disk", "drain progress", "actions"], bookie_rows,
        "no bookies")}
<h2>Under-replication queue ({_e(queue["count"])})</h2>
{_table("queue", ["ledger", "missing replicas", "locked by"], queue_rows, "empty")}
<h2>Data loss ({len(data_loss)})</h2>
{_table("dataloss", ["ledger", "lost entries", "bookies", "detected"], loss_rows, "none recorded")}
<h2>Latest audit</h2>
{audit}
</body></html>
"""
