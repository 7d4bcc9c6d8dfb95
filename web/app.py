"""`ns_control serve`'s web app (Starlette): pages for the runs index, a run, a campaign and
two runs compared, and the JSON their panels load. Every path it touches is named by two safe
names under the runs or campaigns root (`catalog.py`); every query parameter is checked and
bound, never pasted into SQL. It only reads: nothing under the roots is changed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from netspec.analysis.phases import phase_operations
from netspec.analysis.provenance import host_facts
from netspec.analysis.resultset import MERGED, open_tables, read_summary
from netspec.protocol.campaignrecord import read_campaign
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import RunRecord, read_run
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from . import distributions, eventtable, fleet, operations, packets, panels, timeline
from .catalog import Catalog, NotFound, inside
from .compare import campaign_view, compare_runs
from .pages import STATIC, as_text, downloads, follows, plotly_js, render, run_header


def _json(data: Any, status: int = 200) -> Response:
    # msgspec writes NaN as null, where the standard library writes invalid JSON; a figure's
    # texts go as text, never markup plotly.js would draw (as_text)
    return Response(msgspec.json.encode(as_text(data)), status_code=status, media_type="application/json")


def _problem(exc: Exception, status: int) -> Response:
    return _json({"error": str(exc)}, status)


def _query_number(request: Request, name: str, kind: type[int] | type[float],
                  default: float | None = None) -> float | None:
    """A numeric query parameter, `default` when absent.

    Raises:
        ValueError: naming the parameter and its value, when it is not a `kind`.
    """
    value = request.query_params.get(name, "")
    if value == "":
        return default
    try:
        return kind(value)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise ValueError(f"query parameter {name}={value!r} is not {what}") from None


def run_panel(run: Path, record: RunRecord, name: str, request: Request) -> Any:
    """One panel's data. `events` takes its filters from the request's query."""
    expand = [g for g in request.query_params.get("expand", "").split(",") if g]
    unknown = sorted(set(expand) - set(fleet.groups(record)))
    if unknown:
        raise NotFound(f"expand={','.join(unknown)}: no such host group ({', '.join(fleet.groups(record))})")
    if name == "timeline":
        return _timeline(run, record, expand)
    merged = (run / MERGED / "summary.json").is_file()
    if name == "live":
        return {"status": RunOutcome.of(record).status, "merged": merged, "follow": follows(record, merged),
                "steps": timeline.step_rows(record),
                "timeline": timeline.timeline_figure(record, fleet.folded(record, expand))}
    if not merged:
        return panels.triage(None, record, run) if name == "triage" else {"merged": False}
    origin = timeline.origin_ns(record)
    db = open_tables(run / MERGED)
    try:
        if name == "clocks":
            return panels.clocks(db, origin)
        if name == "links":
            return panels.links(db)
        if name == "resources":
            return panels.resources(db, origin, fleet.group_of(record), host_facts(run, record.host_names))
        if name == "distributions":
            return distributions.distributions(db, fleet.group_of(record))
        if name == "phases":
            return panels.phases(db, host_facts(run, record.host_names))
        if name == "operations":
            return operations.operations(db, origin, phase_operations(db))
        if name == "packets":
            summary = read_summary(run / MERGED)
            return packets.packets(db, origin, summary.packets if summary is not None else [])
        if name == "triage":
            return panels.triage(db, record, run)
        if name == "events":
            q = request.query_params
            return eventtable.events(db, origin, text=q.get("text", ""), host=q.get("host", ""),
                                 component=q.get("component", ""), entity=q.get("entity", ""),
                                 tag=_query_number(request, "tag", int),
                                 since_ms=_query_number(request, "since", float),
                                 until_ms=_query_number(request, "until", float),
                                 offset=_query_number(request, "offset", int, 0),
                                 limit=_query_number(request, "limit", int, 100))
    finally:
        db.close()
    raise NotFound(f"no panel {name!r}")


def _timeline(run: Path, record: RunRecord, expand: list[str]) -> dict[str, Any]:
    """The phase timeline, and on it the programs' events where the run has a result set."""
    run_bars = fleet.folded(record, expand)
    figure = timeline.timeline_figure(record, run_bars)
    if (run / MERGED / "summary.json").is_file():
        db = open_tables(run / MERGED)
        try:
            ticks = panels.timeline_events(db, timeline.origin_ns(record), fleet.rows_of(record, run_bars))
        finally:
            db.close()
        if ticks is not None:
            figure["data"].append(ticks)
    return figure


