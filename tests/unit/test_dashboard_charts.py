"""The dashboard's SVG charts (celery_quartz/dashboard/charts.py), read back as XML: the bars are
stacked by result in proportion, the percentile lines sit on their own axis, text is escaped,
and nothing refers outside the document."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from celery_quartz.dashboard.charts import (
    RESULT_COLOURS,
    Bar,
    Line,
    Size,
    _amount,
    _nice_ceiling,
    stacked_bars,
)

SVG = "{http://www.w3.org/2000/svg}"
SERIES = ("succeeded", "failed", "misfired")


def _parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)


def _bars(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar"]


def test_each_result_of_each_bucket_is_one_rect_of_its_colour() -> None:
    root = _parse(
        stacked_bars(
            [Bar("10:00", {"succeeded": 3, "failed": 1}), Bar("11:00", {"misfired": 2})],
            SERIES,
            title="runs",
        )
    )
    rects = _bars(root)
    assert [(r.get("data-result"), r.get("fill")) for r in rects] == [
        ("succeeded", RESULT_COLOURS["succeeded"]),
        ("failed", RESULT_COLOURS["failed"]),
        ("misfired", RESULT_COLOURS["misfired"]),
    ]
    assert [r.find(f"{SVG}title").text for r in rects] == [  # type: ignore[union-attr]
        "10:00: succeeded 3",
        "10:00: failed 1",
        "11:00: misfired 2",
    ]


def test_bars_stack_bottom_up_in_proportion_to_their_counts() -> None:
    root = _parse(stacked_bars([Bar("a", {"succeeded": 3, "failed": 1})], SERIES, title="t"))
    ok, failed = _bars(root)
    ok_y, ok_h = float(ok.get("y", 0)), float(ok.get("height", 0))
    failed_y, failed_h = float(failed.get("y", 0)), float(failed.get("height", 0))
    assert ok_h == pytest.approx(3 * failed_h, rel=0.02)
    # The failure sits on top of the successes: its bottom is their top.
    assert failed_y + failed_h == pytest.approx(ok_y, abs=0.11)


def test_a_taller_bucket_draws_a_taller_bar() -> None:
    root = _parse(
        stacked_bars([Bar("a", {"succeeded": 2}), Bar("b", {"succeeded": 8})], SERIES, title="t")
    )
    low, high = (float(r.get("height", 0)) for r in _bars(root))
    assert high == pytest.approx(4 * low, rel=0.02)


def test_percentile_lines_are_polylines_with_a_point_per_value_and_a_gap_at_none() -> None:
    bars = [Bar(str(i), {"succeeded": 1}) for i in range(5)]
    root = _parse(
        stacked_bars(
            bars,
            SERIES,
            [Line("p50", [0.1, 0.2, None, 0.2, 0.3]), Line("p95", [1.0, 2.0, 3.0, 2.0, 1.0])],
            title="t",
        )
    )
    lines = [p for p in root.iter(f"{SVG}polyline")]
    assert [p.get("data-series") for p in lines] == ["p50", "p50", "p95"]
    assert [len(p.get("points", "").split()) for p in lines] == [2, 2, 5]
    points = [c for c in root.iter(f"{SVG}circle") if c.get("data-series") == "p95"]
    ys = [float(c.get("cy", 0)) for c in points]
    # 3.0 s is the highest point (the smallest y), 1.0 s the lowest.
    assert ys.index(min(ys)) == 2 and ys[0] == ys[4] == max(ys)
    titles = [c.find(f"{SVG}title").text for c in points]  # type: ignore[union-attr]
    assert titles[2] == "2: p95 3 s"


def test_the_axes_are_labelled_with_counts_left_and_durations_right() -> None:
    root = _parse(
        stacked_bars([Bar("a", {"succeeded": 7})], SERIES, [Line("p95", [90.0])], title="t")
    )
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert "10" in ticks and "0" in ticks  # 7 rounds up to a top of 10
    assert "100 s" in ticks  # 90 s rounds up to 100 s


def test_no_runs_is_said_in_the_chart() -> None:
    for bars in ([], [Bar("a", {})]):
        root = _parse(stacked_bars(bars, SERIES, title="t"))
        assert not _bars(root)
        assert [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "empty"] == ["no runs"]


def test_labels_and_titles_are_escaped() -> None:
    markup = stacked_bars(
        [Bar("<script>alert(1)</script>", {"succeeded": 1})],
        ("succeeded",),
        [Line('p50"><x', [1.0])],
        title='a "title" & <more>',
    )
    assert "<script>" not in markup and "<x" not in markup
    root = _parse(markup)  # well-formed
    assert root.get("aria-label") == 'a "title" & <more>'
    assert root.find(f"{SVG}title").text == 'a "title" & <more>'  # type: ignore[union-attr]


def test_nothing_refers_outside_the_document() -> None:
    markup = stacked_bars([Bar("a", {"succeeded": 1})], SERIES, [Line("p50", [1.0])], title="t")
    for reference in ("href", "src=", "url(", "<script", "<style", "<image", "<foreignObject"):
        assert reference not in markup
    attributes = {a for e in _parse(markup).iter() for a in e.attrib}
    assert not [a for a in attributes if a.startswith("on")]  # no event handler


def test_a_sparkline_has_bars_but_no_legend_nor_axis_labels() -> None:
    root = _parse(
        stacked_bars(
            [Bar("a", {"succeeded": 1}), Bar("b", {"failed": 1})],
            SERIES,
            title="t",
            size=Size(200, 40, compact=True),
        )
    )
    assert root.get("width") == "200" and "spark" in (root.get("class") or "")
    assert len(_bars(root)) == 2
    assert not [t for t in root.iter(f"{SVG}text") if t.get("class") in ("tick", "legend")]


def test_many_buckets_label_at_most_about_eight_of_them() -> None:
    root = _parse(
        stacked_bars([Bar(f"b{i}", {"succeeded": 1}) for i in range(96)], SERIES, title="t")
    )
    labels = [
        t.text for t in root.iter(f"{SVG}text") if t.get("class") == "tick" and t.text[:1] == "b"
    ]
    assert 6 <= len(labels) <= 9 and labels[0] == "b0"


@pytest.mark.parametrize(
    ("value", "top"), [(0, 1), (1, 1), (3, 5), (7, 10), (11, 20), (24, 25), (260, 500)]
)
def test_the_count_axis_tops_at_a_round_number(value: float, top: float) -> None:
    assert _nice_ceiling(value) == top


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0"), (0.25, "250 ms"), (1.5, "1.5 s"), (600, "10 min"), (10800, "3 h")],
)
def test_durations_read_in_the_unit_that_fits(seconds: float, shown: str) -> None:
    assert _amount(seconds, "s") == shown
