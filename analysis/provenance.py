"""What differs between runs: before runs are compared or combined, their records are
checked (pyperf's habit), and every difference is said as `what: before -> after`."""

from __future__ import annotations

import json
from typing import Any


def facts(record: dict[str, Any]) -> dict[str, str]:
    """What decides how a run went, flat: each component's params, program, command, args,
    env and host, each host's address, the schedule, each program's hash, the versions."""
    plan = record.get("plan", {})
    flat: dict[str, str] = {}
    for comp in plan.get("components", []):
        name = comp["name"]
        for param, value in comp.get("params", {}).items():
            flat[f"{name}.{param}"] = _text(value)
        for key in ("host", "program", "command", "args", "env", "start", "stop"):
            if comp.get(key):
                flat[f"{name} {key}"] = _text(comp[key])
    for host in plan.get("hosts", []):
        where = host.get("ssh") or host.get("address") or "local"
        flat[f"host {host['name']}"] = where
    for i, step in enumerate(plan.get("schedule", [])):
        flat[f"step {i}"] = _text({k: v for k, v in step.items() if k != "line"})
    for path, kept in record.get("programs", {}).items():
        flat[f"program {path} sha256"] = kept.get("sha256", "")[:12]
    for name, version in record.get("versions", {}).items():
        flat[f"{name} version"] = version
    return flat


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Each fact that differs between two runs' records, as `what: before -> after`."""
    a, b = facts(before), facts(after)
    return [f"{key}: {a.get(key, '(none)')} -> {b.get(key, '(none)')}"
            for key in dict.fromkeys([*a, *b]) if a.get(key) != b.get(key)]

