"""PNG plots of a merged result set (matplotlib, no display needed):

    interval-<name>.png  the interval over time as a scatter, beside its histogram
    clock.png            each host's offset from the reference with its bounds
    camp.png             CPU busy % and network bytes/s per host, step boundaries marked

and a campaign's metrics per point, as bars and (over one numeric parameter) a line, with
their confidence intervals as error bars.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from .units import time_unit

MAX_POINTS = 200_000  # a scatter beyond this shows every k-th point, and says so
DPI = 110
# A figure with a panel per host is unreadable (and slow: seconds per dozen panels) at
# fleet scale; beyond this many hosts it shows a chosen few and says which.
PLOTTED_HOSTS = 8
# A step's name is written on camp.png only this far (a share of the time axis) from the last
# one written, so that short steps' names do not overprint each other.
LABEL_GAP = 0.04


def _figure(rows: int, cols: int, size: tuple[float, float], **kw) -> tuple[Figure, np.ndarray]:
    # Figure without pyplot: no global state, no GUI backend, and a third of the import time
    fig = Figure(figsize=size)
    # A title at a fixed height: placing it above the tick labels measured every label of the
    # axes again at each draw, a third of the drawing time.
    with rc_context({"axes.titley": 1.0}):
        axes = fig.subplots(rows, cols, squeeze=False, **kw)
    # Margins fixed in inches: matplotlib's tight_layout measured every label and took longer
    # than drawing the figures.
    width, height = size
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.25 / width, bottom=0.6 / height, top=1 - 0.75 / height,
                        wspace=0.9 / width * cols, hspace=0.5 * rows / height * 1.6)
    return fig, axes


def _plain(ax, axis: str = "both") -> None:
    """Numbers as they are on the axis: no '1e7' offset or scientific notation."""
    ax.ticklabel_format(axis=axis, style="plain", useOffset=False)


def file_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def plot_all(db: duckdb.DuckDBPyConnection, out: Path, origin: int) -> list[Path]:
    """Every plot the views intervals, clock, rates and phases allow, into `out`; times are
    seconds since `origin`, the run's start."""
    out.mkdir(exist_ok=True)
    written = []
    for (name,) in db.execute("SELECT DISTINCT name FROM intervals ORDER BY name").fetchall():
        t, d = db.execute('SELECT list(end_ts ORDER BY end_ts), list(duration_ns ORDER BY end_ts) '
                          "FROM intervals "
                          "WHERE name = ?", [name]).fetchall()[0]
        written.append(plot_interval(name, (np.array(t) - origin) / 1e9, np.array(d) / 1e3,
                                     out / f"interval-{file_name(name)}.png"))
    clock = db.execute("""SELECT host, list(ts ORDER BY ts), list(offset_ns ORDER BY ts),
                                 list(lo_ns ORDER BY ts), list(hi_ns ORDER BY ts)
                          FROM clock WHERE source != 'reference' GROUP BY host ORDER BY host""").fetchall()
    if clock:
        written.append(plot_clock(clock, origin, out / "clock.png"))
    hosts = [h for (h,) in db.execute("SELECT DISTINCT host FROM rates ORDER BY host").fetchall()]
    if hosts:
        written.append(plot_camp(db, hosts, origin, out / "camp.png"))
    return written


