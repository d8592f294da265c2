"""The fleet page (docs/observability.md), rendered on the server from
:func:`crawler.observability.report.fleet_report` with inline SVG and CSS: no script, no
external URL, nothing to build; it reloads itself. Served by :mod:`.page_server`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from html import escape
from typing import Any

from crawler.control.pause import describe_json
from crawler.frontier.queue import SIZE_NAMES, WORK_LEFT
from crawler.observability.charts import bar_chart
from crawler.observability.rates import format_duration
from crawler.observability.report_text import (
    failure_text,
    figure_text,
    job_state,
    revisit_line,
    unreadable_text,
)
from crawler.observability.spills import spills_texts

REFRESH_SECONDS = 10
HISTORY_MINUTES = 60
# A table shows its first rows (the most banned domains, the first blocked hosts) only.
ROWS_SHOWN = 50
# A spider's state, in the order the page shows them; "idle" ones are folded into one line.
STATES = ("unreadable", "paused", "crawling", "waiting", "stopped")
# The circuit breaker's marks: a cool-down of a pseudo-identity (crawler/bans/breaker.py).
MARKS = {"!host_unreachable": "unreachable", "!robots_unavailable": "robots.txt unavailable"}
STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1em;margin:1em 0 .3em}
.tiles{display:flex;flex-wrap:wrap;gap:.5em}
.tile{background:#fff;border:1px solid #ddd;border-radius:4px;padding:.4em .7em;min-width:6em}
.tile b{display:block;font-size:1.3em}
.charts{display:flex;flex-wrap:wrap;gap:1.5em}figure{margin:.8em 0}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.2em .5em;
text-align:left}td.n{text-align:right}.none{color:#888}svg{background:#fff;border:1px solid #ddd}
.error{color:#a00}.paused{background:#fff3cd;border:1px solid #e0c36a;padding:.4em .7em}
.state{font-size:.8em;font-weight:normal;border-radius:3px;padding:.1em .4em;margin-left:.5em}
.state.crawling{background:#d7f0dc}.state.unreadable{background:#f5c6c6}.state.paused{background:#ffe08a}
.state.waiting,.state.stopped{background:#e4e4e4}
.mark{color:#a00;font-weight:bold}.warn{color:#a00}
.idle{color:#555;border-top:1px solid #ccc;padding-top:.6em;margin-top:2em}
"""

Report = Mapping[str, Any]


def render_page(report: Report) -> str:
    """The whole page for ``report`` (see ``fleet_report``): unreadable spiders (keys of the
    wrong type), paused and crawling ones first,
    then those with work but no live worker and the stopped ones; idle ones on one line."""
    now = report["time"]
    clock = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    body = [f"<h1>Fleet <small>Redis {escape(report['redis'])} at {clock}</small></h1>"]
    spiders = sorted(
        ((spider_state(status), name, status) for name, status in report["spiders"].items()),
        key=lambda shown: (STATES.index(shown[0]) if shown[0] in STATES else len(STATES), shown[1]),
    )
    body.extend(
        _unreadable(status) if state == "unreadable" else _spider(status, state, now)
        for state, _, status in spiders
        if state != "idle"
    )
    body.append(_idle([status for state, _, status in spiders if state == "idle"]))
    return _document("".join(body))


def spider_state(status: Report) -> str:
    """``unreadable`` (keys of the wrong type); ``paused``; ``crawling`` (live workers);
    ``waiting`` (work in the frontier, revisits due or spilled items, no live worker);
    ``stopped`` (dead letters or blocked hosts left); else ``idle``."""
    if status.get("error"):
        return "unreadable"
    frontier = status["frontier"]
    if status.get("paused"):
        return "paused"
    if status["workers"]:
        return "crawling"
    due = (status.get("revisits") or {}).get("due")
    if any(frontier.get(size, 0) for size in WORK_LEFT) or due or status.get("spilled"):
        return "waiting"
    if frontier.get("dead", 0) or status["cooldowns"]:
        return "stopped"
    return "idle"


def _unreadable(status: Report) -> str:
    """A spider whose keys hold the wrong type: which, in place of its figures."""
    name = escape(status["spider"])
    return (
        f'<section id="{name}"><h2>{name} <span class="state unreadable">unreadable</span></h2>'
        f'<p class="error" data-k="{name}.error">{escape(unreadable_text(status))}</p></section>'
    )


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


def _state_label(state: str, status: Report) -> str:
    workers = len(status["workers"])
    text = {
        "paused": "paused",
        "crawling": f"crawling, {workers} live worker{'s' if workers != 1 else ''}",
        "waiting": "work waiting, no live worker",
        "stopped": "stopped: dead letters or blocked hosts left",
    }[state]
    return f'<span class="state {state}">{escape(text)}</span>'


