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
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

MAX_POINTS = 200_000  # a scatter beyond this shows every k-th point, and says so
DPI = 110
# A figure with a panel per host is unreadable (and slow: seconds per dozen panels) at
# fleet scale; beyond this many hosts it shows a chosen few and says which.
PLOTTED_HOSTS = 8


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
                          "WHERE name = ?", [name]).fetchone()
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
    fig, (scatter, hist) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(2, 1))
    step = max(1, len(us) // MAX_POINTS)
    scatter.scatter(t_s[::step], us[::step], s=3, rasterized=True)
    scatter.set(xlabel="time since the run started (s)", ylabel=f"{name} (us)",
                title=f"{name}: {len(us)} intervals" + (f" (every {step}th shown)" if step > 1 else ""))
    hi = np.percentile(us, 99.5) if len(us) else 1
    hist.hist(us[us <= hi], bins=60)
    hist.set(xlabel=f"{name} (us)", ylabel="count",
             title=f"median {np.median(us):.4g} us (to the 99.5th pct)")
    return _save(fig, path)


def plot_histogram(name: str, column: str, edges: np.ndarray, counts: np.ndarray, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stairs(counts, edges, fill=True)
    ax.set(xlabel=column, ylabel="count", title=f"{name}: {int(counts.sum())} values")
    return _save(fig, path)


def plot_clock(rows: list[tuple], origin: int, path: Path) -> Path:
    """One panel per host, at most PLOTTED_HOSTS: beyond, those with the widest bound."""
    shown = sorted(rows, key=lambda r: -max((h - lo for lo, h in zip(r[3], r[4], strict=True)), default=0))
    shown = sorted(shown[:PLOTTED_HOSTS], key=lambda r: r[0])
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, 2.6 * len(shown)), squeeze=False, sharex=True)
    for ax, (host, at, offset, lo, hi) in zip(axes[:, 0], shown, strict=True):
        t = (np.array(at) - origin) / 1e9
        ax.fill_between(t, np.array(lo) / 1e3, np.array(hi) / 1e3, alpha=0.3, label="bounds")
        ax.plot(t, np.array(offset) / 1e3, marker=".", label="offset")
        ax.set(ylabel="us", title=f"host {host}: offset from the reference")
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
    fig, axes = plt.subplots(len(hosts), 2, figsize=(12, 2.8 * len(hosts)), squeeze=False, sharex=True)
    for (cpu, net), host in zip(axes, hosts, strict=True):
        t, v = db.execute("SELECT list(ts ORDER BY ts), list(rate ORDER BY ts) FROM rates "
                          "WHERE host = ? AND field = 'cpu.busy_pct'", [host]).fetchone()
        cpu.plot((np.array(t or []) - origin) / 1e9, v or [], drawstyle="steps-pre", marker=".")
        cpu.set(ylabel="%", title=f"host {host}: CPU busy", ylim=(0, 100))
        for field, t, v in db.execute(
                "SELECT field, list(ts ORDER BY ts), list(rate ORDER BY ts) FROM rates WHERE host = ? AND "
                r"regexp_matches(field, '^net\.[^.]+\.bytes_(recv|sent)$') GROUP BY field "
                "HAVING max(rate) > 0 ORDER BY field", [host]).fetchall():
            net.plot((np.array(t) - origin) / 1e9, v, drawstyle="steps-pre", marker=".",
                     label=field.removeprefix("net."))
        net.set(ylabel="bytes/s", title=f"host {host}: network")
        if net.lines:
            net.legend(loc="upper right", fontsize="small")
        for ax in (cpu, net):
            for phase, at in steps:
                if at is not None:
                    ax.axvline((at - origin) / 1e9, color="grey", linewidth=0.6, linestyle=":")
                    ax.annotate(phase, ((at - origin) / 1e9, 1), xycoords=("data", "axes fraction"),
                                rotation=90, va="top", fontsize="x-small", color="grey")
    for ax in axes[-1]:
        ax.set_xlabel("time since the run started (s)")
    if len(hosts) < len(every):
        fig.suptitle(f"{len(hosts)} of {len(every)} hosts, the busiest (all: rates.parquet)")
    return _save(fig, path)


def plot_campaign(metric: str, unit: str, labels: list[str], means: np.ndarray, lows: np.ndarray,
                  highs: np.ndarray, out: Path, xs: list[float] | None = None,
                  x_name: str = "") -> list[Path]:
    """<metric>-bars.png, and <metric>-line.png when the points lie along one number `xs`."""
    errors = np.nan_to_num(np.vstack([means - lows, highs - means]))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels)), 4))
    ax.bar(range(len(labels)), means, yerr=errors, capsize=4)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize="small")
    ax.set(ylabel=f"{metric} ({unit})", title=f"{metric}: mean and 95% interval per point")
    written = [_save(fig, out / f"{file_name(metric)}-bars.png")]
    if xs is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.errorbar(xs, means, yerr=errors, marker="o", capsize=4)
        ax.set(xlabel=x_name, ylabel=f"{metric} ({unit})", title=f"{metric} against {x_name}")
        written.append(_save(fig, out / f"{file_name(metric)}-line.png"))
    return written


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