def plot_interval(name: str, t_s: np.ndarray, us: np.ndarray, path: Path) -> Path:
    unit, scale = time_unit(us * 1e3)
    v = us * 1e3 / scale
    fig, axes = _figure(1, 2, (11, 4), width_ratios=(2, 1))
    scatter, hist = axes[0]
    step = max(1, len(v) // MAX_POINTS)
    scatter.scatter(t_s[::step], v[::step], s=3, rasterized=True)
    scatter.set(xlabel="time since the run started (s)", ylabel=f"{name} ({unit})",
                title=f"{name}: {len(v)} intervals" + (f" (every {step}th shown)" if step > 1 else ""))
    hi = np.percentile(v, 99.5) if len(v) else 1
    # One stairs artist, not a patch per bin: sixty patches took longer to add than to draw.
    counts, edges = np.histogram(v[v <= hi], bins=60)
    hist.stairs(counts, edges, fill=True)
    hist.set(xlabel=f"{name} ({unit})", ylabel="count",
             title=f"median {np.median(v):.4g} {unit} (to the 99.5th pct)")
    for ax in (scatter, hist):
        _plain(ax)
    return _save(fig, path)


def plot_histogram(name: str, column: str, edges: np.ndarray, counts: dict[str, np.ndarray],
                   path: Path) -> Path:
    """Counts per bin, stacked by host where the input says its host; a column of nanoseconds
    in the unit that suits it."""
    unit, scale = time_unit(edges) if column.endswith("_ns") else ("", 1.0)
    label = f"{column.removesuffix('_ns')} ({unit})" if unit else column
    fig, axes = _figure(1, 1, (7, 4))
    ax = axes[0, 0]
    below = np.zeros(len(edges) - 1)
    for host, c in counts.items():
        ax.stairs(below + c, edges / scale, baseline=below, fill=True, label=host or None)
        below = below + c
    if len(counts) > 1:
        ax.legend(title="host", fontsize="small")
    ax.set(xlabel=label, ylabel="count", title=f"{name}: {int(below.sum())} values")
    _plain(ax)
    return _save(fig, path)


def plot_clock(rows: list[tuple], origin: int, path: Path) -> Path:
    """One panel per host, at most PLOTTED_HOSTS: beyond, those with the widest bound."""
    shown = sorted(rows, key=lambda r: -max((h - lo for lo, h in zip(r[3], r[4], strict=True)), default=0))
    shown = sorted(shown[:PLOTTED_HOSTS], key=lambda r: r[0])
    fig, axes = _figure(len(shown), 1, (9, 2.6 * len(shown)), sharex=True)
    unit, scale = time_unit([v for r in shown for v in (*r[3], *r[4])])
    for ax, (host, at, offset, lo, hi) in zip(axes[:, 0], shown, strict=True):
        t = (np.array(at) - origin) / 1e9
        ax.fill_between(t, np.array(lo) / scale, np.array(hi) / scale, alpha=0.3, label="bounds")
        ax.plot(t, np.array(offset) / scale, marker=".", label="offset")
        ax.set(ylabel=unit, title=f"host {host}: offset from the reference")
        _plain(ax)
        ax.legend(loc="upper right")
    if len(shown) < len(rows):
        fig.suptitle(f"{len(shown)} of {len(rows)} hosts, those with the widest bounds (all: clock.parquet)")
    axes[-1, 0].set_xlabel("time since the run started (s)")
    return _save(fig, path)


def plot_camp(db: duckdb.DuckDBPyConnection, hosts: list[str], origin: int, path: Path) -> Path:
    """One row per host, at most PLOTTED_HOSTS: beyond, the busiest."""
    steps = db.execute("SELECT phase, min(entered) FROM phases GROUP BY step, phase ORDER BY step").fetchall()
    every = hosts
    if len(hosts) > PLOTTED_HOSTS:
        busy = dict(db.execute("SELECT host, avg(rate) FROM rates WHERE field = 'cpu.busy_pct' "
                               "GROUP BY host").fetchall())
        hosts = sorted(sorted(hosts, key=lambda h: -(busy.get(h) or 0))[:PLOTTED_HOSTS])
    fig, axes = _figure(len(hosts), 2, (12, 2.8 * len(hosts)), sharex=True)
    for (cpu, net), host in zip(axes, hosts, strict=True):
        t, v = db.execute("SELECT list(ts ORDER BY ts), list(rate ORDER BY ts) FROM rates "
                          "WHERE host = ? AND field = 'cpu.busy_pct'", [host]).fetchall()[0]
        cpu.plot((np.array(t or []) - origin) / 1e9, v or [], drawstyle="steps-pre", marker=".")
        cpu.set(ylabel="%", title=f"host {host}: CPU busy", ylim=(0, 100))
        for field, t, v in db.execute(
                "SELECT field, list(ts ORDER BY ts), list(rate ORDER BY ts) FROM rates WHERE host = ? AND "
                r"regexp_matches(field, '^net\.[^.]+\.bytes_(recv|sent)$') GROUP BY field "
                "HAVING max(rate) > 0 ORDER BY field", [host]).fetchall():
            net.plot((np.array(t) - origin) / 1e9, v, drawstyle="steps-pre", marker=".",
                     label=field.removeprefix("net."))
        net.set(ylabel="bytes/s", title=f"host {host}: network")
        net.yaxis.set_major_formatter(EngFormatter(unit="B/s"))
        if net.lines:
            net.legend(loc="upper right", fontsize="small")
        for ax in (cpu, net):
            for _, at in steps:
                if at is not None:
                    ax.axvline((at - origin) / 1e9, color="grey", linewidth=0.6, linestyle=":")
    _label_steps(axes[0], [(p, (at - origin) / 1e9) for p, at in steps if at is not None])
    for ax in axes[-1]:
        ax.set_xlabel("time since the run started (s)")
    if len(hosts) < len(every):
        fig.suptitle(f"{len(hosts)} of {len(every)} hosts, the busiest (all: rates.parquet)")
    return _save(fig, path)


def _label_steps(top: np.ndarray, steps: list[tuple[str, float]]) -> None:
    """The steps' names in the top row, each only where it keeps clear of the last written."""
    for ax in top:
        lo, hi = ax.get_xlim()
        last = None
        for phase, x in steps:
            if last is None or (x - last) / ((hi - lo) or 1) >= LABEL_GAP:
                ax.annotate(phase, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -3),
                            textcoords="offset points", rotation=90, va="top", fontsize="x-small",
                            color="grey")
                last = x


def plot_campaign(metric: str, unit: str, labels: list[str], means: np.ndarray, lows: np.ndarray,
                  highs: np.ndarray, out: Path, xs: list[float] | None = None,
                  x_name: str = "") -> list[Path]:
    """<metric>-bars.png, and <metric>-line.png when the points lie along one number `xs`."""
    errors = np.nan_to_num(np.vstack([means - lows, highs - means]))
    fig, axes = _figure(1, 1, (max(6, 0.9 * len(labels)), 4))
    ax = axes[0, 0]
    ax.bar(range(len(labels)), means, yerr=errors, capsize=4)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    ax.set(ylabel=f"{metric} ({unit})", title=f"{metric}: mean and 95% interval per point")
    written = [_save(fig, out / f"{file_name(metric)}-bars.png")]
    if xs is not None:
        fig, axes = _figure(1, 1, (7, 4))
        ax = axes[0, 0]
        ax.errorbar(xs, means, yerr=errors, marker="o", capsize=4)
        ax.set(xlabel=x_name, ylabel=f"{metric} ({unit})", title=f"{metric} against {x_name}")
        written.append(_save(fig, out / f"{file_name(metric)}-line.png"))
    return written


def _save(fig: Figure, path: Path) -> Path:
    fig.savefig(path, dpi=DPI)
    return path
