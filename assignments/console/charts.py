"""Server-side SVG charts for the staff console: no JavaScript, no network, readable in print.

Each series differs from the others by line pattern and marker shape as well as
by colour, and is named at its line's end and in the legend, so the chart reads
without colour vision (or in greyscale). Numbers stay available as text in the
<title> tooltips and in the table the admin renders beside the chart. A layer's
slot bar tells its owners apart the same way: by name inside each run of slots,
by lane and outline (now, before, drafts) as well as by colour.
"""

from __future__ import annotations

import itertools
import math
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from assignments.console.population_text import percent_text, slots_text
from assignments.console.slotmaps import Owner, SlotMap
from assignments.models import Experiment
from assignments.slots import SLOTS, overlap

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


# The slot bar: one lane for now, lanes for the experiments done and the drafts, each of those
# packed so that experiments whose slots do not overlap share a lane.
BAR_LEFT, BAR_RIGHT, LANE_HEIGHT, LANE_GAP = 64, 28, 24, 6
# Okabe-Ito colours whose fill needs white text rather than black.
DARK_COLOURS = {"#0072B2", "#D55E00", "#009E73", "#CC79A7"}
SLOT_TICKS = (0, 2500, 5000, 7500, 10000)
# An average character of the 11px labels, to tell whether a label fits its run of slots.
CHARACTER_WIDTH = 6.5
LEGEND_COLUMN, LEGEND_COLUMNS, LEGEND_ROW = 185, 4, 18


def _lanes(owners: tuple[Owner, ...]) -> list[list[Owner]]:
    """The owners packed into lanes, in order: each into the first lane where it overlaps no one."""
    lanes: list[list[Owner]] = []
    for owner in owners:
        lane = next((lane for lane in lanes if all(overlap(o.ranges, owner.ranges) is None for o in lane)), None)
        if lane is None:
            lanes.append([owner])
        else:
            lane.append(owner)
    return lanes


def slots_bar(slot_map: SlotMap, *, title: str) -> SafeString:
    """A layer's 10,000 slots as horizontal bars: now (each active experiment's ranges, the free ones
    hatched), then the experiments done that owned slots before (pale), then the drafts (dashed outlines),
    with a legend. Every run of slots names its owner inside when it fits, and in its tooltip."""
    plot_width = WIDTH - BAR_LEFT - BAR_RIGHT
    colours = {owner.pk: style[0] for owner, style in zip(slot_map.owners, _styles(), strict=False)}

    def x(number: int) -> float:
        return BAR_LEFT + plot_width * number / SLOTS

    def box(lane: int, start: int, end: int, label: str, tooltip: str, look: SafeString, text_colour: str):
        top = TOP + lane * (LANE_HEIGHT + LANE_GAP)
        width = x(end) - x(start)
        text = ""
        if len(label) * CHARACTER_WIDTH + 6 <= width:
            text = format_html(
                '<text x="{}" y="{}" text-anchor="middle" font-size="11" fill="{}">{}</text>',
                _n(x(start) + width / 2),
                _n(top + LANE_HEIGHT / 2 + 4),
                text_colour,
                label,
            )
        return format_html(
            '<g><title>{}</title><rect x="{}" y="{}" width="{}" height="{}" {}/>{}</g>',
            tooltip,
            _n(x(start)),
            top,
            _n(width),
            LANE_HEIGHT,
            look,
            text,
        )

    def owned(owner: Owner, start: int, end: int) -> str:
        return f"{owner.key} ({owner.status}): {slots_text([(start, end)])}, {percent_text((end - start) / SLOTS)}"

    boxes, lane_names = [], [(0, "Now")]
    # The runs of the table differ also by who owned them before; now, only the owner counts.
    for owner, group in itertools.groupby(slot_map.segments, key=lambda segment: segment.owner):
        runs = list(group)
        start, end = runs[0].start, runs[-1].end
        if owner is None:
            tooltip = f"free: {slots_text([(start, end)])}, {percent_text((end - start) / SLOTS)}"
            boxes.append(box(0, start, end, "free", tooltip, _look(None, ""), "#333"))
        else:
            colour = colours[owner.pk]
            text_colour = "#fff" if colour in DARK_COLOURS else "#000"
            boxes.append(box(0, start, end, owner.key, owned(owner, start, end), _look(owner, colour), text_colour))
    lane = 1
    for name, owners in (("Before", slot_map.done), ("Drafts", slot_map.drafts)):
        packed = _lanes(owners)
        if packed:
            lane_names.append((lane, name))
        for members in packed:
            for owner in members:
                look = _look(owner, colours[owner.pk])
                for start, end in owner.ranges:
                    boxes.append(box(lane, start, end, owner.key, owned(owner, start, end), look, "#000"))
            lane += 1
    axis_y = TOP + lane * (LANE_HEIGHT + LANE_GAP)
    names = format_html_join(
        "",
        '<text x="{}" y="{}" text-anchor="end" font-size="12">{}</text>',
        (
            (BAR_LEFT - 8, _n(TOP + index * (LANE_HEIGHT + LANE_GAP) + LANE_HEIGHT / 2 + 4), name)
            for index, name in lane_names
        ),
    )
    ticks = format_html_join(
        "",
        '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#333"/><text x="{}" y="{}" text-anchor="middle" '
        'font-size="11">{}</text>',
        ((_n(x(t)), _n(x(t)), axis_y - 2, axis_y + 3, _n(x(t)), axis_y + 16, f"{t:,}") for t in SLOT_TICKS),
    )
    legend_top = axis_y + 34
    items = [("free", None), *((f"{owner.key} ({owner.status})", owner) for owner in slot_map.owners)]
    legend = format_html_join(
        "",
        '<g transform="translate({},{})">{}<text x="22" y="4" font-size="12">{}</text></g>',
        (
            (
                BAR_LEFT + LEGEND_COLUMN * (index % LEGEND_COLUMNS),
                legend_top + LEGEND_ROW * (index // LEGEND_COLUMNS),
                _swatch(owner, colours),
                text,
            )
            for index, (text, owner) in enumerate(items)
        ),
    )
    height = legend_top + LEGEND_ROW * math.ceil(len(items) / LEGEND_COLUMNS)
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{}" height="{}" viewBox="0 0 {} {}" '
        'font-family="sans-serif"><title>{}</title><defs><pattern id="slots-free" width="6" height="6" '
        'patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#bbb" stroke-width="2"/></pattern></defs>{}{}{}{}</svg>',
        WIDTH,
        height,
        WIDTH,
        height,
        title,
        names,
        format_html_join("", "{}", ((b,) for b in boxes)),
        ticks,
        legend,
    )


def _look(owner: Owner | None, colour: str) -> SafeString:
    """How a run of slots is drawn: an active owner's filled, a done one's pale, a draft's outlined with
    dashes, free slots (owner None) hatched."""
    if owner is None:
        return mark_safe('fill="url(#slots-free)" stroke="#888"')
    if owner.status == Experiment.Status.ACTIVE:
        return format_html('fill="{}" stroke="#fff"', colour)
    if owner.status == Experiment.Status.DRAFT:
        return format_html('fill="#fff" stroke="{}" stroke-width="2" stroke-dasharray="4 3"', colour)
    return format_html('fill="{}" fill-opacity="0.3" stroke="{}"', colour, colour)


def _swatch(owner: Owner | None, colours: dict[int, str]) -> SafeString:
    """The legend's sample of how an owner (None: free slots) is drawn."""
    look = _look(owner, "" if owner is None else colours[owner.pk])
    return format_html('<rect x="0" y="-6" width="16" height="12" {}/>', look)
