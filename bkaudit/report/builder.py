"""The HTML audit report: one self-contained page per checker run (inline CSS and SVG, nothing fetched).

Sections (their `id`s are stable, tests and links rely on them): summary, categories (per category and per
severity, with a bar chart), bookies, managed-ledgers, trend (last runs, line chart, Delta history of the
`violations` table), worst-ledgers (missing-entry ranges), validation (the snapshot's expectations).
Every number cell carries its exact value in `data-value`, so the page can be checked by a parser.
A table that could not be read (`ReportData.unreadable`) is named where its data would be, with the reason
(`class="unreadable"`), and the verdict says "could not read", never "clean".
"""

from __future__ import annotations

import html
import string
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bkaudit import __version__
from bkaudit.report import plots, summary
from bkaudit.report.data import ReportData, load

if TYPE_CHECKING:
    from bkaudit.tables.location import Warehouse

SECTIONS = (
    ("summary", "Summary"),
    ("categories", "Violations by category"),
    ("bookies", "Bookies"),
    ("managed-ledgers", "Managed ledgers (Pulsar topics)"),
    ("trend", "Trend"),
    ("worst-ledgers", "Worst ledgers"),
    ("validation", "Snapshot validation"),
)

Column = tuple[str, str, str]  # (key, header, kind: "num" | "text" | "badge" | "code" | "bool" | "html")


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _when(value: Any) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _num(value: Any) -> str:
    if value is None:
        return '<td class="num" data-value="">–</td>'
    if isinstance(value, float) and not value.is_integer():
        return f'<td class="num" data-value="{value!r}">{value:,.1f}</td>'
    return f'<td class="num" data-value="{int(value)}">{int(value):,}</td>'


def _cell(kind: str, value: Any) -> str:
    if kind == "num":
        return _num(value)
    if kind == "badge":
        return f'<td><span class="badge {_esc(value)}">{_esc(value)}</span></td>'
    if kind == "code":
        return f'<td class="mono">{_esc(value)}</td>'
    if kind == "bool":
        return f"<td>{'' if value is None else ('yes' if value else 'no')}</td>"
    if kind == "html":
        return f"<td>{value}</td>"
    return f"<td>{_esc(value)}</td>"


def table(table_id: str, columns: Sequence[Column], rows: Sequence[dict[str, Any]], key: str,
          zero: Callable[[dict[str, Any]], bool] | None = None) -> str:
    """An HTML table; each row carries `data-key` (its `key` value), each cell `data-col`."""
    head = "".join(f'<th class="{"num" if kind == "num" else ""}">{_esc(label)}</th>'
                   for _k, label, kind in columns)
    body = []
    for row in rows:
        cls = ' class="zero"' if zero is not None and zero(row) else ""
        cells = "".join(_cell(kind, row.get(k)).replace("<td", f'<td data-col="{k}"', 1)
                        for k, _l, kind in columns)
        body.append(f'<tr data-key="{_esc(row.get(key))}"{cls}>{cells}</tr>')
    if not body:
        body.append(f'<tr class="zero"><td colspan="{len(columns)}">none</td></tr>')
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _card(key: str, label: str, value: Any, text: str | None = None) -> str:
    shown = text if text is not None else (f"{value:,}" if isinstance(value, int) else _esc(value))
    data = "" if value is None else _esc(value)
    return (f'<div class="card" data-key="{key}"><div class="value" data-value="{data}">{shown}</div>'
            f'<div class="label">{_esc(label)}</div></div>')


def _section(section_id: str, body: str) -> str:
    title = dict(SECTIONS)[section_id]
    return f'<section id="{section_id}"><h2>{_esc(title)}</h2>\n{body}\n</section>'


def could_not_read(unreadable: dict[str, str], table_name: str) -> str:
    """The note standing where a table's data would be when it could not be read ("" when it was read)."""
    reason = unreadable.get(table_name)
    if reason is None:
        return ""
    return (f'<p class="unreadable" data-table="{_esc(table_name)}">Could not read the '
            f'<code>{_esc(table_name)}</code> table: {_esc(reason)}. What it holds is unknown, not empty.'
            '</p>')