def _spider(status: Report, state: str, now: float) -> str:
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
    finish, spilled = status.get("finish_reason"), status.get("spilled") or []
    return "".join(
        [
            f'<section id="{escape(name)}"><h2>{escape(name)} {_state_label(state, status)}'
            + (f" <small>(last finish: {escape(str(finish))})</small>" if finish else "")
            + "</h2>",
            _paused(name, status.get("paused"), key("paused")),
            _failures(status.get("failures"), key("failures")),
            *(f'<p class="paused">{escape(text)}.</p>' for text in spills_texts(spilled)),
            '<div class="tiles">',
            *(_tile(label, data, value) for label, data, value in tiles),
            "</div>",
            _blocked(name, status["cooldowns"], now),
            _jobs(status.get("jobs") or []),
            '<div class="charts">',
            bar_chart(history, "pages", key("history.pages")),
            bar_chart(history, "items", key("history.items")),
            "</div>",
            _dead_letters(counters, status["dead_letters"]),
            _bans(counters, key),
            _figures(status),
            _workers(status["workers"], now),
            "</section>",
        ]
    )


def _idle(statuses: list[Report]) -> str:
    """One line naming the spiders with no live worker and nothing to do or look at."""
    if not statuses:
        return ""
    names = []
    for status in statuses:
        counters, finish = status["counters"], status.get("finish_reason")
        if not counters.get("responses") and not counters.get("requests") and not finish:
            note = "never ran"
        else:
            note = f"{_number(counters.get('responses', 0))} pages" + (
                f", last finish: {finish}" if finish else ""
            )
        names.append(f"<b>{escape(status['spider'])}</b> ({escape(note)})")
    return (
        f'<p class="idle" id="idle">Idle, no live worker and nothing queued ({len(names)}): '
        + ", ".join(names)
        + "</p>"
    )


def _paused(spider: str, pause: Mapping[str, Any] | None, data: str) -> str:
    """The crawl's pause, above its figures: since when, by whom and why, and what lifts it."""
    if not pause:
        return ""
    text = describe_json(pause)
    why = (
        " The fleet's answers failed past the failure threshold: look at the dead letters and "
        "the sites first."
        if pause.get("by") == "failure threshold"
        else ""
    )
    return (
        f'<p class="paused"><b data-k="{data}">{escape(text[:1].upper() + text[1:])}</b>.{why} '
        f"No worker takes a new request until <code>scrapy frontier {escape(spider)} resume"
        "</code>.</p>"
    )


def _jobs(jobs: list[Mapping[str, Any]]) -> str:
    """The crawl jobs, the most recently active first: state and what workers counted."""
    if not jobs:
        return ""
    names = ("job", "state", "pages", "items", "errors")
    shown = [{**job, "state": job_state(job)} for job in jobs]
    return _table("Jobs", names, [[_cell(job[name]) for name in names] for job in shown])


def _failures(failures: Mapping[str, Any] | None, data: str) -> str:
    """The failure threshold's state (crawler/bans/failures.py), in red past half its limit."""
    if not failures:
        return ""
    ratio, window, failed = failures["ratio"], failures["window"], failures["failed"]
    warn = ' class="warn"' if ratio > 0 and failed > ratio * window / 2 else ""
    text = escape(failure_text(failures))
    return f'<p{warn}>Failure threshold: <span data-k="{data}">{text}</span></p>'


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


def _table(
    title: str, headers: Iterable[str], rows: list[list[str]], total: int | None = None
) -> str:
    """A table of the first ``ROWS_SHOWN`` rows, saying how many of ``total`` it leaves out."""
    if not rows:
        return f'<h3>{escape(title)}: <span class="none">none</span></h3>'
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


def _blocked(spider: str, cooldowns: list[Mapping[str, Any]], now: float) -> str:
    """Blocked hosts and cool-downs, the circuit breaker's marks (whose requests are
    dead-lettered) first, then the soonest ending."""
    ordered = sorted(cooldowns, key=lambda cooldown: cooldown["identity"] not in MARKS)
    rows = []
    for cooldown in ordered[:ROWS_SHOWN]:
        identity = cooldown["identity"]
        mark = MARKS.get(identity or "")
        rows.append(
            [
                _cell(cooldown["domain"]),
                f'<td class="mark">{escape(mark)}</td>'
                if mark
                else _cell(f"for {identity}" if identity else "whole host"),
                _cell(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(cooldown["until"]))),
                _cell(f"in {format_duration(max(0.0, cooldown['until'] - now))}"),
                _cell(cooldown["why"] or "-"),
            ]
        )
    headers = ("host", "blocked", "until", "ends", "why")
    title = f"Blocked hosts and cool-downs ({len(cooldowns)})"
    shown = _table(title, headers, rows, len(cooldowns))
    if any(cooldown["identity"] in MARKS for cooldown in cooldowns):
        command = escape(f"scrapy frontier {spider}")
        shown += (
            '<p class="none">A marked host\'s requests are dead-lettered with the mark as their '
            f"reason: <code>{command} unban HOST</code> lifts its block and marks, "
            f"<code>{command} requeue</code> brings its dead letters back.</p>"
        )
    return shown


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
