"""A campaign's sections of an experiment file (sweep:, repeat:, hooks:), checked: the
sweep's points, the stop rule, the hooks."""

from __future__ import annotations

import itertools
import re
from typing import Any

import yaml
from netspec.analysis.predicate import check_predicate

from .declared import close_to, listing, of_components
from .groups import check_host_axis, host_setting, with_host_setting
from .links import check_link_axis, link_setting, with_link_setting
from .model import DEFAULT_HOST, Campaign, Component, Hook, Host
from .sourcefile import Path_, SourceFile, suggest

CAMPAIGN_KEYS = {"sweep", "repeat", "hooks"}
# A campaign's directory is RUNS/campaigns/<experiment>/<id>: one root holds its runs and it.
CAMPAIGNS = "campaigns"
HOOK_STAGES = ("presetup", "setup", "cleanup", "postcleanup")


def point_label(point: dict[str, Any]) -> str:
    """How a point is named in the campaign's output, its record and its report."""
    return " ".join(f"{k}={v}" for k, v in point.items()) or "(one point)"


def point_text(text: str, point: dict[str, Any]) -> str:
    """The experiment file of one point: the campaign's sections gone, the point's values in
    its components' params. It is what the run directory keeps, and reruns."""
    data = yaml.safe_load(text)
    with_point(data, point)
    return yaml.safe_dump(data, sort_keys=False)


def with_point(data: dict[str, Any], point: dict[str, Any]) -> None:
    """`data` (a campaign file's) made one point's: the campaign's sections gone, the point's
    values in its components' params, its hosts' settings and its named links' conditions."""
    for key in CAMPAIGN_KEYS:
        data.pop(key, None)
    for key, value in point.items():
        if with_host_setting(data, key, value) or with_link_setting(data, key, value):
            continue
        component, _, param = key.rpartition(".")
        spec = data["components"][component]
        spec["params"] = {**(spec.get("params") or {}), param: value}


def sweep_values(spec: list[Any] | dict[str, float]) -> list[Any]:
    """A list as it is; {from, to, step} or {from, to, factor} with both ends included."""
    if isinstance(spec, list):
        return spec
    start, stop = spec["from"], spec["to"]
    values, v, k = [], start, 0
    while v <= stop * (1 + 1e-9) + 1e-12:
        values.append(int(v) if float(v).is_integer() and all(
            isinstance(x, int) for x in spec.values()) else v)
        k += 1
        v = start * spec["factor"] ** k if "factor" in spec else start + spec["step"] * k
    return values


def _sweep_axis(src: SourceFile, key: str, spec: list[Any] | dict[str, float],
                components: dict[str, dict[str, Any]]) -> list[Any]:
    where: Path_ = ("sweep", "params", key)
    component, _, param = key.rpartition(".")
    src.known("component", component, components, where)
    declared = components[component].get("params") or {}
    if param not in declared:
        src.error(f"component '{component}' has no param '{param}'{suggest(param, declared)}: a swept "
                  "param is declared in the component's params: with the value it has outside the sweep",
                  where)
    if isinstance(spec, dict) and ("step" in spec) == ("factor" in spec):
        src.error("a range takes one of 'step' or 'factor'", where)
    values = sweep_values(spec)
    if not values:
        src.error(f"the range from {spec['from']} to {spec['to']} holds no value", where)
    for i, value in enumerate(values):
        if not _same_type(declared[param], value):
            at: Path_ = (*where, i) if isinstance(spec, list) else where
            src.error(f"{value!r} is {_kind(value)}, and param '{param}' of component '{component}' is "
                      f"{_kind(declared[param])} ({declared[param]!r}): the program would be given "
                      "another type at this point than outside the sweep", at)
    return values


def _check_repeated(src: SourceFile, sweep: dict[str, Any], axes: dict[str, list[Any]],
                    points: tuple[dict[str, Any], ...]) -> None:
    """Two points of one label would be one point run twice, each counted apart under one
    name: an error, at the value given again (or, zipped, at the sweep), every one at once."""
    labels = [point_label(p) for p in points]
    again = sorted({label for label in labels if labels.count(label) > 1})
    if not again:
        return
    how = "to run a point more than once, give repeat: {runs: N}"
    if sweep.get("mode") == "zip":
        with src.checking():
            src.error(f"points {', '.join(again)} are given more than once: {how}", ("sweep", "params"))
        return
    for key, values in axes.items():
        texts = [str(v) for v in values]
        for j, text in enumerate(texts):
            first = texts.index(text)
            if first < j:
                spec = sweep["params"][key]
                at: Path_ = ("sweep", "params", key, *([j] if isinstance(spec, list) else []))
                with src.checking():
                    src.error(f"{values[j]!r} is given again (first at [{first}]): two points would both be "
                              f"labelled {key}={text}; {how}", at)


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            type(None): "null", list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _same_type(declared: Any, value: Any) -> bool:
    """Whether a swept `value` has the type of the param's `declared` one: an integer where a
    number is declared too; anything where null is."""
    if declared is None or type(value) is type(declared):
        return True
    return type(declared) is float and type(value) is int


