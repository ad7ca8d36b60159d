"""Server-side SVG charts for the staff console: no JavaScript, no network, readable in print.

Each series differs from the others by line pattern and marker shape as well as
by colour, and is named at its line's end and in the legend, so the chart reads
without colour vision (or in greyscale). Numbers stay available as text in the
<title> tooltips and in the table the admin renders beside the chart.
"""

from __future__ import annotations

import itertools
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 56, 110, 16, 34
# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies),
# each paired with its own dash pattern and marker.
STYLES = [
    ("#0072B2", "", "circle"),
    ("#D55E00", "8 4", "square"),
    ("#009E73", "2 3", "triangle"),
    ("#CC79A7", "10 3 2 3", "diamond"),
    ("#E69F00", "4 4", "circle"),
    ("#56B4E9", "1 2", "square"),
]
# Past this many days the markers would merge into a band; the lines alone stay readable.
MARKERS_UP_TO_DAYS = 62


def _n(value: float) -> str:
    """A coordinate for SVG; format_html escapes its arguments into strings, so numbers are formatted first."""
    return f"{value:.1f}"


def _marker(shape: str, x: float, y: float, colour: str) -> SafeString:
    if shape == "circle":
        return format_html('<circle cx="{}" cy="{}" r="3.5" fill="{}"/>', _n(x), _n(y), colour)
    if shape == "square":
        return format_html('<rect x="{}" y="{}" width="7" height="7" fill="{}"/>', _n(x - 3.5), _n(y - 3.5), colour)
    if shape == "triangle":
        return format_html('<path d="M{} {}l4 7h-8z" fill="{}"/>', _n(x), _n(y - 4), colour)
    return format_html('<path d="M{} {}l4 4-4 4-4-4z" fill="{}"/>', _n(x), _n(y - 4), colour)


def _styles():
    """The series' styles in order, starting again after the last."""
    return itertools.cycle(STYLES)


def _nice_top(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^n that is at least value, for round axis labels."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if step * top >= value:
                return step * top
        top *= 10


def daily_chart(
    days: list[date], series: dict[str, list[int]], *, title: str, last_day_partial: bool = False
) -> SafeString:
    """A line chart of one count per day for each named series (an empty-state text when there are no days).

    `last_day_partial` shades the last day and says it is still running, so today's
    low count does not read as a drop.
    """
    if not days:
        return format_html('<p class="chart-empty">{}: no assignments yet.</p>', title)
    plot_width, plot_height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    top = _nice_top(max((count for counts in series.values() for count in counts), default=0) or 1)

    def x(index: int) -> float:
        return LEFT + (plot_width * index / (len(days) - 1) if len(days) > 1 else plot_width / 2)

    def y(count: int) -> float:
        return TOP + plot_height * (1 - count / top)

    grid = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/>'
        '<text x="{}" y="{}" text-anchor="end" font-size="11">{}</text>',
        ((LEFT, LEFT + plot_width, _n(y(v)), _n(y(v)), LEFT - 6, _n(y(v) + 4), f"{v:,}") for v in (0, top // 2, top)),
    )
    label_every = max(1, len(days) // 8)
    ticks = format_html_join(
        "",
        '<text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text>',
        ((_n(x(i)), HEIGHT - BOTTOM + 16, day.strftime("%b %d")) for i, day in enumerate(days) if i % label_every == 0),
    )
    partial = ""
    if last_day_partial:
        start = (x(len(days) - 2) + x(len(days) - 1)) / 2 if len(days) > 1 else LEFT
        partial = format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" fill="#eee"/>'
            '<text x="{}" y="{}" text-anchor="end" font-size="11" font-style="italic">today, so far</text>',
            _n(start),
            TOP,
            _n(LEFT + plot_width - start),
            plot_height,
            LEFT + plot_width,
            TOP + 10,
        )
    lines = []
    for (name, counts), (colour, dash, shape) in zip(series.items(), _styles(), strict=False):
        points = " ".join(f"{x(i):.1f},{y(count):.1f}" for i, count in enumerate(counts))
        markers = (
            format_html_join(
                "",
                "<g><title>{}</title>{}</g>",
                (
                    (f"{name}, {days[i].isoformat()}: {count:,}", _marker(shape, x(i), y(count), colour))
                    for i, count in enumerate(counts)
                ),
            )
            if len(days) <= MARKERS_UP_TO_DAYS
            else ""
        )
        lines.append(
            format_html(
                '<g><polyline points="{}" fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}"/>{}'
                '<text x="{}" y="{}" font-size="12">{}</text></g>',
                points,
                colour,
                dash,
                markers,
                _n(x(len(counts) - 1) + 8),
                _n(y(counts[-1]) + 4),
                name,
            )
        )
    legend = format_html_join(
        "",
        '<g transform="translate({},{})"><line x1="0" x2="28" y1="0" y2="0" stroke="{}" stroke-width="2" '
        'stroke-dasharray="{}"/>{}<text x="34" y="4" font-size="12">{}</text></g>',
        (
            (LEFT + 140 * index, HEIGHT + 4, colour, dash, _marker(shape, 14, 0, colour), name)
            for index, (name, (colour, dash, shape)) in enumerate(zip(series, _styles(), strict=False))
        ),
    )
    axes = format_html(
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#333"/>',
        LEFT,
        LEFT + plot_width,
        TOP + plot_height,
        TOP + plot_height,
    )
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{}" height="{}" viewBox="0 0 {} {}" '
        'font-family="sans-serif"><title>{}</title>{}{}{}{}{}{}</svg>',
        WIDTH,
        HEIGHT + 12,
        WIDTH,
        HEIGHT + 12,
        title,
        partial,
        grid,
        axes,
        ticks,
        format_html_join("", "{}", ((line,) for line in lines)),
        legend,
    )
