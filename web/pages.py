"""The browser's HTML: Jinja2 templates (autoescaped), the page data they embed as JSON, and
plotly.js as its Python package ships it, so that no page fetches anything from the
internet. Served pages link /static/; a report inlines all of it."""

from __future__ import annotations

import functools
import gzip
import html
import importlib.util
import re
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import msgspec
import numpy as np
from netspec.analysis.faults import Recovery, recoveries
from netspec.analysis.provenance import placed
from netspec.analysis.resultset import open_tables, read_summary
from netspec.analysis.units import duration_text, rate_text
from netspec.protocol.names import NAME
from netspec.protocol.runoutcome import STATUSES, RunOutcome
from netspec.protocol.runrecord import MERGED, RunRecord, process_start

from . import fleet
from .catalog import inside
from .faults import fault_rows
from .timeline import OUTCOME_COLOURS, step_rows

HERE = Path(__file__).parent
STATIC = HERE / "static"
# What a run page offers to download, relative to the run directory.
DOWNLOADS = ("experiment.yaml", "run.json", "merged/summary.json", "merged/trace.json",
             "merged/narration.txt", "merged/report.html")
PLACED_WHOLE = 8  # container hosts a run page's placement block names each with its container


@functools.cache
def plotly_js() -> bytes:
    """plotly.min.js from the installed plotly package (found without importing plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the plotly package is not installed: pip install plotly")
    return (Path(spec.submodule_search_locations[0]) / "package_data" / "plotly.min.js").read_bytes()


# The markup of netspec's own hover texts: plotly.js draws a subset of HTML in every text of a
# figure (names, ticks, hovers, annotations), a link among it.
_OWN_TAGS = ("<br>", "<b>", "</b>", "<extra>", "</extra>")


def _text(value: str) -> str:
    shown = html.escape(value, quote=False)
    for tag in _OWN_TAGS:
        shown = shown.replace(html.escape(tag), tag)
    return shown


def _strings_as_text(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {k: _strings_as_text(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strings_as_text(v) for v in value]
    return value


def as_text(data: Any) -> Any:
    """`data` with every string of each Plotly figure in it (a map with `data` and `layout`)
    escaped, so that plotly.js shows markup from a file (a phase named `<a href=...>`, from a
    received run) as the text it is, never as a link; its entities it shows as their
    characters. netspec's own line breaks and bold stay. What is not a figure is left as it
    is: the page's script writes it as text (`esc`)."""
    if isinstance(data, dict):
        if isinstance(data.get("data"), list) and isinstance(data.get("layout"), dict):
            return _strings_as_text(data)
        return {k: as_text(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [as_text(v) for v in data]
    return data


def embedded(data: Any) -> str:
    """`data` as JSON that is safe inside a <script> element (no '<', '>' or '&' in it), its
    figures' texts as text (`as_text`)."""
    text = msgspec.json.encode(as_text(data)).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def inline_script(js: bytes | str) -> str:
    """JavaScript to inline in a <script> element: a literal '</script' would end it early."""
    text = js.decode() if isinstance(js, bytes) else js
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


def when(ns: int | None) -> str:
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def plain(value: float) -> str:
    """A number as people read it: '0.0123', '17.6', '1,024', never '1.02e+03'."""
    if value != value:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) >= 1e-3 or value == 0 else f"{value:.2e}"


def p_text(p: float) -> str:
    """A test's p-value as said: 'p=0.031'; a p that underflowed to 0 is 'p < 1e-300', never 'p=0'."""
    return "p < 1e-300" if p < 1e-300 else f"p={p:.2g}"


def status_class(status: str | None) -> str:
    return status if status in STATUSES else "other"


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True)
    env.filters.update(when=when, status_class=status_class, duration=duration_text, embedded=embedded,
                       plain=plain, p_text=p_text, rate=lambda v: rate_text(v, "B/s"))
    env.globals.update(outcome_colours=OUTCOME_COLOURS, packed_html=packed_html)
    return env


# A report's packed text: gzip, then base 85 in these characters (none of < > & / \ or a quote,
# so that no sequence of them ends or escapes the <script> element it is in); the page's
# script (netspec.js `unpack`) inflates it with the browser's own DecompressionStream.
PACK_ALPHABET = np.frombuffer(bytes(c for c in range(33, 127) if chr(c) not in "<>&/\\\"'`")[:85], np.uint8)


