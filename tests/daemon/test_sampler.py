"""The CAMP sampler of netspecd: one random instant per slot, records in the camp stream,
no aliasing with periodic workloads, and a warning where /proc/stat misses CPU time."""

import gzip
import itertools
import json
import math
import os
import random
import secrets
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from netspec import camp
from netspec.camp import CampError
from netspec.daemon.sampler import (
    CHECK_EVERY_NS,
    CHECK_SLACK_NS,
    CHECK_SLACK_SHARE,
    CampConfig,
    CampSampler,
    config_from_wire,
    open_stream,
    slot_instants,
)
from netspec.daemon.services import NodeServices
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.protocol import kinds as k
from support import (
    Steal,
    descriptors,
    sample_a_process_that_exits,
    schedstat,
    schedstat_ns,
    threads_named,
    wait_for,
)
from support import start_loadgen as start


def open_camp(directory) -> Datastreams:
    return open_stream(directory, "r", "h")


@pytest.fixture
def camp_stream(tmp_path):
    streams = open_camp(tmp_path)
    yield streams, tmp_path
    streams.stop()


def read(streams, directory):
    streams.stop()
    return [r for p in directory.glob("*.ds") for r in StreamReader(p)]


def test_one_uniformly_random_instant_in_each_slot():
    instants = list(itertools.islice(slot_instants(1_000, 100, random.Random(7)), 10_000))
    assert all(1_000 + 100 * k <= t < 1_000 + 100 * (k + 1) for k, t in enumerate(instants))
    positions = [(t - 1_000) % 100 for t in instants]
    assert 45 < sum(positions) / len(positions) < 55 and min(positions) < 2 and max(positions) > 97


def test_samples_every_counter_with_the_instant_it_was_read(camp_stream):
    streams, directory = camp_stream
    load = start("percent", "20")
    try:
        sampler = CampSampler(streams, CampConfig(interval_ms=20, interfaces=("lo",)), {"load": load.pid})
        ran0, t0, idle0 = schedstat_ns(load.pid), time.monotonic_ns(), camp.cpu_times().idle
        sampler.start()
        time.sleep(1.0)
        sampler.stop()
        truth = (schedstat_ns(load.pid) - ran0) / (time.monotonic_ns() - t0)
        idle1 = camp.cpu_times().idle
    finally:
        load.kill()
        load.wait()
    samples = [r for r in read(streams, directory) if r.entity.full_name == "CAMP/node"]
    fields = set(samples[0].value)
    assert {"cpu.user", "cpu.idle", "mem_free", "net.lo.packets_recv", "proc.load.cpu_ns"} <= fields
    assert not any(f.startswith("net.") and not f.startswith("net.lo.") for f in fields)
    assert {f"disk.{d}.reads" for d in sampler.disks} <= fields
    # Both ends, and one per 20 ms slot of the window, but for the slots the sampler says it
    # skipped: a busy machine may wake it past a slot's instant.
    slots = (samples[-1].ts - samples[0].ts) / 20e6
    assert slots - 2 <= len(samples) - 2 + sampler.late <= slots + 1, (len(samples), sampler.late, slots)
    gaps = [b.ts - a.ts for a, b in itertools.pairwise(samples)]
    assert min(gaps) < 15e6 and max(gaps) > 25e6  # random instants, not a fixed period
    first, last = samples[0], samples[-1]
    load_share = (last.value["proc.load.cpu_ns"] - first.value["proc.load.cpu_ns"]) / (last.ts - first.ts)
    assert abs(load_share - truth) < 0.03 and load_share > 0
    assert all(r.value["proc.load.pid"] == load.pid for r in samples)
    # The node's idle time as /proc/stat counted it around the sampler's window (a busy
    # machine's may not grow at all).
    assert last.value["mem_free"] > 0 and idle0 <= first.value["cpu.idle"] <= last.value["cpu.idle"] <= idle1