PANELS = ("timeline", "live", "phases", "operations", "packets", "clocks", "links", "resources",
          "distributions", "triage", "events")


def create_app(runs: Path, campaigns: Path) -> Starlette:
    """The app over a runs root and a campaigns root."""
    catalog = Catalog(runs, campaigns)

    def guarded(handler: Callable[[Request], Response]) -> Callable[[Request], Response]:
        def handle(request: Request) -> Response:
            try:
                return handler(request)
            except (NotFound, FileNotFoundError) as exc:
                return _page_or_json(request, exc, 404)
            except (NetspecError, ValueError) as exc:
                return _page_or_json(request, exc, 400)
        return handle

    def _page_or_json(request: Request, exc: Exception, status: int) -> Response:
        if request.url.path.startswith("/api/"):
            return _problem(exc, status)
        return HTMLResponse(render("error.html", title="not found" if status == 404 else "bad request",
                                   message=str(exc)), status_code=status)

    def _run(request: Request) -> Path:
        return catalog.run_path(f"{request.path_params['experiment']}/{request.path_params['run']}")

    def index(request: Request) -> Response:
        runs_list, campaigns_list, unreadable = catalog.index()
        return HTMLResponse(render("index.html", title="netspec runs", runs=runs_list,
                                   campaigns=campaigns_list, unreadable=unreadable,
                                   runs_root=str(catalog.runs_root),
                                   campaigns_root=str(catalog.campaigns_root)))

    def run_page(request: Request) -> Response:
        path = _run(request)
        record = read_run(path)
        ref = f"{request.path_params['experiment']}/{request.path_params['run']}"
        return HTMLResponse(render("run.html", title=f"run {record.id}",
                                   **run_header(path, record, ref, downloads(path)), static=False))

    def panel(request: Request) -> Response:
        name = request.path_params["panel"]
        if name not in PANELS:
            raise NotFound(f"no panel {name!r}: one of {', '.join(PANELS)}")
        path = _run(request)
        return _json(run_panel(path, read_run(path), name, request))

    def download(request: Request) -> Response:
        path = _run(request)
        name, offered = request.path_params["name"], downloads(path)
        if name not in offered:
            raise NotFound(f"{name}: not a file this run offers ({', '.join(offered)})")
        served = inside(path, name)  # and still in the run, as it was when offered
        if served is None:
            raise NotFound(f"{name}: leads out of the run by a link: not served")
        return FileResponse(served, filename=Path(name).name)

    def campaign_page(request: Request) -> Response:
        path = catalog.campaign_path(f"{request.path_params['experiment']}/{request.path_params['id']}")
        record = read_campaign(path)
        view = campaign_view(record, catalog.run_ref)
        return HTMLResponse(render("campaign.html", title=f"campaign {record.id}", state=record, view=view))

    def compare_page(request: Request) -> Response:
        refs = [request.query_params.get(k, "") for k in ("a", "b")]
        if not all(refs):
            raise ValueError("compare needs two runs: /compare?a=EXPERIMENT/ID&b=EXPERIMENT/ID")
        a, b = (catalog.run_path(r) for r in refs)
        return HTMLResponse(render("compare.html", title="compare", a=refs[0], b=refs[1],
                                   view=compare_runs(a, b)))

    def plotly(request: Request) -> Response:
        return Response(plotly_js(), media_type="application/javascript",
                        headers={"Cache-Control": "max-age=86400"})

    return Starlette(routes=[
        Route("/", guarded(index)),
        Route("/run/{experiment}/{run}", guarded(run_page)),
        Route("/run/{experiment}/{run}/file/{name:path}", guarded(download)),
        Route("/api/run/{experiment}/{run}/{panel}", guarded(panel)),
        Route("/campaign/{experiment}/{id}", guarded(campaign_page)),
        Route("/compare", guarded(compare_page)),
        Route("/static/plotly.min.js", plotly),
        Mount("/static", StaticFiles(directory=STATIC)),
    ])