def packed(data: bytes) -> str:
    """`data` gzipped and written in base 85 (PACK_ALPHABET): 4 bytes to 5 characters, the
    last group's padding said by a leading digit (0-3)."""
    raw = gzip.compress(data, 9, mtime=0)
    pad = -len(raw) % 4
    words = np.frombuffer(raw + b"\0" * pad, dtype=">u4").astype(np.uint64)
    digits = np.empty((len(words), 5), np.uint8)
    for i in range(4, -1, -1):
        digits[:, i] = words % 85
        words //= 85
    return str(pad) + PACK_ALPHABET[digits].tobytes().decode()


@functools.cache
def packed_plotly() -> str:
    return packed(plotly_js())


def packed_html(markup: str) -> str:
    """A report's part of the page that grows with its hosts (its components' exits and
    files, a host's every name), packed as its data are: 300 hosts' rows and links are
    125 kB of HTML, a tenth of it packed; the page's script writes them back in
    (netspec.js `unpack`). The markup is the template's own, escaped where it was made."""
    return packed(str(markup).encode())


def render(template: str, **context: Any) -> str:
    context.setdefault("static", False)
    if context["static"]:
        context.update(inline_css=(STATIC / "netspec.css").read_text(),
                       inline_js=inline_script((STATIC / "netspec.js").read_text()),
                       packed_plotly=packed_plotly(), pack_alphabet=PACK_ALPHABET.tobytes().decode())
    return _environment().get_template(template).render(**context)


def exits(record: RunRecord) -> list[dict[str, Any]]:
    """How each component's process ended, as run.json has it: its exit status (a negative
    one the signal that ended it), how long it ran and its command."""
    return [{"component": name, "returncode": end.returncode,
             "status": "ok" if end.returncode == 0 else
             (f"killed by signal {-end.returncode}" if end.returncode < 0 else f"exit {end.returncode}"),
             "ran": duration_text(end.duration_s * 1e9) if end.duration_s is not None else "-",
             "command": " ".join(end.argv)} for name, end in sorted(record.components.items())]


def checks(path: Path, record: RunRecord) -> dict[str, Any]:
    """What the experiment's check and the merge warned of, and each pair's causality check
    (summary.json: ends that land before their starts), said as `report` says them."""
    summary = read_summary(path / MERGED)
    plan = list(record.plan.warnings) if record.plan is not None else []
    causality = []
    for c in summary.causality if summary is not None else []:
        causality.append({
            "pair": c.pair, "matched": c.matched, "violations": c.violations,
            "beyond_bound": c.beyond_bound, "ok": c.violations == 0,
            "text": "every end after its start" if c.violations == 0 else
            (f"{c.violations} end(s) before their start, the worst by {duration_text(c.worst_ns)}; "
             f"{c.beyond_bound} beyond the two clocks' bounds")})
    warnings = plan + (list(summary.warnings) if summary is not None else [])
    return {"warnings": warnings, "alike": alike(warnings), "causality": causality,
            "merged": summary is not None}


# Words with a digit in them: host, component and process names, numbers, paths.
_NAMED = re.compile(r"[\w./-]*\d[\w./-]*")


def alike(warnings: list[str]) -> list[dict[str, Any]]:
    """The warnings in runs of those alike but for their names and numbers (one per host of a
    fleet: "host web-07: CAMP: component w: process 4711 has exited"), in the order first said:
    each run's first NAMES_SHOWN `shown` (each a `folded_warning`), the `rest` on request,
    where a run has more than NAMES_WHOLE."""
    runs: dict[str, list[str]] = {}
    for w in warnings:
        runs.setdefault(_NAMED.sub("#", w), []).append(w)
    out = []
    for said in runs.values():
        keep = said if len(said) <= NAMES_WHOLE else said[:NAMES_SHOWN]
        out.append({"shown": [folded_warning(w) for w in keep],
                    "rest": [folded_warning(w) for w in said[len(keep):]]})
    return out


# A warning that names more than NAMES_WHOLE hosts (or components) in a row names the first
# NAMES_SHOWN and how many in all; the whole list is on request. One warning naming each of a
# fleet's 1000 hosts is a page of names that pushed the page past three screens.
NAMES_WHOLE = 5
NAMES_SHOWN = 3
_NAME_RUN = re.compile(rf"(?<![\w.:/-])((?:[\w.:/-]+, ){{{NAMES_WHOLE},}}[\w.:/-]+)")