def test_a_process_that_exits_is_recorded_as_missing_and_said_once(camp_stream):
    streams, directory = camp_stream
    _, pid = sample_a_process_that_exits(streams, after=2)
    records = read(streams, directory)
    samples = [r.value for r in records if r.entity.full_name == "CAMP/node"]
    assert samples[0]["proc.load.pid"] == pid and samples[0]["proc.load.threads"] == 1
    assert all(s[f"proc.load.{f}"] is None for s in samples[1:] for f in ("pid", "cpu_ns", "threads"))
    assert all(s["net.lo.bytes_sent"] is not None for s in samples)
    warnings = [r.value for r in records if r.entity.full_name == "CAMP/warning"]
    assert [w["kind"] for w in warnings] == ["process_gone"]
    assert f"process {pid}" in warnings[0]["message"] and "exited" in warnings[0]["message"]


class SlowBackend:
    """The machine's own counters, each node-wide read taking `delay_s` longer."""

    def __init__(self, delay_s: float):
        self.real, self.delay_s = camp.default_backend(), delay_s

    def cpu_times(self):
        time.sleep(self.delay_s)
        return self.real.cpu_times()

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_slots_whose_instant_passed_during_a_sample_are_said_skipped(camp_stream):
    streams, directory = camp_stream
    # Each sample takes 1.5 ms, the slots are 1 ms: the instants of about every other slot
    # pass while a sample is taken.
    sampler = CampSampler(streams, CampConfig(interval_ms=1, interfaces=("lo",), disks=()), {},
                          backend=SlowBackend(0.0015))
    sampler.start()
    # Slots skipped and samples taken, each more than once: what the warning is to count.
    wait_for(lambda: sampler.late >= 10 and sampler.samples >= 10, timeout=10,
             what="ten slots skipped and ten samples taken")
    sampler.stop()
    records = read(streams, directory)
    [said] = [r.value for r in records if r.entity.full_name == "CAMP/warning"]
    taken = sum(r.entity.full_name == "CAMP/node" for r in records)
    assert said["kind"] == "skipped" and said["skipped"] == sampler.late > 0
    assert said["skipped"] + taken - 2 <= said["slots"] <= said["skipped"] + taken  # the two ends are extra
    assert f"{said['skipped']} of {said['slots']} random instants" in said["message"]


def test_a_configuration_from_the_wire_is_taken_as_it_was_typed_where_it_was_read():
    spec = k.CampSpec(interval_ms=10, disks=["vda"])
    assert config_from_wire(spec) == CampConfig(10.0, None, ("vda",), None)
    assert config_from_wire(None) is None


def test_an_unknown_interface_names_what_there_is(camp_stream):
    streams, _ = camp_stream
    with pytest.raises(CampError, match=r"no network interface 'eth99' .*lo"):
        CampSampler(streams, CampConfig(interfaces=("eth99",)), {})


def running_share(records, name):
    values = [r.value[f"proc.{name}.running"] for r in records if r.entity.full_name == "CAMP/node"]
    return 100.0 * sum(values) / len(values), len(values)


def test_randomized_instants_see_periodic_and_adversary_processes_as_they_are(camp_stream, capsys):
    # The isochronous process is busy 6.75 ms of every 22.5 ms (30 %); the adversary 11 ms
    # of every 22.5 ms, from 8 ms in (49 %). What a periodic sampler in step with them sees
    # (nothing, where neither runs) is bench/sampling.py's: on a busy machine the loads are
    # held off their schedule, so that nothing can be in step. The randomized instants are
    # held here to what the scheduler says the loads did in the same window, busy or not.
    streams, directory = camp_stream
    epoch = time.monotonic_ns()
    iso = start("periodic", "22.5", "6.75", "0", str(epoch))
    adversary = start("periodic", "22.5", "11", "8", str(epoch))
    pids = {"iso": iso.pid, "adversary": adversary.pid}
    try:
        before = {n: schedstat(p) for n, p in pids.items()}
        with Steal() as steal:
            t0 = time.monotonic_ns()
            sampler = CampSampler(streams, CampConfig(interval_ms=1, interfaces=("lo",), disks=()), pids)
            sampler.start()
            time.sleep(4.0)
            sampler.stop()
            elapsed = time.monotonic_ns() - t0
        after = {n: schedstat(p) for n, p in pids.items()}
        records = read(streams, directory)
    finally:
        for p in (iso, adversary):
            p.kill()
            p.wait()
    with capsys.disabled():
        print()
        for name in pids:
            # A process is runnable ('R') while on a CPU, while waiting for one, and while the
            # hypervisor stands its CPU still, which schedstat counts as neither.
            ran, waited = (a - b for a, b in zip(after[name], before[name], strict=True))
            low, high = 100 * ran / elapsed, 100 * (ran + waited) / elapsed + 100 * steal.share
            randomized, n = running_share(records, name)
            print(f"  {name}: truth {low:.1f}-{high:.1f} % (schedstat, steal); randomized "
                  f"{randomized:.1f} % ({n} samples)")
            # Random instants estimate the share as a binomial proportion does: within four
            # standard errors of it, or one point where those are smaller.
            error = max(1.0, 4 * 100 * math.sqrt(randomized / 100 * (1 - randomized / 100) / n))
            assert low - error <= randomized <= high + error