def _check_metric(src: SourceFile, metric: str, data: dict[str, Any],
                  components: tuple[Component, ...]) -> None:
    """`metric` names something a run of this file can have (analysis/metrics.py makes the
    names): a pair of analysis.pairs, an interval entity a program declares, or the CPU of a
    host or of a component on its own host that CAMP samples."""
    where: Path_ = ("repeat", "metric")
    pairs = list((data.get("analysis") or {}).get("pairs") or {})
    hosts = list(data.get("hosts") or {DEFAULT_HOST: {}})
    camp = (data.get("services") or {}).get("camp")
    if metric.startswith("interval "):
        name = metric.removeprefix("interval ")
        if "/" not in name and name not in pairs:
            src.error(f"'{metric}': no pair '{name}' in analysis.pairs{suggest(name, pairs)} "
                      "(an interval is a pair's name or an interval entity's GROUP/name)", where)
        entities = of_components(list(components))
        intervals = sorted(n for kind, n in entities or () if kind == "interval")
        if "/" in name and entities is not None and name not in intervals:
            close = close_to(name, intervals)
            src.error(f"'{metric}': no program of the file declares an interval '{name}' (they declare: "
                      f"{listing(intervals)}){f' (did you mean {close!r}?)' if close else ''}", where)
        return
    cpu = re.fullmatch(r"cpu busy (\S+)", metric) or re.fullmatch(r"cpu of (\S+) on (\S+)", metric)
    if cpu is None:
        src.error(f"unknown metric '{metric}': a metric is 'interval NAME', 'cpu busy HOST' "
                  "or 'cpu of COMPONENT on HOST'", where)
    host = cpu[cpu.re.groups]
    src.known("host", host, hosts, where)
    if camp is None:
        src.error(f"'{metric}': CPU is sampled by CAMP, and this file has no services: camp:", where)
    if cpu.re.groups == 2:
        name = cpu[1]
        src.known("component", name, data["components"], where)
        on = next((c.host for c in components if c.name == name), host)
        if on != host:
            src.error(f"'{metric}': component '{name}' runs on host '{on}', not '{host}'", where)
        sampled = camp.get("processes")
        if sampled is not None and name not in sampled:
            src.error(f"'{metric}': CAMP samples only the processes of "
                      f"{', '.join(sampled) or 'no component'} (services.camp.processes), "
                      f"not '{name}'", where)


def campaign_of(src: SourceFile, data: dict[str, Any], hosts: dict[str, Host],
                components: tuple[Component, ...], written: dict[str, Any] | None = None) -> Campaign:
    """The campaign of `data` (its groups expanded; `written`, the file as written, whose
    components and hosts, groups among them, the sweep names)."""
    written = written or data
    sweep = data.get("sweep") or {"params": {}}
    axes = {}
    for key, spec in sweep["params"].items():
        with src.checking():
            if host_setting(key) is not None:
                axes[key] = sweep_values(spec)
                check_host_axis(src, written, key, axes[key])
            elif link_setting(key) is not None:
                axes[key] = sweep_values(spec)
                check_link_axis(src, written, key, axes[key])
            else:
                axes[key] = _sweep_axis(src, key, spec, written["components"])
    if sweep.get("mode") == "zip" and len({len(v) for v in axes.values()}) > 1:
        lengths = ", ".join(f"{k}: {len(v)}" for k, v in axes.items())
        src.error(f"zip takes lists of one length ({lengths})", ("sweep", "mode"))
    combine = zip if sweep.get("mode") == "zip" else itertools.product
    points = tuple(dict(zip(axes, values, strict=True)) for values in combine(*axes.values()))
    _check_repeated(src, sweep, axes, points)
    repeat = data.get("repeat") or {}
    if "until" in repeat:
        if "metric" not in repeat:
            src.error("'until' needs the 'metric' its statistics are of", ("repeat", "until"))
        try:
            check_predicate(repeat["until"])
        except ValueError as exc:
            src.error(str(exc), ("repeat", "until"))
    if "metric" in repeat:
        with src.checking():
            _check_metric(src, repeat["metric"], data, components)
    if repeat.get("max", 1 << 30) < repeat.get("runs", 1):
        src.error(f"max {repeat['max']} is below runs {repeat['runs']}", ("repeat", "max"))
    spec = data.get("hooks") or {}
    hooks = {stage: tuple(_hook(src, h, hosts, ("hooks", stage, i))
                          for i, h in enumerate(spec.get(stage, ()))) for stage in HOOK_STAGES}
    notify = _hook(src, spec["notify"], hosts, ("hooks", "notify")) if "notify" in spec else None
    return Campaign(points or ({},), repeat.get("runs", 1), repeat.get("max"), repeat.get("until"),
                    repeat.get("metric"), repeat.get("statistic", "median"), repeat.get("warmup", 0),
                    hooks, spec.get("fastfail", False), notify, repeat.get("refuse_starved", False),
                    repeat.get("count_partial", False))


def _hook(src: SourceFile, spec: str | list[str] | dict[str, Any], hosts: dict[str, Host],
          where: Path_) -> Hook:
    command = spec["command"] if isinstance(spec, dict) else spec
    on = tuple(spec.get("hosts", ())) if isinstance(spec, dict) else ()
    for i, host in enumerate(on):
        src.known("host", host, hosts, (*where, "hosts", i))
        if hosts[host].address:
            src.error(f"host '{host}' is reached by its daemon's address: a hook runs on the controller, "
                      "over ssh, or on a local host", (*where, "hosts", i))
    return Hook(("/bin/sh", "-c", command) if isinstance(command, str) else tuple(command), on)
