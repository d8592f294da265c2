"""The fleet page (docs/observability.md), rendered on the server from
:func:`crawler.observability.report.fleet_report` with inline SVG and CSS: no script, no
external URL, nothing to build; it reloads itself. Served by :mod:`.page_server`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from html import escape
from typing import Any

from crawler.frontier.pause import describe_json
from crawler.frontier.queue import SIZE_NAMES
from crawler.observability.rates import format_duration
from crawler.observability.report import figure_text, revisit_line

REFRESH_SECONDS = 10
HISTORY_MINUTES = 60
# A table shows its first rows (the most banned domains, the soonest-ending cool-downs) only.
ROWS_SHOWN = 50
CHART = (600, 110)  # width, height of a per-minute chart
STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em}
.tiles{display:flex;flex-wrap:wrap;gap:.5em}
.tile{background:#fff;border:1px solid #ddd;border-radius:4px;padding:.4em .7em;min-width:6em}
.tile b{display:block;font-size:1.3em}
.charts{display:flex;flex-wrap:wrap;gap:1.5em}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.2em .5em;
text-align:left}td.n{text-align:right}.none{color:#888}svg{background:#fff;border:1px solid #ddd}
.error{color:#a00}.paused{background:#fff3cd;border:1px solid #e0c36a;padding:.4em .7em}
"""

Report = Mapping[str, Any]


def render_page(report: Report) -> str:
    """The whole page for ``report`` (see ``fleet_report``)."""
    now = report["time"]
    clock = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    body = [f"<h1>Fleet <small>Redis {escape(report['redis'])} at {clock}</small></h1>"]
    body.extend(_spider(status, now) for status in report["spiders"].values())
    return _document("".join(body))


def render_error(message: str) -> str:
    """The page while the report cannot be read (Redis away, say); it keeps refreshing."""
    return _document(f'<h1>Fleet</h1><p class="error">{escape(message)}</p>')


