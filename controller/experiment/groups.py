"""Fleets written in a line: a host group and a component per host of a group, expanded into
the hosts and components the rest of the file's checks and the run see.

    hosts:
      peers: {count: 200, ssh: "netspec-h{i}"}   # hosts peers-1 ... peers-200
    components:
      worker: {group: peers, program: w.py}      # worker-peers-1 on peers-1, ...

A host whose spec has `count` is a group: its members are named GROUP-1 ... GROUP-N, each the
spec without `count`, `{i}` (the member's number) and `{name}` (its name) filled in every
string of it. A component with `group:` is a component per member host, named
COMPONENT-HOST, `{i}` and `{host}` filled in its command, args, env and string params. A
group's name stands for its members wherever the file lists names (a step's `components:`,
a stream's, CAMP's `processes:`, a hook's `hosts:`); the plan keeps each group's members
(`Plan.groups`, `Plan.component_groups`) for everything that takes names later (link
conditions, `show`, the browser). Every line a member's check cites is its group's, and the
key names the group and the member: `hosts.peers[peers-3].ssh`.

A campaign sweeps a host's setting, a group's count among them, as `hosts.HOST.KEY`
(`with_host_setting`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from netspec.protocol.errors import ConfigError

from .sourcefile import Path_, SourceFile, suggest

HOSTS_KEY = "hosts"  # a swept key that starts so is a host's setting: hosts.HOST.KEY[.KEY]
MAX_MEMBERS = 10_000  # the schema's bound on count, said again where it is enforced
_HOST_TOKENS = ("{i}", "{name}")
_COMPONENT_TOKENS = ("{i}", "{host}")
Members = dict[str, tuple[str, ...]]  # a group's name -> its members' names
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_QUOTED = re.compile(r"'[^']*'")  # a value a warning quotes


@dataclass(frozen=True)
class Groups:
    """What the file's groups expanded to: each host group's member hosts and each group
    component's member components, in order."""

    hosts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    components: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def named(self, src: SourceFile) -> None:
        """Every error a member's check recorded, keyed by its group and the member
        (`components.worker[worker-peers-3].program`); the same error of many members of a
        group said once, naming how many."""
        if not (self.hosts or self.components):
            return
        section_of = {**{g: HOSTS_KEY for g in self.hosts}, **{g: "components" for g in self.components}}
        member_of = {m: g for g, ms in (*self.hosts.items(), *self.components.items()) for m in ms}
        folded: dict[tuple[str, int | None, str, str], list[str]] = {}
        kept: list[ConfigError] = []
        for error in src.errors:
            section, _, rest = error.key.partition(".")
            name, dot, tail = rest.partition(".")
            group = member_of.get(name)
            if section not in (HOSTS_KEY, "components") or group is None or section_of[group] != section:
                kept.append(error)
                continue
            at = (error.file, error.line, f"{section}.{group}", dot + tail + "\0" + error.reason)
            folded.setdefault(at, []).append(name)
        for (file, line, where, tail_reason), members in folded.items():
            tail, _, reason = tail_reason.partition("\0")
            group = where.partition(".")[2]
            size = len(self.hosts.get(group) or self.components.get(group) or ())
            said = (members[0] if len(members) == 1 else f"all {size} members" if len(members) == size
                    else f"{members[0]} ... {members[-1]}: {len(members)} of {size} members")
            kept.append(ConfigError(reason, file, line, f"{where}[{said}]{tail}"))
        src.errors[:] = kept
        src.warnings[:] = _folded(src.warnings, member_of)


def _folded(warnings: list[str], member_of: dict[str, str]) -> list[str]:
    """The warnings that differ only in which member of a group they name, and in the values
    they quote that are the member's own (`ssh: "peer-{i}"`: 'peer-1', 'peer-2', ...), said
    once: the first, and how many more members it holds for."""
    def parts(word: str) -> list[str]:  # a name, or the names of a key (hosts.peers-1.ssh)
        return [word] if word in member_of else word.split(".")

    alike: dict[str, list[tuple[str, list[str]]]] = {}
    for warning in warnings:
        named = [p for w in _WORD.findall(warning) for p in parts(w) if p in member_of]
        shape = _WORD.sub(lambda m: ".".join(f"<{member_of[p]}>" if p in member_of else p
                                             for p in parts(m[0])), warning)
        if named:  # the values it quotes, but a member's name (<group> by now)
            shape = _QUOTED.sub(lambda m: m[0] if "<" in m[0] else "'...'", shape)
        alike.setdefault(shape, []).append((warning, named))
    said = []
    for found in alike.values():
        first, named = found[0]
        if len(found) == 1 or not named or len({n[0] for _, n in found}) < len(found):
            said += [w for w, _ in found]  # alone, of no member, or two of one member's own
            continue
        others = [n[0] for _, n in found[1:]]
        said.append(f"{first} (alike for {len(others)} more of group {member_of[named[0]]}: "
                    f"{others[0]}{' ... ' + others[-1] if len(others) > 1 else ''})")
    return said


