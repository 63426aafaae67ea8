"""Charts drawn on the server as inline SVG: runs over time as bars stacked by result, with
duration percentiles as lines on a second axis. Pure Python, no dependency, nothing fetched: the
page embeds the markup as it is (the Content-Security-Policy allows no script for it to need).

Every text written into the markup is escaped here; the caller passes plain strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

#: The colour of each result's bars (colour-blind-friendly where it matters: success and
#: failure differ in lightness as well as hue).
RESULT_COLOURS: dict[str, str] = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "cancelled": "#757575",
    "interrupted": "#ef6c00",
    "recovered": "#6a1b9a",
    "retried": "#f9a825",
    "misfired": "#8d6e63",
    "expired": "#ad1457",
    "held": "#546e7a",
    "skipped": "#bdbdbd",
}
#: Colours of the percentile lines.
LINE_COLOURS = ("#1565c0", "#00838f", "#283593")
_FALLBACK = "#9e9e9e"


@dataclass(frozen=True)
class Bar:
    """One bucket: its label (shown under the axis and in the tooltip) and counts by series."""

    label: str
    counts: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Line:
    """A series drawn as a line over the bars, one value per bar (None: no point there)."""

    name: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Size:
    width: int = 1080
    height: int = 260
    #: A sparkline: no axes' labels, no legend.
    compact: bool = False


def stacked_bars(
    bars: Sequence[Bar],
    series: Sequence[str],
    lines: Sequence[Line] = (),
    *,
    title: str,
    size: Size = Size(),
    line_unit: str = "s",
) -> str:
    """An ``<svg>`` of ``bars`` stacked in the order of ``series`` (bottom first), with
    ``lines`` scaled to their own axis on the right (in ``line_unit``). Empty ``bars`` draws the
    axes and says "no runs"."""
    compact = size.compact
    left, right, top, bottom = (2, 2, 2, 2) if compact else (44, 56, 12, 40)
    legend = 0 if compact else 22
    plot_w = max(1, size.width - left - right)
    plot_h = max(1, size.height - top - bottom - legend)
    peak = max((sum(b.counts.get(s, 0) for s in series) for b in bars), default=0)
    count_top = _nice_ceiling(peak)
    line_peak = max((v for ln in lines for v in ln.values if v is not None), default=0.0)
    line_top = _nice_ceiling(line_peak) if line_peak > 0 else 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart{" spark" if compact else ""}" '
        f'width="{size.width}" height="{size.height}" '
        f'viewBox="0 0 {size.width} {size.height}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
    ]
    if not compact:
        out.extend(
            _axes(left, top, plot_w, plot_h, count_top, line_top if lines else None, line_unit)
        )
    slot = plot_w / max(1, len(bars))
    bar_w = max(1.0, slot * 0.8)
    for i, bar in enumerate(bars):
        x = left + i * slot + (slot - bar_w) / 2
        base = float(top + plot_h)
        for name in series:
            count = bar.counts.get(name, 0)
            if count <= 0:
                continue
            h = plot_h * count / count_top
            base -= h
            out.append(
                f'<rect class="bar" data-result="{escape(name)}" x="{_n(x)}" y="{_n(base)}" '
                f'width="{_n(bar_w)}" height="{_n(h)}" '
                f'fill="{RESULT_COLOURS.get(name, _FALLBACK)}">'
                f"<title>{escape(bar.label)}: {escape(name)} {count}</title></rect>"
            )
        if not compact and _labelled(i, len(bars)):
            out.append(
                f'<text class="tick" x="{_n(left + i * slot + slot / 2)}" '
                f'y="{_n(top + plot_h + 14)}" text-anchor="middle" font-size="10">'
                f"{escape(bar.label)}</text>"
            )
    for n, line in enumerate(lines):
        out.extend(_line(line, n, left, top, slot, plot_h, line_top, line_unit, bars))
    if not bars or peak == 0:
        out.append(
            f'<text class="empty" x="{_n(left + plot_w / 2)}" y="{_n(top + plot_h / 2)}" '
            f'text-anchor="middle" font-size="{10 if compact else 13}" fill="#757575">'
            "no runs</text>"
        )
    if not compact:
        out.extend(_legend(series, lines, left, size.height - 8))
    out.append("</svg>")
    return "".join(out)


def _axes(
    left: int,
    top: int,
    plot_w: int,
    plot_h: int,
    count_top: float,
    line_top: float | None,
    line_unit: str,
) -> list[str]:
    out = []
    for k in range(5):
        y = top + plot_h - plot_h * k / 4
        out.append(
            f'<line class="grid" x1="{left}" y1="{_n(y)}" x2="{left + plot_w}" y2="{_n(y)}" '
            'stroke="#e0e0e0" stroke-width="1"/>'
        )
        out.append(
            f'<text class="tick" x="{left - 4}" y="{_n(y + 3)}" text-anchor="end" '
            f'font-size="10">{_count(count_top * k / 4)}</text>'
        )
        if line_top is not None:
            out.append(
                f'<text class="tick" x="{left + plot_w + 4}" y="{_n(y + 3)}" font-size="10">'
                f"{escape(_amount(line_top * k / 4, line_unit))}</text>"
            )
    out.append(
        f'<line class="axis" x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" '
        f'y2="{top + plot_h}" stroke="#616161" stroke-width="1"/>'
    )
    return out


def _line(
    line: Line,
    n: int,
    left: int,
    top: int,
    slot: float,
    plot_h: int,
    line_top: float,
    unit: str,
    bars: Sequence[Bar],
) -> list[str]:
    colour = LINE_COLOURS[n % len(LINE_COLOURS)]
    dash = ' stroke-dasharray="4 3"' if n % 2 else ""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        if len(run) > 1:
            out.append(
                f'<polyline class="line" data-series="{escape(line.name)}" fill="none" '
                f'stroke="{colour}" stroke-width="2"{dash} points="{" ".join(run)}"/>'
            )
        run.clear()

    for i, value in enumerate(line.values):
        if value is None:
            flush()
            continue
        x = left + i * slot + slot / 2
        y = top + plot_h - plot_h * min(value, line_top) / line_top
        run.append(f"{_n(x)},{_n(y)}")
        label = bars[i].label if i < len(bars) else ""
        out.append(
            f'<circle class="point" data-series="{escape(line.name)}" cx="{_n(x)}" '
            f'cy="{_n(y)}" r="2.5" fill="{colour}"><title>{escape(label)}: '
            f"{escape(line.name)} {escape(_amount(value, unit))}</title></circle>"
        )
    flush()
    return out


def _legend(series: Sequence[str], lines: Sequence[Line], x0: int, y: int) -> list[str]:
    out, x = [], float(x0)
    for name in series:
        out.append(
            f'<rect x="{_n(x)}" y="{y - 9}" width="10" height="10" '
            f'fill="{RESULT_COLOURS.get(name, _FALLBACK)}"/>'
            f'<text class="legend" x="{_n(x + 13)}" y="{y}" font-size="11">{escape(name)}</text>'
        )
        x += 20 + 6.5 * len(name)
    for n, line in enumerate(lines):
        colour = LINE_COLOURS[n % len(LINE_COLOURS)]
        out.append(
            f'<line x1="{_n(x)}" y1="{y - 4}" x2="{_n(x + 14)}" y2="{y - 4}" stroke="{colour}" '
            f'stroke-width="2"/><text class="legend" x="{_n(x + 17)}" y="{y}" '
            f'font-size="11">{escape(line.name)}</text>'
        )
        x += 26 + 6.5 * len(line.name)
    return out


def _labelled(i: int, n: int) -> bool:
    """Whether bar ``i`` of ``n`` gets its label under the axis (at most about 8 labels)."""
    step = max(1, math.ceil(n / 8))
    return i % step == 0


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return float(step * power)
    return float(10 * power)  # pragma: no cover  (10 times power reaches it)


def _count(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


def _amount(value: float, unit: str) -> str:
    """A duration in seconds as people read it (ms under a second, min and h above)."""
    if unit != "s":
        return f"{value:g} {unit}"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.3g} s"
    if value < 7200:
        return f"{value / 60:.3g} min"
    return f"{value / 3600:.3g} h"


def _n(value: float) -> str:
    """A coordinate, to a tenth of a pixel."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text