def folded_warning(text: str) -> dict[str, Any]:
    """A warning as the page shows it before the user asks for more: `shown`, its runs of
    names folded to their first NAMES_SHOWN and their count; `whole`, as it was said; `folded`,
    how many names `shown` leaves out."""
    left_out = 0

    def fold(match: re.Match[str]) -> str:
        nonlocal left_out
        names = match.group(1).split(", ")
        left_out += len(names) - NAMES_SHOWN
        return f"{', '.join(names[:NAMES_SHOWN])} and {len(names) - NAMES_SHOWN} more ({len(names)} in all)"

    shown = _NAME_RUN.sub(fold, text)
    return {"shown": shown, "whole": text, "folded": left_out}


def run_header(path: Path, record: RunRecord, ref: str, files: list[str]) -> dict[str, Any]:
    """What a run page shows before any panel loads: who, when, how it ended (its outcome,
    as `ns_control show` says it: `RunOutcome`), its steps, its components' exits, what was
    warned of and the causality check."""
    outcome = RunOutcome.of(record)
    merged = (path / MERGED / "summary.json").is_file()
    summary = read_summary(path / MERGED) if merged else None
    follow = follows(record, merged)
    # ended, no result set yet, and its controller alive: it is merging the run now (a fetch
    # meanwhile would merge it twice)
    merging = follow and not outcome.running and not merged
    return {
        "ref": ref, "record": record, "status": outcome.status, "steps": step_rows(record),
        "exits": exits(record), "checks": checks(path, record),
        "downloads": files, "hosts": record.host_names, "error": outcome.error, "merged": merged,
        "cut_short": record.cut_short_texts(), "overview": fleet.overview(record),
        "placement": placed(record, whole=len(record.hosts) <= PLACED_WHOLE),
        "merging": merging,
        "operations": summary.operations if summary is not None else 0,  # its panel opens if any
        "packets": bool(summary.packets) if summary is not None else False,  # and this one if it captured
        # each fault's recovery, where the run logged operations to recover by
        "faults": fault_rows(record, _recoveries(path) if summary is not None and summary.faults
                             and summary.operations else []),
        "page": {"ref": ref, "id": record.id, "status": outcome.status, "merged": merged,
                 "failed": outcome.troubled, "follow": follow, "merging": merging}}


def _recoveries(path: Path) -> list[Recovery]:
    with open_tables(path / MERGED) as db:
        return recoveries(db)


def follows(record: RunRecord, merged: bool) -> bool:
    """Whether a run's page keeps following it: while it runs, and once it ended while its
    controller (on this machine, alive) is still making its result set."""
    if RunOutcome.of(record).running:
        return True
    controller = record.controller
    return (not merged and record.merge is None and controller.host == socket.gethostname()
            and bool(controller.pid) and controller.pid_started is not None
            and process_start(controller.pid) == controller.pid_started)


def downloads(run: Path) -> list[str]:
    """The run's files a page links to: the fixed ones and every Parquet table, if present;
    then each component's stdout, stderr and handed-back files (`component_files`)."""
    tables = sorted(f"merged/{p.name}" for p in (run / "merged").glob("*.parquet"))
    fixed = [name for name in (*DOWNLOADS[:2], *tables, *DOWNLOADS[2:]) if (run / name).is_file()
             and inside(run, name)]
    return fixed + component_files(run)


def component_files(run: Path) -> list[str]:
    """hosts/HOST/COMPONENT/{stdout,stderr} and hosts/HOST/COMPONENT/files/NAME, every part a
    checked name (protocol/names.py: a part that is not one is not offered) and every file a
    regular file in the run, not a link (nor in a directory that is a link out of the run)."""
    out = []
    for component in sorted((run / "hosts").glob("*/*/")):
        host = component.parent.name
        if not (NAME.fullmatch(host) and NAME.fullmatch(component.name)) or component.name == "streams":
            continue
        files = [component / "stdout", component / "stderr", *sorted((component / "files").glob("*"))]
        named = [f"hosts/{host}/{component.name}/{f.relative_to(component).as_posix()}" for f in files
                 if NAME.fullmatch(f.name) and f.is_file() and not f.is_symlink()]
        out += [name for name in named if inside(run, name)]
    return out