def expand(src: SourceFile, data: dict[str, Any]) -> tuple[dict[str, Any], Groups]:
    """`data` with its host groups and group components expanded (the given dict untouched:
    a campaign's sweep is checked on the file as written), and what they expanded to."""
    if not isinstance(data, dict):
        return data, Groups()
    given_hosts = data.get(HOSTS_KEY) or {}
    given_components = data.get("components") or {}
    if not any(isinstance(s, dict) and "count" in s for s in given_hosts.values()) and not any(
            isinstance(s, dict) and "group" in s for s in given_components.values()):
        return data, Groups()
    out = dict(data)
    hosts, host_groups = _expand_hosts(src, given_hosts)
    out[HOSTS_KEY] = hosts
    components, component_groups = _expand_components(src, given_components, host_groups, hosts)
    out["components"] = components
    groups = Groups(host_groups, component_groups)
    _expand_lists(src, out, groups)
    return out, groups


def _expand_hosts(src: SourceFile, given: dict[str, Any]) -> tuple[dict[str, Any], Members]:
    hosts: dict[str, Any] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for name, spec in given.items():
        if not (isinstance(spec, dict) and "count" in spec):
            hosts[name] = spec
            continue
        count = spec["count"]
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_MEMBERS:
            continue  # the schema said so
        rest = {k: v for k, v in spec.items() if k != "count"}
        members = tuple(f"{name}-{i}" for i in range(1, count + 1))
        under = _under(src, (HOSTS_KEY, name))
        for i, member in enumerate(members, 1):
            if member in given:
                with src.checking():
                    src.error(f"host group '{name}' names its member {i} '{member}', and a host of "
                              f"that name is given too (line {src.line((HOSTS_KEY, member))}): rename one",
                              (HOSTS_KEY, name, "count"))
                continue
            hosts[member] = _filled(rest, dict(zip(_HOST_TOKENS, (str(i), member), strict=True)))
            _alias(src, under, (HOSTS_KEY, member))
        groups[name] = members
    return hosts, groups


def _expand_components(src: SourceFile, given: dict[str, Any], host_groups: Members,
                       hosts: dict[str, Any]) -> tuple[dict[str, Any], Members]:
    components: dict[str, Any] = {}
    groups: dict[str, tuple[str, ...]] = {}
    for name, spec in given.items():
        if not (isinstance(spec, dict) and "group" in spec):
            components[name] = spec
            continue
        where: Path_ = ("components", name)
        group = spec["group"]
        with src.checking():
            if "host" in spec:
                src.error("give 'host' (one component on it) or 'group' (a component on each of "
                          "its hosts), not both", where)
            if group not in host_groups:
                plain = (f": '{group}' is one host, not a group; give host: {group}" if group in hosts
                         else suggest(group, host_groups))
                has = f"; the file has {', '.join(host_groups)}" if host_groups else ", and the file has none"
                src.error(f"unknown host group '{group}'{plain} (a group is a host with count:{has})",
                          (*where, "group"))
        if group not in host_groups or "host" in spec:
            continue
        rest = {k: v for k, v in spec.items() if k != "group"}
        members = []
        under = _under(src, where)
        for i, host in enumerate(host_groups[group], 1):
            member = f"{name}-{host}"
            if member in given:
                with src.checking():
                    src.error(f"component '{name}' on group '{group}' names its component on host "
                              f"'{host}' '{member}', and a component of that name is given too "
                              f"(line {src.line(('components', member))}): rename one", (*where, "group"))
                continue
            filled = _filled({k: v for k, v in rest.items() if k in ("command", "args", "env", "params")},
                             dict(zip(_COMPONENT_TOKENS, (str(i), host), strict=True)))
            components[member] = {**rest, **filled, "host": host}
            _alias(src, under, ("components", member))
            members.append(member)
        groups[name] = tuple(members)
    return components, groups


