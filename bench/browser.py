"""The results browser's budgets, in a real headless Chromium (1400 x 900), for the demo's run
and for a run of `--hosts` local daemons (1000 by default, as bench/scale.py makes large
fleets: a `sleep` per host, node steps, CAMP sampling each host once a second):

  first paint      the browser's own first contentful paint of the run page     <= 500 ms
  all panels       from the navigation until every panel drew, the folded ones
                   opened as soon as the page was ready                         <= 2000 ms
  slowest panel    the slowest /api/ panel response the page fetched            <= 2000 ms
  page height      the page's height before the user asks for more, in screens  <= 3
  report.html      the demo's and the fleet's, in MB                            <= 2
                   and each opens from file:// with no request off the file and no console error

    cd bench && ../.venv/bin/python browser.py [--hosts 1000] [--repeat 3] [--events 0]

`--events N` also grows a copy of the demo's run to N events (DuckDB repeats its rows, each
copy shifted in time) and measures it too. Each page is opened `--repeat` times, each a fresh
navigation from about:blank; figures are medians. Prints a line per page, then one JSON
object as the last line (the large run's figures at the top level, as the budgets name them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from browser import UNFOLD, UNFOLDED, chromium, console_errors, open_page, serving

REPO = Path(__file__).parent.parent
SCREEN = (1400, 900)
BUDGETS = {"first_paint_ms": 500, "all_panels_ms": 2000, "slowest_panel_ms": 2000,
           "page_screens": 3, "report_html_mb": 2}


def fleet_text(n: int) -> str:
    """N hosts in two host groups (web, and a fifth of them db), a `sleep` on each."""
    db = n // 5
    return "\n".join([
        "experiment: browser-bench-fleet",
        f"hosts: {{web: {{count: {n - db}}}, db: {{count: {db}}}}}",
        "components:",
        "  w: {group: web, command: [sleep, '3600'], stop: collect}",
        "  d: {group: db, command: [sleep, '3600'], stop: collect}",
        "services: {camp: {interval_ms: 1000}}",
        "schedule: [launch, sync_clocks, start_logging, stop_logging, collect]"]) + "\n"


def grow(run: Path, events: int) -> tuple[int, int]:
    """Repeat the run's events (and intervals) until there are `events`; returns the counts."""
    merged = run / "merged"
    db = duckdb.connect()
    have = db.execute(f"SELECT count(*), max(ts) - min(ts) + 1 FROM '{merged}/events.parquet'").fetchone()
    copies = -(-events // have[0])
    for table, order in (("events", "ts"), ("intervals", "end_ts")):
        columns = [c for (c,) in db.execute(f"SELECT column_name FROM (DESCRIBE '{merged}/{table}.parquet')"
                                             ).fetchall()]
        moved = {"events": ("ts", "ts_local"), "intervals": ("start_ts", "end_ts")}[table]
        select = ", ".join(f"{c} + k * {have[1]} AS {c}" if c in moved else c for c in columns)
        db.execute(f"""COPY (SELECT {select} FROM '{merged}/{table}.parquet', range({copies}) AS r(k)
                            ORDER BY {order} LIMIT {events if table == 'events' else events // 10})
                       TO '{merged}/{table}.tmp.parquet' (FORMAT parquet, ROW_GROUP_SIZE 1000000)""")
        Path(merged / f"{table}.tmp.parquet").replace(merged / f"{table}.parquet")
    return tuple(db.execute(f"SELECT count(*) FROM '{merged}/{t}.parquet'").fetchone()[0]
                 for t in ("events", "intervals"))


def measure(driver, url: str, repeat: int) -> dict[str, float]:
    """Medians over `repeat` fresh loads: first contentful paint, the page's height before
    asking for more, the time to every panel drawn (the folded ones opened at once), and
    the slowest /api/ response the page waited for."""
    paints, heights, alls, slowest = [], [], [], []
    for _ in range(repeat):
        driver.get("about:blank")
        open_page(driver, url, timeout=120, unfold=False)
        heights.append(driver.execute_script(
            "return document.documentElement.scrollHeight / window.innerHeight"))
        opened = driver.execute_script(UNFOLD)
        deadline = time.monotonic() + 120
        # each opened section fetches and draws its panels: done when the page draws none
        while not driver.execute_script(UNFOLDED, opened):
            if time.monotonic() > deadline:
                raise SystemExit(f"{url}: the opened panels did not draw within 120 s")
            time.sleep(0.01)
        alls.append(driver.execute_script("return performance.now()"))
        paint = driver.execute_script("""const p = performance.getEntriesByName('first-contentful-paint')[0]
            || performance.getEntriesByName('first-paint')[0]; return p ? p.startTime : null""")
        if paint is None:
            raise SystemExit(f"{url}: the browser reported no paint")
        paints.append(paint)
        slowest.append(driver.execute_script("""return Math.max(0, ...performance.getEntriesByType('resource')
            .filter((e) => e.name.includes('/api/')).map((e) => e.duration))"""))
        if errors := console_errors(driver):
            raise SystemExit(f"{url}: console errors: {errors}")
    return {"first_paint_ms": statistics.median(paints), "all_panels_ms": statistics.median(alls),
            "slowest_panel_ms": statistics.median(slowest), "page_screens": statistics.median(heights),
            "page_height_px": statistics.median(heights) * SCREEN[1]}


def report_offline(driver, report: Path) -> None:
    """Open report.html from file:// and check it drew with nothing fetched off the file."""
    open_page(driver, report.as_uri(), timeout=60)
    off = driver.execute_script("""return performance.getEntriesByType('resource').map((e) => e.name)
        .filter((n) => !n.startsWith('file:') && !n.startsWith('data:'))""")
    if off or (errors := console_errors(driver)):
        raise SystemExit(f"{report}: fetched {off} / console errors {errors if not off else ''}")


def run(root: Path, text: str, name: str, env: dict[str, str]) -> Path:
    (root / f"{name}.yaml").write_text(text)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "netspec.controller.cli", "run", f"{name}.yaml", "--quiet"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{name}: ns_control run exited {done.returncode}:\n"
                         f"{done.stdout[:3000]}\n...\n{done.stderr[-3000:]}")
    print(f"ran {name} in {time.monotonic() - started:.0f} s")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--events", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="netspec-bench-browser-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "NETSPEC_HOME": str(root / "home")}
        subprocess.run([sys.executable, "-m", "netspec.controller.cli", "demo", "--quiet"], cwd=root, env=env,
                       check=True, capture_output=True)
        [demo] = (root / "runs" / "stimulus-response").iterdir()
        pages = {"demo": f"/run/stimulus-response/{demo.name}"}
        if args.events:
            large = root / "runs" / "stimulus-response-large" / demo.name
            shutil.copytree(demo, large)
            counts = grow(large, args.events)
            print(f"grew a copy of the demo's run to {counts[0]:,} events and {counts[1]:,} intervals")
            pages["events"] = f"/run/stimulus-response-large/{demo.name}"
        if args.hosts:
            run(root, fleet_text(args.hosts), "fleet", env)
            [fleet] = (root / "runs" / "browser-bench-fleet").iterdir()
            pages["fleet"] = f"/run/browser-bench-fleet/{fleet.name}"
        reports = {"demo": demo / "merged" / "report.html"}
        if args.hosts:
            reports["fleet"] = fleet / "merged" / "report.html"
        reports_mb = {page: path.stat().st_size / 1e6 for page, path in reports.items()}
        report_mb = max(reports_mb.values())
        with serving(root) as url, chromium() as driver:
            driver.set_window_size(*SCREEN)
            figures = {page: measure(driver, url + path, args.repeat) for page, path in pages.items()}
            for report in reports.values():
                report_offline(driver, report)
    print(f"{'page':8} {'first paint':>12} {'all panels':>11} {'slowest panel':>14} {'height':>8}"
          f"   (median of {args.repeat}, {SCREEN[0]}x{SCREEN[1]})")
    for page, f in figures.items():
        print(f"{page:8} {f['first_paint_ms']:9.0f} ms {f['all_panels_ms']:8.0f} ms "
              f"{f['slowest_panel_ms']:11.0f} ms {f['page_screens']:5.2f} screens")
    for page, mb in reports_mb.items():
        print(f"report.html ({page}) {mb:.3f} MB, opens from file:// with nothing fetched")
    top = figures.get("fleet", figures["demo"])
    over = [f"{page} {key} {f[key]:.4g} > {BUDGETS[key]}" for page, f in figures.items()
            for key in BUDGETS if key in f and f[key] > BUDGETS[key]]
    over += [f"report_html_mb {report_mb:.3g} > 2"] if report_mb > BUDGETS["report_html_mb"] else []
    print("budgets: " + ("all met" if not over else "OVER: " + "; ".join(over)))
    print(json.dumps({"hosts": args.hosts if "fleet" in figures else 2,
                      **{k: round(v, 1) for k, v in top.items()}, "report_html_mb": round(report_mb, 3),
                      **{f"{page}_report_html_mb": round(mb, 3) for page, mb in reports_mb.items()},
                      "budgets_met": not over,
                      **{f"{page}_{k}": round(v, 1) for page, f in figures.items() for k, v in f.items()}}))


if __name__ == "__main__":
    main()
