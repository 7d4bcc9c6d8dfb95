"""Fuzz netspecd and the stream reader; print crashes, hangs, leaks and refusals, then one
JSON object as the last line. Five sections, each on a fresh daemon (`--mode` picks some):

frames: malformed frames before and after authentication (issue 18's fuzz). Before
    authentication each connection gets one malformed frame (random bytes, a length over the
    limit, a frame cut short, msgpack that is no message map, a wrong handshake answer), then
    the client half-closes. After it, sessions send sealed requests of every type with fields
    missing, extra, of the wrong type or huge, plus frames whose MAC is wrong. Every request
    with an id must be answered or its connection dropped within HANG_S. What the daemon holds
    at the end (fds, threads, processes, RSS) is compared with what it held after a warm-up.
state: the stateful protocol fuzz (tests/protofuzz.py): a seeded state machine over every
    request type and sequences of them (setup, join, tree, enter, end, reset, files, read,
    clksync; repeated and out of order; frames coalesced with the auth frame, sealed or not;
    hang-ups) on up to three sessions, checking after every action that the daemon lives,
    that every request is answered, that no unsealed frame is executed, that a session's run
    is its own and is let go when it ends (no process left, its id free: "runs held"), that
    the daemon is idle once every request is answered (no relay loop) and within its RSS
    bound; then fds, threads and processes back to baseline; then one frame of 3.8 MiB of
    empty arrays (memory amplification).
flood: N idle connections (not a byte sent) and M half-open ones (the challenge read, part of
    an auth frame sent), each reopened when dropped; meanwhile legitimate controllers connect
    one after another: their connect-and-hello times and refusals, against the same without
    the flood.
stream: the stream reader with valid CRCs around bad contents (tests/streamfuzz.py), read as
    `dump`, as columns by the numba scanner and by the unpacker, and by the merge's source;
    coverage-guided by atheris where it is installed (else seeded random choices), in a
    worker process that a deadly signal or a hang ends and the bench starts again. A crash is
    any exception but StreamError (a whole file refused for what it is), named by where.

Not fuzzed, and why: `shutdown` (it stops the daemon, as it should); clksync's `address` and
a tree's children's addresses (a random name would be looked up in DNS: traffic would leave
the machine). Traffic goes to 127.0.0.1 only. Every loop is bounded by --frames, --actions,
--inputs or its share of --seconds.

    python bench/fuzz.py [--mode all] [--seconds 240] [--frames 15000] [--actions 600] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from netspec.protocol.auth import client_handshake, load_or_create_key  # noqa: E402
from netspec.protocol.channel import Channel  # noqa: E402
from netspec.protocol.errors import NetspecError  # noqa: E402
from netspec.protocol.wire import HEADER, encode  # noqa: E402
from protoclient import Client, Daemon, Dropped, Hang, empty_arrays_frame, mutated_request, value  # noqa: E402
from protoflood import flood  # noqa: E402
from protofuzz import THREAD_CEILING, Fuzz, digest  # noqa: E402

HANG_S = 15.0
SETTLE_S = 20.0  # the last sessions' resets, at most, before what the daemon holds is a leak
PRE_AUTH_SHARE = 0.4
CONCURRENT_CONNECTIONS = 32
CONCURRENT_SESSIONS = 8
REQUESTS_PER_SESSION = 100
WARM_UP_FRAMES = 2000
# Each section's share of --seconds.
SHARES = {"frames": 0.25, "state": 0.35, "flood": 0.15, "stream": 0.25}
STREAM_HANG_S = 10  # one stream file read every way


# -- frames: malformed frames before and after authentication


def pre_auth_payload(rng: random.Random) -> bytes:
    pick = rng.randrange(6)
    if pick == 0:
        return os.urandom(rng.randrange(1, 200))
    if pick == 1:
        return HEADER.pack(rng.randrange(4097, 2**32)) + os.urandom(rng.randrange(64))
    if pick == 2:
        frame = encode({"t": "auth", "nonce": os.urandom(32), "mac": os.urandom(32)})
        return frame[:rng.randrange(1, len(frame))]
    if pick == 3:
        body = msgpack.packb(value(rng, 2), use_bin_type=True)[:4096]
        return HEADER.pack(len(body)) + body
    if pick == 4:
        return encode({"t": rng.choice(["auth", "hello", "setup", "reset"]), "nonce": value(rng, 3),
                       "mac": value(rng, 3), "id": 1})[:4100]
    return encode({"t": "auth", "nonce": os.urandom(32), "mac": os.urandom(32)})  # a wrong key



class Tally:
    def __init__(self) -> None:
        self.frames = self.pre_auth = self.post_auth = self.answered = self.dropped = 0
        self.hangs: list[str] = []


async def pre_auth_one(port: int, payload: bytes, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        writer.write_eof()
        async with asyncio.timeout(HANG_S):
            while await reader.read(65536):
                pass
    except TimeoutError:
        tally.hangs.append(f"pre-auth payload {payload[:16].hex()}... never closed")
    except ConnectionError:
        pass
    finally:
        writer.close()
    tally.frames += 1
    tally.pre_auth += 1


async def session(port: int, key: bytes, rng: random.Random, count: int, tally: Tally) -> None:
    channel = await Channel.connect("127.0.0.1", port, "fuzz")
    await client_handshake(channel, key)
    waiting: set[int] = set()
    for n in range(1, count + 1):
        if rng.random() < 0.01:
            channel.transport.write(encode({"t": "hello", "id": n}) + os.urandom(16))  # no MAC
            tally.frames += 1
            tally.post_auth += 1
            break
        message = mutated_request(rng, n)
        try:
            channel.send(message)
        except NetspecError:
            continue  # too big for one frame: refused here, as it should be
        if message["id"] == n and message["t"] != "enter":
            waiting.add(n)
        tally.frames += 1
        tally.post_auth += 1
    else:
        channel.send({"t": "hello", "id": 0})
        waiting.add(0)
    try:
        async with asyncio.timeout(HANG_S):
            while waiting:
                message = await channel.recv()
                if message is None:
                    tally.dropped += 1
                    return
                if message.get("id") in waiting:
                    waiting.discard(message["id"])
                    tally.answered += 1
    except TimeoutError:
        tally.hangs.append(f"{len(waiting)} requests of a session unanswered: {sorted(waiting)[:5]}")
    except (NetspecError, ConnectionError):
        tally.dropped += 1
    finally:
        await channel.close()


async def fuzz(daemon: Daemon, key: bytes, frames: int, seed: int, seconds: float,
               marks: dict[str, dict[str, float]]) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    give_up = time.monotonic() + seconds
    pre = int(frames * PRE_AUTH_SHARE)
    gate = asyncio.Semaphore(CONCURRENT_CONNECTIONS)

    async def one_pre(payload: bytes) -> None:
        async with gate:
            await pre_auth_one(daemon.port, payload, tally)
    for start in range(0, pre, 1000):
        if time.monotonic() > give_up:
            break
        await asyncio.gather(*(one_pre(pre_auth_payload(rng)) for _ in range(min(1000, pre - start))))
    marks[f"{round(PRE_AUTH_SHARE * 100)}%"] = daemon.held()  # the frames before authentication
    sessions = asyncio.Semaphore(CONCURRENT_SESSIONS)

    async def one_session(n: int) -> None:
        async with sessions:
            await session(daemon.port, key, random.Random(seed * 1_000_003 + n), REQUESTS_PER_SESSION, tally)
    n, tenth = 0, round(PRE_AUTH_SHARE * 10) + 1
    while tally.frames < frames and time.monotonic() < give_up:
        batch = range(n, n + CONCURRENT_SESSIONS * 4)
        await asyncio.gather(*(one_session(i) for i in batch))
        n += len(batch)
        while tenth < 10 and tally.frames >= frames * tenth / 10:
            marks[f"{10 * tenth}%"] = daemon.held()
            tenth += 1
    return tally


async def hello_time(port: int, key: bytes) -> float:
    started = time.perf_counter()
    channel = await Channel.connect("127.0.0.1", port, "check")
    await client_handshake(channel, key)
    channel.send({"t": "hello", "id": 1})
    async with asyncio.timeout(HANG_S):
        await channel.recv()
    await channel.close()
    return time.perf_counter() - started




def frames_section(workdir: Path, key_file: Path, key: bytes, frames: int, seed: int,
                   seconds: float) -> dict[str, Any]:
    daemon = Daemon(workdir, key_file)
    try:
        baseline_hello = asyncio.run(hello_time(daemon.port, key))
        # Warm-up, not counted: the daemon's thread pool grows to its size (idle workers
        # stay, by design) and the allocator to its working set.
        warm_up = min(WARM_UP_FRAMES, frames // 5)
        asyncio.run(fuzz(daemon, key, warm_up, seed + 1, seconds / 5, {}))
        time.sleep(3)
        marks = {"warm": daemon.held()}
        started = time.monotonic()
        tally = asyncio.run(fuzz(daemon, key, frames, seed, seconds, marks))
        took = time.monotonic() - started
        crashed = not daemon.alive
        if crashed:
            print("the daemon died; its log ends:", *daemon.log_tail(30), sep="\n")
        after_hello = None if crashed else asyncio.run(hello_time(daemon.port, key))
        marks["end"] = _settled(daemon, marks["warm"]) if not crashed else {}
    finally:
        daemon.stop()
    warm, end = marks["warm"], marks.get("end", {})
    leaks = {k: end.get(k, float("nan")) - warm[k] for k in ("fds", "children")}
    # The daemon's default executor keeps up to min(32, cpus + 4) idle workers by design, grown
    # on demand: a thread leak is a count beyond them, the main thread and the stream flusher.
    leaks["threads"] = max(end.get("threads", float("nan")) - THREAD_CEILING, 0)
    rss_growth = end.get("rss_mb", float("nan")) - marks.get("50%", warm)["rss_mb"]
    # A leak grows with the frames: the slope of RSS over the tenths, in MB per 10k frames.
    tenths = [(int(k[:-1]), v["rss_mb"]) for k, v in marks.items() if k.endswith("%")]
    percent, rss = [t[0] for t in tenths], [t[1] for t in tenths]
    slope = (statistics.linear_regression(percent, rss).slope * 100 / (frames / 10_000)
             if len(tenths) > 2 else float("nan"))
    print(f"frames: {tally.frames} malformed frames in {took:.1f} s ({tally.frames / took:.0f}/s): "
          f"{tally.pre_auth} before authentication, {tally.post_auth} after")
    print(f"  requests answered: {tally.answered}; sessions dropped by the daemon: {tally.dropped}")
    print(f"  crashes: {int(crashed)}; hangs: {len(tally.hangs)}")
    for hang in tally.hangs[:5]:
        print(f"    {hang}")
    print(f"  hello before: {baseline_hello * 1e3:.1f} ms, after: "
          f"{'-' if after_hello is None else f'{after_hello * 1e3:.1f} ms'}")
    for name, held in marks.items():
        print(f"  held {name:>14}: " + ", ".join(f"{k} {v:.1f}" if k == "rss_mb" else f"{k} {v}"
                                                 for k, v in held.items()))
    print(f"  leaked since warm-up: fds {leaks['fds']:+}, threads beyond the {THREAD_CEILING} "
          f"of an idle daemon {leaks['threads']:+}, "
          f"processes {leaks['children']:+}; RSS growth over the second half {rss_growth:+.1f} MB, "
          f"trend over the tenths {slope:+.2f} MB per 10k frames")
    return {"frames": tally.frames, "pre_auth": tally.pre_auth, "post_auth": tally.post_auth,
            "seconds": round(took, 1), "crashes": int(crashed), "hangs": len(tally.hangs),
            "answered": tally.answered, "dropped": tally.dropped, "leaked_fds": leaks["fds"],
            "leaked_threads": leaks["threads"], "leaked_processes": leaks["children"],
            "rss_growth_second_half_mb": round(rss_growth, 1), "rss_mb_per_10k_frames": round(slope, 3),
            "hello_before_ms": round(baseline_hello * 1e3, 2),
            "hello_after_ms": None if after_hello is None else round(after_hello * 1e3, 2)}


# -- state: the stateful protocol fuzz


def state_section(workdir: Path, key_file: Path, key: bytes, actions: int, seed: int,
                  seconds: float) -> dict[str, Any]:
    daemon = Daemon(workdir, key_file)
    try:
        amplified = amplification(daemon, key)  # first, on a daemon that has done nothing yet
        started = time.monotonic()
        machine = Fuzz(daemon, key, random.Random(seed), f"b{os.getpid()}")
        give_up = started + seconds
        while machine.counts["actions"] < actions and time.monotonic() < give_up:
            machine.step()
            if machine.counts["actions"] % 25 == 0:
                machine.quiet()
            if not daemon.alive:
                machine.check()  # said, with the log's last lines
                daemon.start()  # and the fuzz goes on with a new one
                machine.held_start = daemon.held()
        leaks = machine.finish()
        took = time.monotonic() - started
    finally:
        daemon.stop()
    kinds = digest(machine.findings)
    counts = machine.counts
    print(f"state: {counts['actions']} actions ({counts['frames']} requests and frames) on "
          f"{counts['sessions']} sessions in {took:.1f} s: {counts['answered']} answered, "
          f"{counts['dropped']} sessions dropped by the daemon")
    print("  findings: " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"))
    for finding in machine.findings[:25]:
        print("    " + finding.line())
    print(f"  after every session ended: fds {leaks.get('fds', 0):+}, threads beyond an idle daemon's "
          f"{leaks.get('threads', 0):+}, processes {leaks.get('children', 0):+}, RSS "
          f"{leaks.get('rss_mb', 0):+.1f} MB; most CPU with every request answered "
          f"{machine.spin:.0%} of a core")
    print(f"  one frame of 3.8 MiB of empty arrays: RSS {amplified[0]:+.0f} MB once answered, "
          f"{amplified[1]:+.0f} MB a second after its session ended")
    return {"actions": counts["actions"], "requests": counts["frames"], "sessions": counts["sessions"],
            "seconds": round(took, 1), "answered": counts["answered"], "dropped": counts["dropped"],
            "findings": kinds, "crashes": kinds.get("crash", 0), "hangs": kinds.get("hang", 0),
            "unsealed_executed": kinds.get("unsealed", 0), "runs_held": len({
                f.what.split(":")[0] for f in machine.findings if f.kind == "run-held"}),
            "valid_sessions_dropped": kinds.get("dropped", 0), "isolation": kinds.get("isolation", 0),
            "refused": kinds.get("refused", 0), "spin_max_share": round(machine.spin, 3),
            "leaked_fds": leaks.get("fds"), "leaked_threads": leaks.get("threads"),
            "leaked_processes": leaks.get("children"), "rss_growth_mb": round(leaks.get("rss_mb", 0), 1),
            "empty_arrays_frame_rss_mb": round(amplified[0], 1),
            "empty_arrays_frame_rss_after_mb": round(amplified[1], 1)}


def amplification(daemon: Daemon, key: bytes) -> tuple[float, float]:
    """How much one 3.8 MiB frame of empty arrays raises the daemon's RSS: once it is answered
    (its session still open, the request's last reference held by the session's read loop),
    and a second after the session ended."""
    if not daemon.alive:
        return float("nan"), float("nan")
    client = Client(daemon.port, key)
    before = held = daemon.held()["rss_mb"]
    try:
        client.ask("hello")
        before = daemon.held()["rss_mb"]
        client.next_id += 1
        client.write(empty_arrays_frame(client, client.next_id))
        client.wait({client.next_id}, time.monotonic() + HANG_S)
    except (Dropped, Hang):
        pass  # refused: what it cost is measured all the same
    finally:
        held = daemon.held()["rss_mb"]
        client.close()
    time.sleep(1)  # the measured second after: what the daemon gives back
    return held - before, daemon.held()["rss_mb"] - before


# -- flood: connections held in their handshake


def flood_section(workdir: Path, key_file: Path, key: bytes, idle: int, half_open: int, controllers: int,
                  seconds: float) -> dict[str, Any]:
    daemon = Daemon(workdir, key_file)
    try:
        alone = asyncio.run(flood(daemon.port, key, 0, 0, controllers, seconds / 4))
        flooded = asyncio.run(flood(daemon.port, key, idle, half_open, controllers, seconds * 3 / 4))
        crashed = not daemon.alive
    finally:
        daemon.stop()
    print(f"flood: {idle} idle and {half_open} half-open connections held in their handshake "
          f"({flooded['held_when_measured']} open when measured, {flooded['flood_reopened']} reopened "
          f"after the daemon dropped them)")
    for name, f in (("alone", alone), ("flooded", flooded)):
        print(f"  {name:>8}: {f['answered']} of {f['controllers']} controllers answered, "
              f"{f['refused']} refused; connect and hello median {f['connect_ms_median']} ms, "
              f"max {f['connect_ms_max']} ms")
    for refusal in flooded["refusals"]:
        print(f"    {refusal}")
    return {"idle": idle, "half_open": half_open, "crashes": int(crashed), "alone": alone, "flooded": flooded,
            "refused": flooded["refused"]}


# -- stream: the reader, coverage-guided


def stream_worker(args: argparse.Namespace) -> int:
    """In a process of its own: read crafted stream files until the time is up, writing what
    was found to --out as it goes (a deadly signal must not lose it)."""
    stats: dict[str, Any] = {"inputs": 0, "crashing_inputs": 0, "signatures": {}, "slow": 0}
    out, workdir = Path(args.out), Path(args.workdir)
    last_write = 0.0

    def save(force: bool = False) -> None:
        nonlocal last_write
        if force or time.monotonic() - last_write > 1:
            out.with_suffix(".part").write_text(json.dumps(stats))
            out.with_suffix(".part").replace(out)
            last_write = time.monotonic()

    def one(chooser: Any) -> None:
        from streamfuzz import craft, read_all, write

        stats["inputs"] += 1
        path = write(workdir, craft(chooser), stats["inputs"])
        started = time.monotonic()
        crashes = read_all(path, compiled=True)
        path.unlink()
        if time.monotonic() - started > STREAM_HANG_S:
            stats["slow"] += 1
        if crashes:
            stats["crashing_inputs"] += 1
            for sig, message in crashes.items():
                seen = stats["signatures"].setdefault(sig, [0, message])
                seen[0] += 1
        save()

    try:
        import atheris
    except ImportError:
        atheris = None
    if atheris is not None and args.engine != "random":
        # Coverage of netspec's own code steers the choices; the numba scanner stays as it is
        # (its bytecode is compiled, not run).
        with atheris.instrument_imports(include=["netspec", "streamfuzz"],
                                        exclude=["netspec.datastream.scanner"]):
            import streamfuzz
        stats["engine"] = "atheris"
        save(force=True)

        def test_one_input(data: bytes) -> None:
            one(streamfuzz.AtherisChooser(atheris.FuzzedDataProvider(data)))
        atheris.Setup([sys.argv[0], f"-max_total_time={max(1, int(args.seconds))}", f"-runs={args.inputs}",
                       f"-timeout={STREAM_HANG_S}", f"-seed={args.seed}", "-rss_limit_mb=3072",
                       "-max_len=8192", "-print_final_stats=0"], test_one_input)
        atheris.Fuzz()  # libFuzzer exits the process at its end
        return 0
    import streamfuzz

    stats["engine"] = "seeded random" + (" (atheris is not installed)" if atheris is None else "")
    rng = random.Random(args.seed)
    give_up = time.monotonic() + args.seconds
    while stats["inputs"] < args.inputs and time.monotonic() < give_up:
        one(streamfuzz.RandomChooser(rng))
    save(force=True)
    return 0


def stream_section(workdir: Path, inputs: int, seed: int, seconds: float, choices: str) -> dict[str, Any]:
    """Workers one after another until the time or the inputs are used up: a worker that a
    deadly signal, a hang or its memory limit ended counts as a crash or a hang, and the next
    starts with another seed."""
    workdir.mkdir(parents=True, exist_ok=True)
    total: dict[str, Any] = {"inputs": 0, "crashing_inputs": 0, "signatures": {}, "slow": 0}
    deaths: list[str] = []
    hangs = 0
    engine = "?"
    started = time.monotonic()
    give_up = started + seconds
    for attempt in range(20):  # bounded: a worker dying at once every time must not loop for ever
        left = give_up - time.monotonic()
        if left < 2 or total["inputs"] >= inputs:
            break
        out = workdir / f"stream-{attempt}.json"
        proc = subprocess.run(
            [sys.executable, __file__, "--stream-worker", "--out", str(out), "--workdir", str(workdir),
             "--seconds", str(left), "--inputs", str(inputs - total["inputs"]),
             "--seed", str(seed + attempt), "--engine", choices],
            capture_output=True, text=True, timeout=left + 60)
        stats = json.loads(out.read_text()) if out.exists() else {}
        engine = stats.get("engine", engine)
        for key in ("inputs", "crashing_inputs", "slow"):
            total[key] += stats.get(key, 0)
        for sig, (n, message) in stats.get("signatures", {}).items():
            total["signatures"].setdefault(sig, [0, message])[0] += n
        tail = proc.stderr[-2000:]
        if "Timeout" in tail or "ALARM" in tail:
            hangs += 1
        elif proc.returncode != 0:
            why = next((line for line in tail.splitlines() if "ERROR" in line or "deadly" in line),
                       f"exit {proc.returncode}")
            deaths.append(why.strip()[:160])
        elif stats.get("engine", "").startswith("seeded") or stats.get("inputs", 0) >= inputs:
            break
    took = time.monotonic() - started
    signatures = total["signatures"]
    print(f"stream: {total['inputs']} crafted stream files read every way in {took:.1f} s ({engine})")
    print(f"  inputs that crashed a reader: {total['crashing_inputs']}; distinct crashes: {len(signatures)}; "
          f"hangs (over {STREAM_HANG_S} s): {hangs + total['slow']}; workers killed by a signal or "
          f"their memory limit: {len(deaths)}")
    for sig, (n, message) in sorted(signatures.items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"    {n:>6}  {sig}  ({message[:80]})")
    for death in deaths[:5]:
        print(f"    worker: {death}")
    return {"engine": engine, "inputs": total["inputs"], "seconds": round(took, 1),
            "crashing_inputs": total["crashing_inputs"], "crashes": len(signatures) + len(deaths),
            "distinct_crashes": len(signatures), "worker_deaths": len(deaths), "hangs": hangs + total["slow"],
            "by_reader": _by_reader(signatures)}


def _by_reader(signatures: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sig in signatures:
        where = sig.split(":")[0]
        counts[where] = counts.get(where, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="all", help="all, or some of frames,state,flood,stream")
    parser.add_argument("--seconds", type=float, default=240.0, help="the whole run's budget")
    parser.add_argument("--frames", type=int, default=15_000, help="malformed frames (frames)")
    parser.add_argument("--actions", type=int, default=600, help="state machine actions (state)")
    parser.add_argument("--inputs", type=int, default=1_000_000, help="crafted stream files (stream)")
    parser.add_argument("--idle", type=int, default=500, help="idle connections (flood)")
    parser.add_argument("--half-open", type=int, default=64, help="half-open connections (flood)")
    parser.add_argument("--controllers", type=int, default=20, help="legitimate controllers (flood)")
    parser.add_argument("--engine", choices=["atheris", "random"], default="atheris",
                        help="the stream fuzz's choices: coverage-guided (if installed) or seeded random")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stream-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream_worker:
        return stream_worker(args)
    modes = list(SHARES) if args.mode == "all" else args.mode.split(",")
    share = sum(SHARES[m] for m in modes)
    budget = {m: args.seconds * SHARES[m] / share for m in modes}
    result: dict[str, Any] = {"bench": "fuzz", "seed": args.seed}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="netspec-fuzz-") as tmp:
        key_file = Path(tmp) / "key"
        key = load_or_create_key(key_file)

        def place(name: str) -> Path:
            (Path(tmp) / name).mkdir()
            return Path(tmp) / name
        if "frames" in modes:
            result["frames"] = frames_section(place("frames"), key_file, key, args.frames, args.seed,
                                              budget["frames"])
        if "state" in modes:
            result["state"] = state_section(place("state"), key_file, key, args.actions, args.seed,
                                            budget["state"])
        if "flood" in modes:
            result["flood"] = flood_section(place("flood"), key_file, key, args.idle, args.half_open,
                                            args.controllers, budget["flood"])
        if "stream" in modes:
            result["stream"] = stream_section(place("stream"), args.inputs, args.seed, budget["stream"],
                                              args.engine)
    sections = [v for k, v in result.items() if isinstance(v, dict)]
    state = result.get("state", {})
    result.update(
        seconds=round(time.monotonic() - started, 1),
        crashes=sum(s.get("crashes", 0) for s in sections),
        hangs=sum(s.get("hangs", 0) for s in sections),
        leaks=sum(max(s.get(k) or 0, 0) for s in sections
                  for k in ("leaked_fds", "leaked_threads", "leaked_processes")),
        runs_held=state.get("runs_held", 0),
        unsealed_executed=state.get("unsealed_executed", 0),
        valid_sessions_dropped=state.get("valid_sessions_dropped", 0),
        spins=state.get("findings", {}).get("spin", 0),
        refusals=result.get("flood", {}).get("refused", 0) + state.get("refused", 0))
    daemon_crashes = sum(s.get("crashes", 0) for k, s in result.items() if k in ("frames", "state", "flood"))
    print(f"in all: crashes {result['crashes']} (the daemon {daemon_crashes}, the stream reader "
          f"{result.get('stream', {}).get('crashes', 0)}), hangs {result['hangs']}, leaks {result['leaks']}, "
          f"runs held {result['runs_held']}, unsealed frames executed {result['unsealed_executed']}, "
          f"sessions of sealed requests dropped {result['valid_sessions_dropped']}, CPU spins "
          f"{result['spins']}, legitimate controllers refused {result['refusals']}")
    print(json.dumps(result))
    bad = ("crashes", "hangs", "leaks", "runs_held", "unsealed_executed", "refusals")
    return 1 if any(result[k] for k in bad) or state.get("findings") else 0


def _settled(daemon, warm: dict, deadline_s: float = SETTLE_S) -> dict:
    """What the daemon holds once its last sessions' resets are done: its fds and children
    back to what it held after the warm-up, or as they are at the deadline (then a leak)."""
    give_up = time.monotonic() + deadline_s
    while True:
        held = daemon.held()
        back = held["fds"] <= warm["fds"] and held["children"] <= warm["children"]
        if back or time.monotonic() > give_up:
            return held
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())

