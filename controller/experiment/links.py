"""The experiment file's `links:` (top level: from the start of the run; on a step: from its
release on), checked and resolved: each rule into the directed host pairs it names and the
condition it puts on them.

What `check` can know from the file is said here, every problem at once, file:line:key: an
unknown host or group, a local daemon in a link (local daemons share this machine's network
stack: a condition between them would be on every other's traffic too), a host linked to
itself, a direction named twice in one list with different conditions, a partition with a
condition beside it. What a host's kernel can apply is known only at launch (netspec.links).
The state of every directed pair at every step is the plan's (model.py's `Plan.link_states`).
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


def milliseconds(text: str) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _DELAY_UNITS[unit]


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
    for i, spec in enumerate(raw or ()):
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
    if rate is not None and percent(rate) > 100:
        src.error(f"a loss of {rate} is over 100%", (*where, "loss"))
    if jitter > delay and spec.get("distribution", "normal") == "uniform":
        src.warn(f"jitter {spec['jitter']} is over the delay {spec.get('delay', '0ms')}: the delays "
                 "below zero are taken as none", (*where, "jitter"))
    return LinkCondition(delay_ms=delay, jitter_ms=jitter, distribution=spec.get("distribution", "normal"),
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