# -- sections ------------------------------------------------------------------------------------------------
def verdict(cats: Sequence[dict[str, Any]], unreadable: dict[str, str] | None = None) -> tuple[str, str]:
    """(css class, sentence) summing up the run for a person in a hurry; never "clean" when the run's
    violations could not be read."""
    if unreadable and "violations" in unreadable:
        return "unknown", ("Could not read the violations table: this run's findings are unknown (not "
                           f"clean). {unreadable['violations']}")
    new = {c["category"]: c["new"] for c in cats}
    critical = sum(c["new"] for c in cats if c["severity"] == "critical")
    warning = sum(c["new"] for c in cats if c["severity"] == "warning")
    durable = sum(new.get(c, 0) for c in summary.DURABILITY)
    if critical:
        return "critical", (f"{critical:,} critical violation(s): data is lost or less durable than "
                            "acknowledged to writers. Act now.")
    if durable or warning:
        return "warning", f"Durability holds at the ack quorum; {warning:,} warning(s) need attention soon."
    return "ok", "Durability clean: every checked entry has its full write quorum of copies."


def summary_section(data: ReportData, cats: Sequence[dict[str, Any]]) -> str:
    run, rows = data.run, data.violations.num_rows
    cls, sentence = verdict(cats, data.unreadable)
    lost = "violations" in data.unreadable
    cards = [
        _card("status", "run status", run.get("status"), f'<span class="badge {_esc(run.get("status"))}">'
                                                          f'{_esc(run.get("status"))}</span>'),
        _card("ledgers_checked", "ledgers checked", run.get("ledgers_checked")),
        _card("ledgers_in_snapshot", "ledgers in snapshot", (data.snapshot or {}).get("ledgers")),
        _card("entries_checked", "entries checked", run.get("entries_checked")),
        _card("bookies_checked", "bookies asked", run.get("bookies_checked")),
        _card("violations", "violation rows", None if lost else rows, "could not read" if lost else None),
        _card("new_critical", "new critical", None if lost else sum(c["new"] for c in cats
                                                                     if c["severity"] == "critical"),
              "could not read" if lost else None),
        _card("published", "published to the UR queue", run.get("published")),
    ]
    facts = [("run id", run.get("run_id")), ("snapshot id", run.get("snapshot_id")),
             ("started", _when(run.get("started_at"))), ("finished", _when(run.get("finished_at"))),
             ("duration", f"{run['seconds']:.1f} s" if run.get("seconds") is not None else None),
             ("ZooKeeper", f"{run.get('zk') or ''}{run.get('root') or ''}")]
    if data.snapshot:
        s = data.snapshot
        facts.append(("snapshot", f"{s.get('ledgers')} ledgers ({s.get('unparseable')} unparseable), "
                                  f"{s.get('bookies')} bookies, {s.get('underreplicated')} under-replicated, "
                                  f"taken {_when(s.get('finished_at'))}"))
    if run.get("error"):
        facts.append(("error", run["error"]))
    dl = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in facts if v)
    notes = "".join(could_not_read(data.unreadable, t) for t in sorted(data.unreadable))
    return _section("summary", f'<div class="verdict {cls}">{_esc(sentence)}</div>{notes}'
                               f'<div class="cards">{"".join(cards)}</div><table id="run-facts">{dl}</table>')


def categories_section(cats: Sequence[dict[str, Any]], sev: Sequence[dict[str, Any]],
                       unreadable: dict[str, str] | None = None) -> str:
    if unreadable and "violations" in unreadable:
        return _section("categories", could_not_read(unreadable, "violations"))
    cat_table = table("by-category", [("category", "category", "code"), ("severity", "severity", "badge"),
                                      ("rows", "rows", "num"), ("new", "new", "num"),
                                      ("under_repair", "under repair", "num"), ("ledgers", "ledgers", "num"),
                                      ("published", "published", "num")],
                      cats, "category", zero=lambda r: r["rows"] == 0)
    sev_table = table("by-severity", [("severity", "severity", "badge"), ("rows", "rows", "num"),
                                      ("new", "new", "num")], sev, "severity", zero=lambda r: r["rows"] == 0)
    note = ('<p class="note">"new" excludes ledgers already carrying an under-replication marker (being '
            'repaired); the checker\'s counts and exit code use the same rule.</p>')
    plot = f'<div class="plot" id="plot-categories">{plots.category_bars(cats)}</div>'
    return _section("categories", plot + cat_table + sev_table + note)


