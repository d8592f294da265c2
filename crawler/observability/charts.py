"""The fleet page's charts: counts per minute as inline SVG bars, with a value axis (a scale of
round numbers, each a labelled grid line) and a time axis (UTC clock times of whole minutes).
No script: every bar's title names its minute and count, which a browser shows on hover."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT = 600, 170
# Room for the value labels (left), the time labels (below) and the top tick's label.
LEFT, RIGHT, TOP, BOTTOM = 52, 12, 10, 34
MOST_TICKS = 4  # value ticks above 0
BAR = "#3b7dd8"
INK = "#555"
GRID = "#e4e4e4"
AXIS = "#888"


def value_ticks(peak: float) -> list[int]:
    """Round values from 0 up to at least ``peak``, at most MOST_TICKS steps of 1, 2 or 5 times
    a power of ten (counts: never a fraction)."""
    if peak <= 0:
        return [0, 1]
    power = 10 ** max(0, math.floor(math.log10(peak / MOST_TICKS)))
    step = next(
        factor * power
        for factor in (1, 2, 5, 10)
        if math.ceil(peak / (factor * power)) <= MOST_TICKS
    )
    return [step * index for index in range(math.ceil(peak / step) + 1)]


def label_every(minutes: int) -> int:
    """Minutes between two time labels for a chart of ``minutes`` minutes: about six labels."""
    return next((every for every in (1, 2, 5, 10, 15, 30) if minutes <= every * 7), 60)


def short_number(value: int) -> str:
    """``950``, ``12k``, ``1.5M``: a value label that fits left of the chart."""
    for size, suffix in ((1_000_000, "M"), (1_000, "k")):
        if value >= size:
            return f"{value / size:.{0 if value % size == 0 or value >= 10 * size else 1}f}{suffix}"
    return str(value)


def bar_chart(rows: Sequence[Mapping[str, Any]], field: str, data: str) -> str:
    """A figure of ``field`` per minute over ``rows`` (each with ``minute``, a Unix time, and
    the count), oldest left; its caption gives the total (``data-k`` ``data``) and the peak."""
    counts = [int(row[field]) for row in rows]
    peak = max(counts, default=0)
    ticks = value_ticks(peak)
    inner_width, inner_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bottom = TOP + inner_height
    step = inner_width / max(1, len(rows))

    def y(value: float) -> float:
        return bottom - inner_height * value / ticks[-1]

    parts = []
    for tick in ticks:
        parts.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            f'stroke="{GRID if tick else AXIS}"/>'
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="{INK}">{short_number(tick)}</text>'
        )
    every = label_every(len(rows))
    for index, (row, value) in enumerate(zip(rows, counts, strict=True)):
        left = LEFT + index * step
        minute = time.strftime("%H:%M", time.gmtime(row["minute"]))
        if value:
            parts.append(
                f'<rect x="{left + 0.5:.1f}" y="{y(value):.1f}" width="{max(1.0, step - 1):.1f}" '
                f'height="{bottom - y(value):.1f}" fill="{BAR}">'
                f"<title>{minute} UTC: {value:,} {escape(field)}</title></rect>"
            )
        if int(row["minute"]) // 60 % every == 0:
            middle = left + step / 2
            parts.append(
                f'<line x1="{middle:.1f}" x2="{middle:.1f}" y1="{bottom}" y2="{bottom + 4}" '
                f'stroke="{AXIS}"/><text x="{middle:.1f}" y="{bottom + 16}" '
                f'text-anchor="middle" font-size="11" fill="{INK}">{minute}</text>'
            )
    parts.append(
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{bottom}" stroke="{AXIS}"/>'
        f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 3}" text-anchor="end" font-size="11" '
        f'fill="{INK}">UTC, one bar a minute</text>'
        f'<text x="4" y="{HEIGHT - 3}" font-size="11" fill="{INK}">{escape(field)}/min</text>'
    )
    return (
        f"<figure><figcaption>{escape(field)} per minute, last {len(rows)} min "
        f'(total <b data-k="{data}">{sum(counts):,}</b>, peak {peak:,})</figcaption>'
        f'<svg role="img" aria-label="{escape(field)} per minute" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}">{"".join(parts)}</svg></figure>'
    )
