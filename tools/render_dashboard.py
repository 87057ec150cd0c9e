#!/usr/bin/env python3
"""Render the Grafana dashboard as a PNG from a real Prometheus scrape of a guarded workload.

Usage::

    .venv/bin/python tools/render_dashboard.py [--out docs/dashboard.png] [--duration-s 80]
        [--save-data FILE] [--from-data FILE]

Grafana itself is not installable offline, so this script plays its part (the data through
``tools/dashboard_data.py``; the JSON's generated rows come from ``tools/dashboard_panels.py``):
it starts Debian's
``prometheus`` binary on a free loopback port (temp config and storage, 1 s scrape and rule
evaluation, the recording and alerting rules of ``grafana/prometheus/*.yml``), turns the guard on
with the simulated A800 backend and ``/metrics`` on a free port, and drives tiny models built from
a config through phases of load (batch size 1, batched, 8-bit loads). Then it runs every panel's
PromQL from ``grafana/dashboards/ecoguard-energy.json`` through ``/api/v1/query_range`` (template
variables set to "All", ``$__rate_interval`` to ``--rate-interval``, ``$__range`` to the run's
length) and draws the panels on the dashboard's own grid in Grafana's dark style with matplotlib.

Every number in the image comes from Prometheus' answers. The GPU is simulated: its power is the
A800 profile's idle or busy figure depending on whether a generate call runs, integrated over the
CPU's wall time, so the absolute joules describe this box's speed, not an A800's. The footer says
so. ``--save-data`` keeps the query results as JSON and ``--from-data`` re-renders from such a
file without a workload (for adjusting the drawing only).

Needs: the ``prometheus`` binary (``apt-get install prometheus``), matplotlib, and ecoguard's
torch/transformers/bitsandbytes stack. Takes about two minutes; stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dashboard_panels
from dashboard_data import collect

REPO_ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = REPO_ROOT / "grafana" / "dashboards" / "ecoguard-energy.json"
DEFAULT_OUT = REPO_ROOT / "docs" / "dashboard.png"

# Grafana's dark theme (v10/11): canvas, panel, border, text, grid, and the classic palette.
CANVAS = "#111217"
PANEL_BG = "#181b1f"
PANEL_BORDER = "#2c3235"
TEXT = "#ccccdc"
TEXT_DIM = "#8e8e8e"
GRID = "#2a2d32"
PALETTE = (
    "#73bf69",
    "#f2cc0c",
    "#8ab8ff",
    "#ff780a",
    "#f2495c",
    "#5794f2",
    "#b877d9",
    "#705da0",
    "#37872d",
    "#fade2a",
)

# Geometry in pixels: Grafana's grid is 24 columns of rows 30 px high with 8 px gutters.
FIG_WIDTH_PX = 1800
GRID_ROW_PX = 26  # Grafana's 30 px, a little tighter so the PNG stays README-sized
GUTTER_PX = 8
MARGIN_PX = 16
HEADER_PX = 64
FOOTER_PX = 52
DPI = 100

# Why a query can legitimately come back empty in this run, said under the panel.
NO_DATA_REASONS = {
    "ecoguard_reference_energy_per_token_joules": (
        "no reference row covers these tiny models, so no reference series is exported"
    ),
    **dashboard_panels.NO_DATA_REASONS,
}


# --------------------------------------------------------------------------- units

_SI = {-4: "p", -3: "n", -2: "µ", -1: "m", 0: "", 1: "k", 2: "M", 3: "G", 4: "T"}


def _trim(number: float, digits: int = 3) -> str:
    """``number`` with ``digits`` significant digits, without trailing zeros."""
    if number == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(number))))
    return f"{number:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{number:.0f}"


def _si(value: float, unit: str, offset: int = 0) -> str:
    """SI-prefixed like Grafana's decimalSIPrefix: ``offset`` 1 means the value is in k-units."""
    if value == 0 or not math.isfinite(value):
        return f"0 {unit}" if value == 0 else str(value)
    power = math.floor(math.log10(abs(value)) / 3)
    power = max(-4 - offset, min(4 - offset, power))
    return f"{_trim(value / 1000**power)} {_SI[power + offset]}{unit}"


def format_value(value: float, unit: str | None) -> str:
    """A value in one of the dashboard's Grafana units, as Grafana would print it."""
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "J":
        return _si(value, "J")
    if unit == "watt":
        return _si(value, "W")
    if unit == "kwatth":
        return _si(value, "Wh", offset=1)
    if unit == "massg":
        return _si(value, "g")
    if unit == "currencyUSD":
        if abs(value) >= 1000:
            return "$" + _si(value, "").replace(" ", "")
        return "$" + _trim(value)
    if unit == "s":
        if abs(value) < 1:
            return _si(value, "s")
        return f"{_trim(value)} s"
    # "short": plain numbers, K / Mil for large ones.
    if abs(value) >= 1e6:
        return f"{_trim(value / 1e6)} Mil"
    if abs(value) >= 1e3:
        return f"{_trim(value / 1e3)} K"
    return _trim(value)