def bookies_section(rows: Sequence[dict[str, Any]], unreadable: dict[str, str] | None = None) -> str:
    cols: list[Column] = [("bookie_id", "bookie", "code"), ("violations", "violations naming it", "num"),
                          ("ledgers_missing_entries", "ledgers missing entries on it", "num"),
                          ("categories", "categories", "text"), ("state", "state", "text"),
                          ("lifecycle", "lifecycle", "text"),
                          ("reachable", "reachable", "bool"), ("calls", "calls", "num"),
                          ("errors", "errors", "num"), ("ledgers_unverified", "ledgers unverified", "num"),
                          ("latency_ms_p95", "p95 ms", "num")]
    notes = "".join(could_not_read(unreadable or {}, t) for t in ("bookie_checks", "violations"))
    return _section("bookies", notes + table("by-bookie", cols, rows, "bookie_id"))


def managed_ledgers_section(rows: Sequence[dict[str, Any]], unreadable: dict[str, str] | None = None) -> str:
    if unreadable and "violations" in unreadable:
        return _section("managed-ledgers", could_not_read(unreadable, "violations"))
    if not rows:
        return _section("managed-ledgers", '<p class="note">No violation is on a ledger with Pulsar\'s '
                                           '<code>pulsar/managed-ledger</code> metadata.</p>')
    cols: list[Column] = [("managed_ledger", "managed ledger", "code"), ("worst_severity", "worst", "badge"),
                          ("rows", "violations", "num"), ("ledgers", "ledgers", "num"),
                          ("critical", "critical", "num"), ("categories", "categories", "text")]
    return _section("managed-ledgers", table("by-managed-ledger", cols, rows, "managed_ledger"))


def trend_section(points: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]],
                  unreadable: dict[str, str] | None = None) -> str:
    plot = f'<div class="plot" id="plot-trend">{plots.trend_lines(points)}</div>' if len(points) > 1 else (
        '<p class="note">One run so far: the trend chart appears from the second run on.</p>')
    rows = [{**p, "started": _when(p.get("started_at"))} for p in reversed(points)]
    run_cols: list[Column] = [("run_id", "run", "code"), ("started", "started", "text"),
                              ("total", "new", "num"), ("critical", "critical", "num"),
                              ("warning", "warning", "num"), ("info", "info", "num")]
    runs = table("runs", run_cols, rows, "run_id")
    hist_rows = [{"version": h["version"], "when": _when(_ms(h.get("timestamp"))),
                  "this": "this run" if h.get("this_run") else "",
                  "run_id": h.get("run_id") or "",
                  "operation": h.get("operation"),
                  "info": h.get("note") or ", ".join(f"{k.removeprefix('bkaudit.')}={v}"
                                                     for k, v in sorted(h["info"].items()))}
                 for h in history]
    hist_cols: list[Column] = [("version", "version", "num"), ("this", "", "text"),
                               ("run_id", "run", "code"), ("when", "committed", "text"),
                               ("operation", "operation", "text"), ("info", "what it did", "code")]
    hist = table("violations-history", hist_cols, hist_rows, "version")
    mine = next((h["version"] for h in history if h.get("this_run")), None)
    where = (f'This run\'s rows are version <strong id="this-run-version">{mine}</strong>; read it with '
             f'<code>tables.load(spark, warehouse, "violations", version={mine})</code>.'
             if mine is not None else "This run's commit is not in the table's history (vacuumed or "
             "written by an older bkaudit).")
    note = ('<p class="note">Delta history of the <code>violations</code> table. ' + where + '</p>')
    if unreadable and "violations" in unreadable:
        hist, note = could_not_read(unreadable, "violations"), ""
    return _section("trend", plot + runs + "<h3>Table versions</h3>" + hist + note)


def _ms(value: Any) -> Any:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC)
    return value