def kernel_config() -> str:
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            return f.read()
    except OSError:
        return ""


@pytest.mark.skipif("CONFIG_TICK_CPU_ACCOUNTING=y\nCONFIG_HZ=250\n" not in
                    "".join(line + "\n" for line in kernel_config().splitlines()
                            if line.startswith(("CONFIG_TICK_CPU_ACCOUNTING=", "CONFIG_HZ="))),
                    reason="needs tick-based CPU accounting at HZ=250 (/proc/config.gz) to hide from")
def test_a_process_running_between_ticks_is_said_in_each_window_proc_stat_missed_it(camp_stream):
    # The sampler's windows are this test's: it takes each sample here, between two reads of
    # the truth (the hog's CPU time, the scheduler's own account; /proc/stat's busy time; the
    # clock), so that what the sampler read lies between them. A window where even the least
    # the hog can have run beyond what /proc/stat saw is past the sampler's slack must be
    # said; one where even the most is within it must not. On a machine busy with other work
    # /proc/stat rightly sees the node busy through the hog's hiding, and nothing is said.
    streams, directory = camp_stream
    hog = start("tickhog")
    try:
        sampler = CampSampler(streams, CampConfig(interfaces=("lo",), disks=()), {"hog": hog.pid})

        def truth() -> tuple[int, int, int]:
            return time.time_ns(), schedstat_ns(hog.pid), camp.cpu_times().busy

        ends = []  # per sample: the truth just before it, and just after
        for _ in range(5):  # four windows of a second
            before = truth()
            sampler.sample()
            ends.append((before, truth()))
            time.sleep(max(0, ends[-1][1][0] + CHECK_EVERY_NS - time.time_ns()) / 1e9)
    finally:
        hog.kill()
        hog.wait()
    said = [r.value for r in read(streams, directory) if r.entity.full_name == "CAMP/warning"]
    assert all(w["kind"] == "cpu_accounting" for w in said), said
    windows = []
    for (open_before, open_after), (close_before, close_after) in itertools.pairwise(ends):
        least = [b - a for a, b in zip(open_after, close_before, strict=True)]  # (time, ran, seen)
        most = [b - a for a, b in zip(open_before, close_after, strict=True)]
        hidden = (least[1] - most[2], most[1] - least[2])
        slack = (CHECK_SLACK_NS + CHECK_SLACK_SHARE * least[0], CHECK_SLACK_NS + CHECK_SLACK_SHARE * most[0])
        windows.append((least, most, hidden[0] > slack[1], hidden[1] <= slack[0]))
    def within(w: dict, window: tuple) -> bool:
        figures = (w["window_ns"], w["processes_ns"], w["proc_stat_busy_ns"])
        return all(lo <= f <= hi for lo, f, hi in zip(window[0], figures, window[1], strict=True))

    for w in said:
        assert any(within(w, window) and not window[3] for window in windows), \
            f"said of no window where /proc/stat can have missed more than the slack: {w}"
        assert "run between the kernel's ticks" in w["message"]
    for window in windows:
        assert not window[2] or any(within(w, window) for w in said), \
            f"not said where /proc/stat missed {window[0][1] - window[1][2]} ns of the hog's time at least"


def sampled(services: NodeServices, window: str) -> None:
    """Wait until the logging window's sampler took a sample at one of its random instants
    (beyond the one it takes as the window opens)."""
    sampler = services.sampler
    wait_for(lambda: sampler.samples >= 2, timeout=10, what=f"a sample in {window}")