# --------------------------------------------------------------------------- drawing


def legend_name(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` replaced by the series' label value."""
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template or "")
    return " ".join(text.split()) or "{" + ", ".join(f"{k}={v}" for k, v in labels.items()) + "}"


@dataclass
class Series:
    name: str
    times_s: list[float]
    values: list[float]

    def last(self) -> float | None:
        return next((v for v in reversed(self.values) if math.isfinite(v)), None)

    def mean(self) -> float | None:
        finite = [v for v in self.values if math.isfinite(v)]
        return sum(finite) / len(finite) if finite else None


def panel_series(
    panel: dict[str, Any], data: dict[str, Any]
) -> tuple[list[Series], list[tuple[str, str]]]:
    """(series with data, [(refId, why empty)] for targets that returned nothing)."""
    out: list[Series] = []
    empty: list[tuple[str, str]] = []
    for target in panel.get("targets", []):
        result = data["results"].get(f"{panel['id']}/{target['refId']}", {"series": []})
        if not result["series"]:
            metric = next((m for m in NO_DATA_REASONS if m in target["expr"]), None)
            empty.append((target["refId"], NO_DATA_REASONS.get(metric, "no data in this range")))
        for raw in result["series"]:
            points = [(float(t), float(v)) for t, v in raw["values"]]
            out.append(
                Series(
                    legend_name(target.get("legendFormat", ""), raw["metric"]),
                    [t for t, _ in points],
                    [v for _, v in points],
                )
            )
    return out, empty


class Canvas:
    """Pixel geometry on a matplotlib figure (origin top-left, like Grafana's grid)."""

    def __init__(self, figure: Any, width_px: int, height_px: int) -> None:
        self.figure = figure
        self.width_px = width_px
        self.height_px = height_px

    def rect(self, x: float, y: float, w: float, h: float) -> list[float]:
        """Figure-fraction [left, bottom, width, height] of a top-left pixel box."""
        return [
            x / self.width_px,
            1 - (y + h) / self.height_px,
            w / self.width_px,
            h / self.height_px,
        ]

    def point(self, x: float, y: float) -> tuple[float, float]:
        return x / self.width_px, 1 - y / self.height_px

    def text(self, x: float, y: float, text: str, **style: Any) -> None:
        self.figure.text(*self.point(x, y), text, **style)

    def box(self, x: float, y: float, w: float, h: float, **style: Any) -> None:
        from matplotlib.patches import FancyBboxPatch

        left, bottom, width, height = self.rect(x, y, w, h)
        self.figure.patches.append(
            FancyBboxPatch(
                (left, bottom),
                width,
                height,
                boxstyle="round,pad=0,rounding_size=0.002",
                transform=self.figure.transFigure,
                figure=self.figure,
                zorder=-1,  # under the axes drawn on it (figure patches default above axes)
                **style,
            )
        )


def grid_box(grid_pos: dict[str, int]) -> tuple[float, float, float, float]:
    """Pixel box (x, y, w, h) of a gridPos on the canvas."""
    column_px = (FIG_WIDTH_PX - 2 * MARGIN_PX + GUTTER_PX) / 24
    x = MARGIN_PX + grid_pos["x"] * column_px
    y = HEADER_PX + grid_pos["y"] * (GRID_ROW_PX + GUTTER_PX)
    w = grid_pos["w"] * column_px - GUTTER_PX
    h = grid_pos["h"] * (GRID_ROW_PX + GUTTER_PX) - GUTTER_PX
    return x, y, w, h


def render(data: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    bottom_units = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height_px = int(HEADER_PX + bottom_units * (GRID_ROW_PX + GUTTER_PX) + FOOTER_PX)
    plt.rcParams.update(
        {
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "text.color": TEXT,
            "axes.labelcolor": TEXT_DIM,
            "xtick.color": TEXT_DIM,
            "ytick.color": TEXT_DIM,
        }
    )
    figure = plt.figure(figsize=(FIG_WIDTH_PX / DPI, height_px / DPI), dpi=DPI, facecolor=CANVAS)
    canvas = Canvas(figure, FIG_WIDTH_PX, height_px)
    _draw_header(canvas, dashboard, data)
    for panel in panels:
        box = grid_box(panel["gridPos"])
        if panel["type"] == "row":
            canvas.text(box[0], box[1] + 24, "⌄  " + panel["title"], fontsize=13, weight="bold")
        elif panel["type"] == "stat":
            _draw_stat(canvas, panel, data, box)
        else:
            _draw_timeseries(canvas, panel, data, box)
    canvas.text(
        MARGIN_PX,
        height_px - 30,
        f"Rendered from a real Prometheus scrape of ecoguard on a SIMULATED A800 GPU, "
        f"{data['rendered_at']}. Every value is a Prometheus answer to the panel's own PromQL "
        f"($__rate_interval = {data['rate_interval']}, variables = All).",
        fontsize=10,
        color=TEXT,
    )
    canvas.text(
        MARGIN_PX,
        height_px - 12,
        f"Workload: {data['calls']} guarded generate calls of tiny random-weight models on CPU "
        f"(dashed lines mark its phases); simulated GPU: {data['gpu_name']}, drawing its "
        "profile's busy power while a call runs, so joules reflect CPU wall time, not A800 speed.",
        fontsize=10,
        color=TEXT_DIM,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=DPI, facecolor=CANVAS)
    plt.close(figure)


def _draw_header(canvas: Canvas, dashboard: dict[str, Any], data: dict[str, Any]) -> None:
    canvas.text(MARGIN_PX, 30, dashboard["title"], fontsize=17, weight="bold")
    start = datetime.fromtimestamp(data["start_s"], tz=timezone.utc)
    end = datetime.fromtimestamp(data["end_s"], tz=timezone.utc)
    canvas.text(
        FIG_WIDTH_PX - MARGIN_PX,
        30,
        f"{start:%Y-%m-%d %H:%M:%S} to {end:%H:%M:%S} UTC   ({data['end_s'] - data['start_s']:.0f} s)",
        fontsize=11,
        ha="right",
        color=TEXT_DIM,
    )
    x = MARGIN_PX
    for label, value in (
        ("Data source", "Prometheus"),
        ("Model", "All"),
        ("GPU", "All"),
    ):
        text = f"{label}   {value}"
        width = 16 + 7.2 * len(text)
        canvas.box(x, 40, width, 20, facecolor=PANEL_BG, edgecolor=PANEL_BORDER, linewidth=1)
        canvas.text(x + 8, 55, text, fontsize=9.5)
        x += width + 8


def _panel_frame(canvas: Canvas, panel: dict[str, Any], box: tuple[float, ...]) -> None:
    x, y, w, h = box
    canvas.box(x, y, w, h, facecolor=PANEL_BG, edgecolor=PANEL_BORDER, linewidth=1)
    canvas.text(x + 10, y + 20, panel["title"], fontsize=11, weight="bold")


def _draw_timeseries(
    canvas: Canvas, panel: dict[str, Any], data: dict[str, Any], box: tuple[float, ...]
) -> None:
    import matplotlib.dates as mdates
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    _panel_frame(canvas, panel, box)
    x, y, w, h = box
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
    series, empty = panel_series(panel, data)
    legend_rows = len(series) + len(empty)
    row_px = 15
    legend_px = (legend_rows + 1) * row_px + 6
    plot_top = y + 32
    plot_h = h - 32 - legend_px - 22
    axes = canvas.figure.add_axes(canvas.rect(x + 62, plot_top, w - 80, plot_h))
    axes.set_facecolor(PANEL_BG)
    for spine in axes.spines.values():
        spine.set_visible(False)
    axes.grid(True, color=GRID, linewidth=0.8)
    axes.tick_params(length=0, labelsize=8.5)
    start, end = data["start_s"], data["end_s"]

    def when(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)

    axes.set_xlim(when(start), when(end))
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))
    axes.xaxis.set_major_locator(MaxNLocator(7))
    axes.yaxis.set_major_locator(MaxNLocator(5))
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, unit)))
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    bars = custom.get("drawStyle") == "bars"
    fill_alpha = custom.get("fillOpacity", 10) / 100
    # Bars share one time grid so stacked series sit on each other, step by step.
    bar_times = sorted({t for item in series for t in item.times_s})
    baseline = [0.0] * len(bar_times)
    bar_width_days = data["step_s"] / 86400 * 0.8
    for index, item in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        if bars:
            by_time = dict(zip(item.times_s, item.values, strict=True))
            heights = [by_time.get(t, 0.0) for t in bar_times]
            axes.bar(
                [when(t) for t in bar_times],
                heights,
                width=bar_width_days,
                bottom=baseline,
                color=color,
                alpha=fill_alpha,
                linewidth=0,
            )
            if stacked:
                baseline = [b + v for b, v in zip(baseline, heights, strict=True)]
        else:
            times = [when(t) for t in item.times_s]
            axes.plot(times, item.values, color=color, linewidth=1.3)
            axes.fill_between(times, item.values, color=color, alpha=fill_alpha, linewidth=0)
    top = axes.get_ylim()[1]
    axes.set_ylim(bottom=0, top=top if top > 0 else 1)
    for seconds, _name in data["phases"][1:]:
        axes.axvline(when(seconds), color="#6e7580", linewidth=0.8, linestyle=(0, (4, 3)))
    for seconds, name in data["phases"]:
        if name != "idle":
            axes.text(
                when(seconds + 0.7),
                0.97,
                name,
                transform=axes.get_xaxis_transform(),
                fontsize=7.5,
                color="#9aa0aa",
                va="top",
            )
    _draw_legend_table(canvas, series, empty, unit, x + 12, y + h - legend_px - 2, w - 24)


def _draw_legend_table(
    canvas: Canvas,
    series: list[Series],
    empty: list[tuple[str, str]],
    unit: str | None,
    x: float,
    y: float,
    w: float,
) -> None:
    """Grafana's table legend: name, then the "Last *" and "Mean" columns."""
    row_px = 15
    last_x, mean_x = x + w - 110, x + w
    canvas.text(x + 18, y + 11, "Name", fontsize=8, color=TEXT_DIM, weight="bold")
    canvas.text(last_x, y + 11, "Last *", fontsize=8, color=TEXT_DIM, weight="bold", ha="right")
    canvas.text(mean_x, y + 11, "Mean", fontsize=8, color=TEXT_DIM, weight="bold", ha="right")
    row_y = y + 11 + row_px
    for index, item in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        canvas.box(x, row_y - 7, 12, 3, facecolor=color, edgecolor=color, linewidth=0)
        canvas.text(x + 18, row_y, item.name, fontsize=8.5)
        canvas.text(last_x, row_y, format_value(item.last(), unit), fontsize=8.5, ha="right")
        canvas.text(mean_x, row_y, format_value(item.mean(), unit), fontsize=8.5, ha="right")
        row_y += row_px
    for ref_id, why in empty:
        canvas.text(x + 18, row_y, f"query {ref_id}: no data ({why})", fontsize=8, color=TEXT_DIM)
        row_y += row_px


def _draw_stat(
    canvas: Canvas, panel: dict[str, Any], data: dict[str, Any], box: tuple[float, ...]
) -> None:
    """Grafana's stat panel: the last value of each series, big, over its sparkline."""
    _panel_frame(canvas, panel, box)
    x, y, w, h = box
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    series, _ = panel_series(panel, data)
    if not series:
        canvas.text(x + w / 2, y + h / 2, "No data", fontsize=16, ha="center", color=TEXT_DIM)
        return
    cell_w = (w - 20) / len(series)
    for index, item in enumerate(series):
        color = PALETTE[0]  # the dashboard's stat panels use the default (green) threshold
        cell_x = x + 10 + index * cell_w
        spark = canvas.figure.add_axes(canvas.rect(cell_x, y + h * 0.55, cell_w - 10, h * 0.42))
        spark.set_axis_off()
        spark.plot(item.times_s, item.values, color=color, linewidth=1.2)
        spark.fill_between(item.times_s, item.values, color=color, alpha=0.18, linewidth=0)
        spark.set_xlim(data["start_s"], data["end_s"])
        spark.set_ylim(bottom=0)
        canvas.text(
            cell_x + (cell_w - 10) / 2,
            y + h * 0.32,
            item.name,
            fontsize=10,
            ha="center",
            color=TEXT,
        )
        canvas.text(
            cell_x + (cell_w - 10) / 2,
            y + h * 0.58,
            format_value(item.last(), unit),
            fontsize=26,
            weight="bold",
            ha="center",
            color=color,
        )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PNG to write")
    parser.add_argument(
        "--duration-s", type=float, default=80.0, help="workload length in seconds (20 to 600)"
    )
    parser.add_argument(
        "--rate-interval",
        default="15s",
        help="what $__rate_interval stands for (a Prometheus duration such as 15s)",
    )
    parser.add_argument("--step-s", type=float, default=1.0, help="query_range step in seconds")
    parser.add_argument("--save-data", type=Path, help="also write the query results as JSON")
    parser.add_argument(
        "--from-data", type=Path, help="render from a --save-data file; runs no workload"
    )
    args = parser.parse_args(argv)
    if not 20 <= args.duration_s <= 600:
        parser.error(f"--duration-s must be 20 to 600, got {args.duration_s:g}")
    if not re.fullmatch(r"\d+(ms|s|m|h)", args.rate_interval):
        parser.error(
            f"--rate-interval must be a Prometheus duration like 15s, got {args.rate_interval!r}"
        )
    if not 0.1 <= args.step_s <= 60:
        parser.error(f"--step-s must be 0.1 to 60, got {args.step_s:g}")

    started = time.monotonic()
    if args.from_data:
        data = json.loads(args.from_data.read_text())
    else:
        data = collect(args.duration_s, args.rate_interval, args.step_s)
        if args.save_data:
            args.save_data.write_text(json.dumps(data))
    render(data, args.out)
    size_kb = args.out.stat().st_size / 1024
    print(f"wrote {args.out} ({size_kb:.0f} KiB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
