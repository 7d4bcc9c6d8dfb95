"""A result set's merged/report.html: the run page with every panel's data, plotly.js and
the page's own script inside one file, so that it opens from file:// with no network and no
server (for mail and archives). Its events table carries at most REPORT_EVENTS events, each
host's each kind of record given an equal share (`eventtable.events_sample`), and says so;
events.parquet beside it has them all."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
from netspec.analysis.phases import phase_operations
from netspec.analysis.provenance import host_facts
from netspec.analysis.resultset import MERGED, open_tables, read_summary
from netspec.protocol.runrecord import read_run

from . import distributions, eventtable, fleet, operations, packets, panels, timeline
from .pages import as_text, downloads, packed, render, run_header

REPORT = "report.html"
REPORT_EVENTS = 2000


def write_report(run: Path, out: Path | None = None, events: int = REPORT_EVENTS) -> Path:
    """Write `out`/report.html (`out` is the run's merged/ by default), carrying at most
    `events` events, and return its path.

    Raises:
        NetspecError: run.json cannot be read.
        OSError, duckdb.Error: the result set cannot be read or the file written.
    """
    out = out or run / MERGED
    record = read_run(run)
    origin = timeline.origin_ns(record)
    data = {"timeline": timeline.timeline_figure(record, fleet.folded(record))}
    of = fleet.group_of(record)
    facts = host_facts(run, record.host_names)
    summary = read_summary(out)
    db = open_tables(out)
    try:
        data.update(clocks=panels.clocks(db, origin), links=panels.links(db),
                    resources=panels.resources(db, origin, of, facts),
                    distributions=distributions.distributions(db, of), phases=panels.phases(db, facts),
                    operations=operations.operations(db, origin, phase_operations(db),
                                                     operations.REPORT_POINTS),
                    packets=packets.packets(db, origin, summary.packets if summary is not None else [],
                                            packets.REPORT_POINTS),
                    events=eventtable.events_sample(db, origin, events),
                    triage=panels.triage(db, record, run))
    finally:
        db.close()
    header = run_header(run, record, record.id, [])
    header["page"]["merged"] = True
    # a report's downloads are the files beside it, linked relative to where it is written
    links = [(os.path.relpath(run / name, out), name) for name in downloads(run)
             if name != f"{MERGED}/{REPORT}"]
    html = render("run.html", title=f"run {record.id}", static=True,
                  packed_panels=packed(msgspec.json.encode(as_text(data))),
                  links=links, **{**header, "merged": True})
    path = out / REPORT
    tmp = path.with_name(f".{REPORT}.tmp")
    tmp.write_text(html)
    os.replace(tmp, path)
    return path