def _expand_lists(src: SourceFile, data: dict[str, Any], groups: Groups) -> None:
    """Each list of names that may hold a group's name, the group replaced by its members."""
    for i, step in enumerate(data.get("schedule") or ()):
        if isinstance(step, dict) and isinstance(step.get("components"), list):
            data["schedule"] = list(data["schedule"])
            data["schedule"][i] = {**step, "components": _members(src, ("schedule", i, "components"),
                                                                  step["components"], groups.components)}
    for name, stream in (data.get("streams") or {}).items():
        if isinstance(stream, dict) and isinstance(stream.get("components"), list):
            data["streams"] = dict(data["streams"])
            data["streams"][name] = {**stream, "components": _members(
                src, ("streams", name, "components"), stream["components"], groups.components)}
    camp = (data.get("services") or {}).get("camp")
    if isinstance(camp, dict) and isinstance(camp.get("processes"), list):
        data["services"] = {**data["services"], "camp": {**camp, "processes": _members(
            src, ("services", "camp", "processes"), camp["processes"], groups.components)}}
    for stage, hooks in (data.get("hooks") or {}).items():
        if not isinstance(hooks, list):
            continue
        for i, hook in enumerate(hooks):
            if isinstance(hook, dict) and isinstance(hook.get("hosts"), list):
                data["hooks"] = {**data["hooks"], stage: list(data["hooks"][stage])}
                data["hooks"][stage][i] = {**hook, "hosts": _members(
                    src, ("hooks", stage, i, "hosts"), hook["hosts"], groups.hosts)}


def _members(src: SourceFile, path: Path_, names: list[Any], groups: dict[str, tuple[str, ...]]) -> list[Any]:
    """`names` with each group's name replaced by its members; each item's line is the line
    of the name it came from."""
    out: list[Any] = []
    lines = []
    for j, name in enumerate(names):
        line = src.line((*path, j))
        items = list(groups[name]) if isinstance(name, str) and name in groups else [name]
        out += items
        lines += [line] * len(items)
    for j in range(len(names)):
        src.lines.pop((*path, j), None)
    for j, line in enumerate(lines):
        if line is not None:
            src.lines[(*path, j)] = line
    return out


def _under(src: SourceFile, group: Path_) -> list[tuple[Path_, int]]:
    """Every line under `group`'s key, by its path below it: read once for all the members,
    as each member's own lines are added to the same map."""
    n = len(group)
    return [(p[n:], ln) for p, ln in src.lines.items() if p[:n] == group]


def _alias(src: SourceFile, under: list[tuple[Path_, int]], member: Path_) -> None:
    """The group's lines (`_under`), also under `member`'s key."""
    for below, line in under:
        src.lines[(*member, *below)] = line


def _filled(value: Any, tokens: dict[str, str]) -> Any:
    """`value` with every token of `tokens` replaced in each string within it."""
    if isinstance(value, str):
        for token, text in tokens.items():
            value = value.replace(token, text)
        return value
    if isinstance(value, dict):
        return {k: _filled(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, tokens) for v in value]
    return value


def host_setting(key: str) -> tuple[str, tuple[str, ...]] | None:
    """A swept key's host and the path of its setting (`hosts.peers.count` -> peers,
    (count,)); None for a component's param."""
    if not key.startswith(f"{HOSTS_KEY}."):
        return None
    host, _, setting = key.removeprefix(f"{HOSTS_KEY}.").partition(".")
    return (host, tuple(setting.split("."))) if setting else None


def with_host_setting(data: dict[str, Any], key: str, value: Any) -> bool:
    """`data` (a file's) with the host setting `key` set to `value`; False when `key` is a
    component's param."""
    setting = host_setting(key)
    if setting is None:
        return False
    host, path = setting
    hosts = data.setdefault(HOSTS_KEY, {})
    spec = hosts[host] = dict(hosts.get(host) or {})
    for part in path[:-1]:
        spec[part] = spec = dict(spec.get(part) or {})
    spec[path[-1]] = value
    return True


def check_host_axis(src: SourceFile, data: dict[str, Any], key: str, values: list[Any]) -> None:
    """A swept host setting: the host is in the file, and each value makes a file the schema
    takes (so a point's file is refused at check, not at its run)."""
    from .schemacheck import check_swept_values

    host, _ = host_setting(key)  # type: ignore[misc]
    src.known("host", host, data.get(HOSTS_KEY) or {}, ("sweep", "params", key))
    check_swept_values(src, data, key, values, with_host_setting, lambda at: at[:2] == (HOSTS_KEY, host),
                       f"host '{host}'")

