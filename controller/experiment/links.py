"""The experiment file's `links:` (top level: from the start of the run; on a step: from its
release on), checked and resolved: each rule into the directed host pairs it names and the
condition it puts on them.

What `check` can know from the file is said here, every problem at once, file:line:key: an
unknown host or group, a local daemon in a link (local daemons share this machine's network
stack: a condition between them would be on every other's traffic too), a host linked to
itself, a direction named twice in one list with different conditions, a partition with a
condition beside it. What a host's kernel can apply is known only at launch (netspec.links).
The state of every directed pair at every step is the plan's (model.py's `Plan.link_states`).

A rule may be named (`name: wan`), so that a campaign can sweep its condition: a swept key
`links.NAME.KEY` (KEY one of SWEPT_KEYS) sets KEY on the rule so named, at each point
(`link_setting`, `with_link_setting`, `check_link_axis`). A `delay:` given, even `0ms`,
keeps the delay's path in place (LinkCondition's `path`): a sweep's 0 point is measured
through the same backend as its others.
"""

from __future__ import annotations

import re
from typing import Any

from netspec.protocol.links import LinkCondition

from .model import Host, LinkRule
from .sourcefile import Path_, SourceFile, key_name, suggest

Pair = tuple[str, str]
_DELAY_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_RATE_UNITS = {"bit": 1e-6, "kbit": 1e-3, "mbit": 1.0, "gbit": 1e3}
CONDITION_KEYS = ("delay", "jitter", "distribution", "loss", "rate", "partition")
# A delay or jitter past this no real link has (a geostationary satellite's hop is ~280 ms):
# warned of as a likely slip of the unit (5000s for 5000ms).
ABSURD_DELAY_MS = 10_000.0
LINKS_KEY = "links"  # a swept key that starts so is a named link's: links.NAME.KEY
SWEPT_KEYS = ("delay", "jitter", "loss", "rate")


