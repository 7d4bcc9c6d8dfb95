"""Time to first paint of the results browser's run page, in a real headless Chromium, for the
demo's run and for the same run with its events table grown to 20 million rows (and its
intervals to 2 million), against the index page served by the same server in the same window.

    cd bench && ../.venv/bin/python browser.py [--events 20000000] [--repeat 3]

The demo runs first (`ns_control demo` in a temporary directory). The large run is a copy of
it whose events.parquet and intervals.parquet DuckDB rewrites with the rows repeated (each
copy shifted in time), so every panel queries 20M real-shaped rows. Each page is opened
`--repeat` times, each a fresh navigation; printed: first contentful paint (the browser's own
figure), and 'ready' (every panel drawn, the page's own mark), median of the repeats.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
from browser import chromium, open_page, serving

REPO = Path(__file__).parent.parent


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
    """Median first contentful paint and time to every panel drawn over `repeat` loads, each a
    fresh navigation (from about:blank) in one tab."""
    paints, readies = [], []
    for _ in range(repeat):
        driver.get("about:blank")
        started = time.monotonic()
        open_page(driver, url, timeout=120)
        readies.append((time.monotonic() - started) * 1e3)
        paint = driver.execute_script("""const p = performance.getEntriesByName('first-contentful-paint')[0]
            || performance.getEntriesByName('first-paint')[0]; return p ? p.startTime : null""")
        if paint is not None:
            paints.append(paint)
    if not paints:
        raise SystemExit(f"{url}: the browser reported no paint in {repeat} loads")
    return {"first_paint_ms": statistics.median(paints), "ready_ms": statistics.median(readies)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="netspec-bench-browser-") as tmp:
        root = Path(tmp)
        subprocess.run([sys.executable, "-m", "netspec.controller.cli", "demo", "--quiet"], cwd=root,
                       check=True, capture_output=True)
        [demo] = (root / "runs" / "stimulus-response").iterdir()
        large = root / "runs" / "stimulus-response-large" / demo.name
        shutil.copytree(demo, large)
        started = time.monotonic()
        counts = grow(large, args.events)
        print(f"grew a copy of the demo's run to {counts[0]:,} events and {counts[1]:,} intervals "
              f"in {time.monotonic() - started:.0f} s")
        with serving(root) as url, chromium() as driver:
            pages = {"index": "/", "demo": f"/run/stimulus-response/{demo.name}",
                     "large": f"/run/stimulus-response-large/{demo.name}"}
            figures = {page: measure(driver, url + path, args.repeat) for page, path in pages.items()}
    print(f"{'page':8} {'first paint':>12} {'every panel drawn':>18}   (median of {args.repeat})")
    for page, f in figures.items():
        print(f"{page:8} {f['first_paint_ms']:10.0f} ms {f['ready_ms']:16.0f} ms")
    print(f"target: the run page's first paint within 2000 ms; large/demo ready "
          f"{figures['large']['ready_ms'] / figures['demo']['ready_ms']:.1f}x")
    print(json.dumps({"events": counts[0], "intervals": counts[1], "repeat": args.repeat, **{
        f"{page}_{k}": round(v, 1) for page, f in figures.items() for k, v in f.items()}}))


if __name__ == "__main__":
    main()