def worst_section(rows: Sequence[dict[str, Any]], unreadable: dict[str, str] | None = None) -> str:
    if unreadable and "violations" in unreadable:
        return _section("worst-ledgers", could_not_read(unreadable, "violations"))
    if not rows:
        return _section("worst-ledgers", '<p class="note">No ledger is missing entries.</p>')
    shown = []
    for r in rows:
        ranges = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in r["ranges"])
        if r["more_ranges"]:
            ranges += f" (+{r['more_ranges']} more ranges)"
        shown.append({**r, "ranges_text": ranges})
    cols: list[Column] = [("ledger_id", "ledger", "num"), ("category", "category", "code"),
                          ("severity", "severity", "badge"), ("min_replicas", "fewest copies", "num"),
                          ("missing_entries", "entries below WQ", "num"),
                          ("ranges_text", "entry ranges", "code"),
                          ("bookies", "bookies missing them", "code"),
                          ("managed_ledger", "managed ledger", "code"),
                          ("under_repair", "under repair", "bool")]
    return _section("worst-ledgers", table("worst", cols, shown, "ledger_id"))


def validation_section(rows: Sequence[dict[str, Any]], unreadable: dict[str, str] | None = None,
                       absent: set[str] | frozenset[str] = frozenset()) -> str:
    if unreadable and "validation_results" in unreadable:
        return _section("validation", could_not_read(unreadable, "validation_results"))
    if "validation_results" in absent:
        return _section("validation", '<p class="note">The warehouse has no <code>validation_results</code> '
                                      'table (the snapshot job writes it).</p>')
    if not rows:
        return _section("validation", '<p class="note">No validation results for this snapshot.</p>')
    shown = [{**r, "result": "ok" if r["success"] else r["severity"]} for r in rows]
    cols: list[Column] = [("expectation", "expectation", "code"), ("result", "result", "badge"),
                          ("table_name", "table", "code"), ("element_count", "rows", "num"),
                          ("unexpected_count", "unexpected", "num")]
    return _section("validation", table("expectations", cols, shown, "expectation"))


# -- page ---------------------------------------------------------------------------------------------------
def render(data: ReportData, *, now: datetime | None = None) -> str:
    """The report page for `data` as one HTML string."""
    rows = data.violations.to_pylist()
    cats = summary.by_category(rows)
    lost = data.unreadable
    body = "\n".join([
        summary_section(data, cats),
        categories_section(cats, summary.by_severity(rows), lost),
        bookies_section(summary.by_bookie(rows, data.bookie_checks, data.lifecycle), lost),
        managed_ledgers_section(summary.by_managed_ledger(rows), lost),
        trend_section(summary.trend(data.runs), data.history, lost),
        worst_section(summary.worst_ledgers(rows), lost),
        validation_section(data.validation, lost, data.absent),
    ])
    templates = resources.files("bkaudit.report") / "templates"
    page = string.Template((templates / "report.html").read_text(encoding="utf-8"))
    return page.substitute(
        title=_esc(f"bkaudit audit report — run {data.run_id}"),
        subtitle=_esc(f"snapshot {data.run.get('snapshot_id')} · {_when(data.run.get('finished_at'))}"),
        nav=" ".join(f'<a href="#{sid}">{_esc(title)}</a>' for sid, title in SECTIONS),
        css=(templates / "report.css").read_text(encoding="utf-8"),
        body=body,
        generated=_esc(_when(now or datetime.now(UTC))),
        version=_esc(__version__),
        warehouse=_esc(data.warehouse),
    )


def write_report(warehouse: Warehouse | str, out_dir: str | Path, run_id: str | None = None) -> Path:
    """Render the report of `run_id` (default: the latest succeeded run) into `out_dir`; see `write`."""
    return write(load(warehouse, run_id), out_dir)


def write(data: ReportData, out_dir: str | Path) -> Path:
    """Write `report-<run_id>.html` and refresh `index.html` (the latest written); returns the former.

    Both go to a temporary name first, so a reader (a web server on the directory) never sees half a page.
    """
    page = render(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"report-{data.run_id}.html"
    for path in (target, out / "index.html"):
        tmp = path.with_suffix(".html.tmp")
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(path)
    return target
