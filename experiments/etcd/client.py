"""A client of the etcd cluster, NETSPEC-aware: in phase `run` it writes a key at a steady
rate (nodelib.Pacer: `rate`, `duration_s`), each write an ETCD/put operation with its
outcome, through the v3 JSON gateway of one member; a write that fails or gets no answer in
`timeout_ms` turns it to the next member, as etcd's own clients do. The operations give
`report` each fault's recovery: from its instant, and from its end, to the first write that
succeeded after it.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

from netspec import nodelib

PUT = nodelib.operation("ETCD", "put", "a write of one key through one member")


def _put(member: str, key: str, value: str, timeout_s: float) -> None:
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()}).encode()
    request = urllib.request.Request(f"http://{member}:2379/v3/kv/put", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as reply:
        said = json.load(reply)
    if "error" in said:
        raise RuntimeError(said["error"])


@nodelib.phase()
def run(ctx: nodelib.PhaseContext) -> str:
    members = [ctx.lookup(name, "address") for name in ctx.params["members"]]
    pacer = nodelib.Pacer.from_params(ctx.params)
    timeout_s = float(ctx.params.get("timeout_ms", 500)) / 1e3
    at, ok, failed, switched = 0, 0, 0, 0
    for seq, instant in enumerate(pacer):
        t = PUT.start()
        try:
            _put(members[at], f"key-{seq % 100}", str(seq), timeout_s)
        except TimeoutError as exc:
            PUT.timed_out(t, f"{members[at]}: no answer in {timeout_s * 1e3:g} ms ({exc})",
                          intended_ns=instant)
        except (OSError, RuntimeError, ValueError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            PUT.failed(t, f"{members[at]}: {cause}", intended_ns=instant)
        else:
            PUT.ok(t, intended_ns=instant)
            ok += 1
            continue
        failed += 1
        at, switched = (at + 1) % len(members), switched + 1
    if pacer.fell_behind:
        ctx.warn(pacer.behind())
    return (f"{pacer.summary()}: {ok} written, {failed} failed or unanswered, "
            f"{switched} turn(s) to another member")


nodelib.run()