def test_every_logging_window_samples_the_same_fields_whichever_components_run(tmp_path):
    services = NodeServices("r", "h", tmp_path, CampConfig(interval_ms=10, interfaces=("lo",), disks=()),
                            components=("load", "idle"))
    services.open()
    load = start("percent", "0")
    try:
        services.start_logging({"load": load.pid})
        sampled(services, "the first window")
        services.stop_logging()
    finally:
        load.kill()
        load.wait()
    services.start_logging({})
    sampled(services, "the second window")
    services.close()
    samples = [r.value for p in tmp_path.glob("camp.*.ds") for r in StreamReader(p)
               if r.entity.full_name == "CAMP/node"]
    assert {s["proc.load.pid"] for s in samples} == {load.pid, None}
    assert all(s["proc.idle.pid"] is None for s in samples)


def test_a_stopped_sampler_leaves_no_thread_and_no_descriptor(tmp_path):
    before = descriptors()
    streams = open_camp(tmp_path)
    config = CampConfig(interval_ms=5, interfaces=("lo",), disks=())
    sampler = CampSampler(streams, config, {"me": os.getpid()})
    sampler.start()
    wait_for(lambda: sampler.samples >= 3, timeout=10, what="three samples")
    assert len(threads_named("camp")) == 1
    sampler.stop()
    sampler.stop()
    streams.stop()
    assert threads_named("camp") == [] and threads_named("netspec-flusher") == []
    assert descriptors() == before, "the backend's /proc files, the wake pipe and the stream closed"


def test_node_services_closed_leave_no_thread_and_no_descriptor(tmp_path):
    before = descriptors()
    services = NodeServices("r", "h", tmp_path, CampConfig(interval_ms=5, interfaces=("lo",), disks=()),
                            components=("me",))
    services.open()
    port = services.clock.serve("127.0.0.1", bytes(32))
    assert port
    services.start_logging({"me": os.getpid()})
    wait_for(lambda: services.sampler.samples >= 3, timeout=10, what="three samples")
    services.close()
    assert [t.name for t in threading.enumerate() if t.name in ("camp", "clksync", "netspec-flusher")] == []
    assert descriptors() == before


# In a namespace of its own: a sampler of every interface, whose backend lists the interfaces
# and then (before the sampler's first read of them) deletes the real veth eth1, which takes
# its peer eth0 with it. What the sampler said and sampled, as JSON.
VANISHING = textwrap.dedent("""\
    import json, subprocess, sys
    from pathlib import Path
    from netspec.camp.procfs import ProcBackend
    from netspec.daemon.sampler import CampConfig, CampSampler, open_stream
    from netspec.datastream.reader import StreamReader

    class Vanishing(ProcBackend):
        def network_interfaces(self):
            listed = super().network_interfaces()
            if "eth1" in listed:
                subprocess.run(["ip", "link", "del", "eth1"], check=True)
            return listed

    directory, backend = Path(sys.argv[1]), Vanishing()
    streams = open_stream(directory, "r", "h")
    with CampSampler(streams, CampConfig(disks=()), {}, backend=backend) as sampler:
        sampler.sample()
    streams.stop()
    backend.close()
    records = [r for p in directory.glob("*.ds") for r in StreamReader(p)]
    print(json.dumps({"interfaces": sampler.interfaces,
                      "warnings": [r.value for r in records if r.entity.full_name == "CAMP/warning"],
                      "samples": [r.value for r in records if r.entity.full_name == "CAMP/node"]}))
    """)


def test_an_interface_gone_before_its_first_read_is_said_and_left_out_not_fatal(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a network namespace and a veth need root")
    netns = f"nsc{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"],
                       check=True)
        done = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", VANISHING, str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["interfaces"] == ["lo"]
    gone = sorted(w["message"] for w in said["warnings"] if w["kind"] == "interface_gone")
    assert gone == [f"interface {i}: gone before its first read; not sampled" for i in ("eth0", "eth1")]
    assert said["samples"] and all(s["net.lo.bytes_sent"] is not None for s in said["samples"])