def milliseconds(text: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _DELAY_UNITS[unit]


def _absurd_delay(key: str, value: Any) -> str:
    """The warning for a delay or jitter no real link has (over ABSURD_DELAY_MS), with the
    same number in the next smaller unit as the likely meaning; "" for any other value."""
    found = re.fullmatch(r"([0-9.]+)(us|ms|s)", value) if isinstance(value, str) else None
    if found is None or milliseconds(value) <= ABSURD_DELAY_MS:
        return ""
    number, unit = found.groups()
    smaller = {"s": "ms", "ms": "us"}.get(unit)
    return (f"a {key} of {value} is over {ABSURD_DELAY_MS / 1e3:g} s, longer than any real link's (a "
            f"satellite hop is about 0.3 s)" + (f": did you mean {number}{smaller}?" if smaller else ""))


def mbit(text: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)(bit|kbit|mbit|gbit)", text).groups()  # type: ignore[union-attr]
    return float(number) * _RATE_UNITS[unit]


def percent(text: str) -> float:
    return float(text.rstrip("%"))


def local_hosts(hosts: dict[str, Host]) -> set[str]:
    """Hosts whose daemon is local: they share this machine's network stack."""
    return {name for name, h in hosts.items() if h.local}


LOCAL = ("host '{}' is a local daemon: local daemons share this machine's network stack, so a "
         "condition between them would be on all of their traffic (and this machine's); give it "
         "ssh: or address:, or drop it from the link")


def links_of(src: SourceFile, raw: list[dict[str, Any]] | None, where: Path_, hosts: dict[str, Host],
             groups: dict[str, tuple[str, ...]]) -> tuple[LinkRule, ...]:
    """The rules of one `links:` list (at `where`), each checked; the bad ones said and left out."""
    rules: dict[int, LinkRule] = {}
    named: dict[str, int] = {}
    for i, spec in enumerate(raw or ()):
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            with src.checking():
                if spec["name"] in named:
                    src.error(f"link name '{spec['name']}' is also given at line "
                              f"{src.line((*where, named[spec['name']]))}: a name is one rule's",
                              (*where, i, "name"))
            named.setdefault(spec["name"], i)
        name = key_name((*where, i))
        if any(item == name or item.startswith((f"{name}.", f"{name}[")) for item, _ in src.misshapen):
            continue  # the schema said what is wrong with it: what it would resolve to is no news
        rule = src.checked(_rule, src, spec, (*where, i), hosts, groups)
        if rule is not None:
            rules[i] = rule
    with src.checking():
        _check_contradictions(src, rules, where)
    return tuple(rules.values())


def _names(src: SourceFile, value: str | list[str], where: Path_, hosts: dict[str, Host],
           groups: dict[str, tuple[str, ...]]) -> list[str]:
    """The hosts a name (or list of names) of a host or group stands for."""
    found, locals_ = [], local_hosts(hosts)
    for j, name in enumerate([value] if isinstance(value, str) else value):
        at = where if isinstance(value, str) else (*where, j)
        members = groups.get(name, (name,))
        if name not in hosts and name not in groups:
            src.error(f"unknown host or group '{name}'{suggest(name, [*hosts, *groups])}", at)
        for host in members:
            if host in locals_:
                src.error(LOCAL.format(host), at)
        found += [h for h in members if h not in found]
    return found


def _rule(src: SourceFile, spec: dict[str, Any], where: Path_, hosts: dict[str, Host],
          groups: dict[str, tuple[str, ...]]) -> LinkRule:
    if "between" in spec and ("from" in spec or "to" in spec):
        src.error("give 'between' (every direction among the hosts) or 'from' and 'to' (one "
                  "direction), not both", where)
    if "between" in spec:
        among = _names(src, spec["between"], (*where, "between"), hosts, groups)
        pairs = [(a, b) for a in among for b in among if a != b]
        if not pairs:
            src.error("names one host only: a link is between two", (*where, "between"))
    elif "from" in spec and "to" in spec:
        sources = _names(src, spec["from"], (*where, "from"), hosts, groups)
        targets = _names(src, spec["to"], (*where, "to"), hosts, groups)
        pairs = [(a, b) for a in sources for b in targets if a != b]
        if not pairs:
            src.error("links a host to itself only: its packets to itself never leave it", (*where, "to"))
    else:
        src.error("give 'between' (hosts or groups) or 'from' and 'to'", where)
    return LinkRule(tuple(pairs), _condition(src, spec, where), src.line(where))


def _condition(src: SourceFile, spec: dict[str, Any], where: Path_) -> LinkCondition:
    given = [k for k in CONDITION_KEYS if k in spec and k != "partition"]
    if spec.get("partition") and given:
        src.error(f"a partition lets no packet through: drop {', '.join(given)}, or the partition",
                  (*where, "partition"))
    if "distribution" in spec and "jitter" not in spec:
        src.error("a distribution is the jitter's: give jitter too", (*where, "distribution"))
    loss = spec.get("loss")
    rate, burst = (loss.get("rate"), loss.get("burst")) if isinstance(loss, dict) else (loss, None)
    delay = milliseconds(spec["delay"]) if "delay" in spec else 0.0
    jitter = milliseconds(spec["jitter"]) if "jitter" in spec else 0.0
    for key in ("delay", "jitter"):
        if absurd := _absurd_delay(key, spec.get(key)):
            src.warn(absurd, (*where, key))
    if rate is not None and percent(rate) > 100:
        src.error(f"a loss of {rate} is over 100%", (*where, "loss"))
    if jitter > delay and spec.get("distribution", "normal") == "uniform":
        src.warn(f"jitter {spec['jitter']} is over the delay {spec.get('delay', '0ms')}: the delays "
                 "below zero are taken as none", (*where, "jitter"))
    # A delay given as 0 keeps its path (LinkCondition.path); one above 0 has it anyway.
    return LinkCondition(delay_ms=delay, path="delay" in spec and delay == 0 and not spec.get("partition"),
                         jitter_ms=jitter, distribution=spec.get("distribution", "normal"),
                         loss_pct=percent(rate) if rate is not None else 0.0,
                         loss_burst=float(burst) if burst is not None else None,
                         rate_mbit=mbit(spec["rate"]) if "rate" in spec else None,
                         partition=bool(spec.get("partition", False)))


def _check_contradictions(src: SourceFile, rules: dict[int, LinkRule], where: Path_) -> None:
    """A direction named twice in one list with different conditions: which one holds would
    depend on the order alone, so it is said (both lines)."""
    seen: dict[Pair, LinkRule] = {}
    for index, rule in rules.items():
        for pair in rule.pairs:
            other = seen.get(pair)
            if other is not None and other.condition != rule.condition:
                with src.checking():
                    src.error(f"the direction {pair[0]} -> {pair[1]} is also given at line {other.line} "
                              f"with another condition (there {other.condition.said()}, here "
                              f"{rule.condition.said()}): give each direction once", (*where, index),
                              rule.line)
                break
            seen[pair] = rule


def link_setting(key: str) -> tuple[str, str] | None:
    """A swept key's link name and condition key (`links.wan.delay` -> wan, delay); None for
    a key of another kind."""
    if not key.startswith(f"{LINKS_KEY}."):
        return None
    name, _, setting = key.removeprefix(f"{LINKS_KEY}.").partition(".")
    return (name, setting) if name and setting else None


def _rules(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rule of a file as written: the top-level links' and each step's."""
    lists = [data.get(LINKS_KEY) or []]
    lists += [step.get(LINKS_KEY) or [] for step in data.get("schedule") or () if isinstance(step, dict)]
    return [rule for rules in lists for rule in rules if isinstance(rule, dict)]


def _named(data: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Every rule named `name`: in the top-level links and in each step's."""
    return [rule for rule in _rules(data) if rule.get("name") == name]


def with_link_setting(data: dict[str, Any], key: str, value: Any) -> bool:
    """`data` (a file's) with the named link's `key` set to `value`; False when `key` is not
    a link's setting."""
    setting = link_setting(key)
    if setting is None:
        return False
    name, part = setting
    for rule in _named(data, name):
        rule[part] = value
    return True


def check_link_axis(src: SourceFile, data: dict[str, Any], key: str, values: list[Any]) -> None:
    """A swept link setting: one rule has the name, the key is one a sweep may vary, and each
    value makes a file the schema takes (so a point's file is refused at check, not at its run)."""
    from .schemacheck import check_swept_values

    name, part = link_setting(key)  # type: ignore[misc]
    where: Path_ = ("sweep", "params", key)
    found = _named(data, name)
    if not found:
        names = sorted({r["name"] for r in _rules(data) if isinstance(r.get("name"), str)})
        src.error(f"no link is named '{name}'{suggest(name, names)}: give the rule `name: {name}` "
                  "in links:", where)
    if part not in SWEPT_KEYS:
        src.error(f"a sweep varies a link's {', '.join(SWEPT_KEYS)}, not '{part}'", where)
    if any(rule.get("partition") for rule in found):
        src.error(f"link '{name}' is a partition: it has no {part} to vary", where)
    check_swept_values(src, data, key, values, with_link_setting,
                       lambda at: at[:1] in ((LINKS_KEY,), ("schedule",)), f"link '{name}'")
    for i, value in enumerate(values):
        if part in ("delay", "jitter") and (absurd := _absurd_delay(part, value)):
            src.warn(absurd, (*where, i))