def _document(body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        '<meta name="viewport" content="width=device-width">'
        f"<title>Fleet</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _spider(status: Report, now: float) -> str:
    name, counters, rates = status["spider"], status["counters"], status["rates"]
    key = _keyer(name)
    sizes = {label: status["frontier"].get(label, 0) for label in SIZE_NAMES}
    seen = status["seen"]["count"]
    # A Bloom filter's count is an estimate, and the tile says so (the text view prints ~).
    approx = " (approx.)" if status["seen"].get("approximate") else ""
    tiles = [(label, key(f"frontier.{label}"), value) for label, value in sizes.items()]
    tiles += [
        (f"seen{approx}", key("seen"), "-" if seen is None else seen),
        ("pages/min", key("pages_per_min"), rates["workers_pages_per_min"]),
        ("items/min", key("items_per_min"), rates["workers_items_per_min"]),
        ("ETA", key("eta"), format_duration(status["eta_seconds"])),
        ("live workers", key("workers"), len(status["workers"])),
        ("pages", key("pages"), counters["responses"]),
        ("items", key("items"), counters["items"]),
        ("bans", key("bans"), counters["bans"]),
        ("dead letters", key("dead_letters"), counters["dead_letters"]),
    ]
    history = rates.get("history") or rates["per_minute"]
    finish = status.get("finish_reason")
    return "".join(
        [
            f'<section id="{escape(name)}"><h2>{escape(name)}'
            + (" <small>(paused)</small>" if status.get("paused") else "")
            + (f" <small>(last finish: {escape(str(finish))})</small>" if finish else "")
            + "</h2>",
            _paused(status.get("paused"), key("paused")),
            '<div class="tiles">',
            *(_tile(label, data, value) for label, data, value in tiles),
            '</div><div class="charts">',
            _chart(history, "pages", key("history.pages")),
            _chart(history, "items", key("history.items")),
            "</div>",
            _figures(status),
            _bans(counters, key),
            _cooldowns(status["cooldowns"], now),
            _dead_letters(counters, status["dead_letters"]),
            _workers(status["workers"], now),
            "</section>",
        ]
    )


def _paused(pause: Mapping[str, Any] | None, data: str) -> str:
    """The crawl's pause, above its figures: since when, by whom and why."""
    if not pause:
        return ""
    return f'<p class="paused" data-k="{data}">{escape(describe_json(pause))}</p>'


def _figures(status: Report) -> str:
    """Revisits waiting and the spider's own figures (its ``fleet_report``), as the text view."""
    rows = [
        [_cell("revisits"), _cell(revisit_line(status.get("revisits") or {}).split(None, 1)[1])]
    ]
    for name, value in (status.get("report") or {}).items():
        rows.append([_cell(name), _cell(figure_text(value))])
    return _table("Spider figures", ("figure", "value"), rows)


def _keyer(spider: str) -> Callable[[str], str]:
    return lambda name: escape(f"{spider}.{name}")


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return escape(str(value))
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else f"{value:,.1f}"


def _tile(label: str, data: str, value: Any) -> str:
    return f'<div class="tile">{escape(label)}<b data-k="{data}">{_number(value)}</b></div>'


def _chart(rows: list[Mapping[str, Any]], field: str, data: str) -> str:
    """Bars of ``field`` per minute, oldest left; each bar's title names its minute and count."""
    width, height = CHART
    top = max([int(row[field]) for row in rows] + [1])
    step = width / max(1, len(rows))
    bars = []
    for index, row in enumerate(rows):
        value = int(row[field])
        tall = (height - 20) * value / top
        minute = time.strftime("%H:%M", time.gmtime(row["minute"]))
        bars.append(
            f'<rect x="{index * step + 1:.1f}" y="{height - tall:.1f}" '
            f'width="{max(1.0, step - 2):.1f}" height="{tall:.1f}" fill="#3b7dd8">'
            f"<title>{minute} UTC: {value:,} {field}</title></rect>"
        )
    total = sum(int(row[field]) for row in rows)
    return (
        f"<figure><figcaption>{escape(field)} per minute, last {len(rows)} min "
        f'(total <b data-k="{data}">{total:,}</b>, peak {top:,})</figcaption>'
        f'<svg role="img" aria-label="{escape(field)} per minute" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(bars)}</svg></figure>'
    )


def _table(
    title: str, headers: Iterable[str], rows: list[list[str]], total: int | None = None
) -> str:
    """A table of the first ``ROWS_SHOWN`` rows, saying how many of ``total`` it leaves out."""
    if not rows:
        return f'<h3>{escape(title)}</h3><p class="none">none</p>'
    head = "".join(f"<th>{escape(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows[:ROWS_SHOWN])
    more = (len(rows) if total is None else total) - min(len(rows), ROWS_SHOWN)
    tail = f'<p class="none">and {_number(more)} more</p>' if more > 0 else ""
    return f"<h3>{escape(title)}</h3><table><tr>{head}</tr>{body}</table>{tail}"


def _cell(value: Any) -> str:
    return f"<td>{escape(str(value))}</td>"


def _count(value: Any, data: str = "") -> str:
    attribute = f' data-k="{data}"' if data else ""
    return f'<td class="n"{attribute}>{_number(value)}</td>'


def _ranked(values: Mapping[str, int]) -> list[tuple[str, int]]:
    return sorted(values.items(), key=lambda pair: (-pair[1], pair[0]))


def _bans(counters: Report, key: Callable[[str], str]) -> str:
    by_rule = [
        [_cell(rule), _count(count, key(f"bans.rule.{rule}"))]
        for rule, count in _ranked(counters["bans_by_rule"])
    ]
    domains = counters["bans_by_domain"]
    by_domain = [
        [_cell(domain), _count(count, key(f"bans.domain.{domain}"))]
        for domain, count in _ranked(domains)[:ROWS_SHOWN]
    ]
    return _table("Bans by rule", ("rule", "bans"), by_rule) + _table(
        f"Bans by domain ({len(domains)})", ("domain", "bans"), by_domain, len(domains)
    )


def _cooldowns(cooldowns: list[Mapping[str, Any]], now: float) -> str:
    rows = [
        [
            _cell(cooldown["domain"]),
            _cell(cooldown["identity"] or "every identity"),
            _cell(time.strftime("%H:%M:%S UTC", time.gmtime(cooldown["until"]))),
            _cell(f"in {format_duration(max(0.0, cooldown['until'] - now))}"),
            _cell(cooldown["why"] or "-"),
        ]
        for cooldown in cooldowns[:ROWS_SHOWN]
    ]
    headers = ("domain", "identity", "until", "ends", "why")
    return _table(f"Active cool-downs ({len(cooldowns)})", headers, rows, len(cooldowns))


def _dead_letters(counters: Report, letters: list[Mapping[str, Any]]) -> str:
    reasons = [
        [_cell(reason), _count(count)]
        for reason, count in _ranked(counters["dead_letters_by_reason"])
    ]
    newest = []
    for letter in letters:
        request, failure = letter.get("request") or {}, letter.get("failure") or {}
        newest.append(
            [
                _cell(time.strftime("%H:%M:%S", time.gmtime(failure.get("time", 0)))),
                _cell(failure.get("reason", "")),
                _count(failure.get("attempts", 0)),
                _cell(request.get("url", "")),
                _cell(str(failure.get("error", ""))[:200]),
            ]
        )
    return _table("Dead letters by reason", ("reason", "dead letters"), reasons) + _table(
        f"Newest dead letters ({len(newest)} shown)",
        ("when (UTC)", "reason", "attempts", "url", "error"),
        newest,
    )


def _workers(workers: list[Mapping[str, Any]], now: float) -> str:
    rows = [
        [
            _cell(worker.get("worker", "?")),
            _cell(f"up {format_duration(now - worker.get('started', now))}"),
            _count(worker.get("pages_per_min", 0)),
            _count(worker.get("items_per_min", 0)),
            _count(worker.get("pages", 0)),
            _cell(f"{format_duration(max(0.0, now - worker.get('beat', now)))} ago"),
            _cell(worker.get("metrics_port") or "-"),
        ]
        for worker in workers
    ]
    return _table(
        f"Live workers ({len(rows)})",
        ("worker", "up", "pages/min", "items/min", "pages", "last beat", "metrics port"),
        rows,
    )
