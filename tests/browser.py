"""What the browser tests share: real runs made once per test session (a passing run with
pairs, a failing run, a two-point campaign), whichever xdist worker asks first; and a headless
Chromium driven by selenium."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from netspec.web.app import create_app
from support import PROGRAMS, REPO, ns_control, session_dir, wait_for

STIMULUS = REPO / "experiments" / "stimulus_response" / "stimulus.py"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"

OK = f"""
experiment: browse-ok
hosts: {{a: {{}}, b: {{}}}}
components:
  server: {{host: a, program: {STIMULUS}, args: [--role, server], params: {{size: 64}}}}
  client: {{host: b, program: {STIMULUS}, args: [--role, client], params: {{count: 300, size: 64}}}}
services: {{clksync: {{reference: a}}, camp: {{interval_ms: 10}}}}
streams: {{stim: {{enable: [STIM]}}}}
analysis:
  pairs:
    to_server: {{start: STIM/send, end: STIM/stimulus}}
    to_client: {{start: STIM/reply, end: STIM/rtt}}
schedule:
  - launch
  - sync_clocks
  - start_logging
  - {{phase: listen, components: [server]}}
  - {{phase: run, components: [client]}}
  - stop_logging
  - collect
"""
FAILING = f"""
experiment: browse-failing
hosts: {{a: {{}}, b: {{}}, c: {{}}}}
components:
  w1: {{host: a, program: {PROGRAMS / 'actor.py'}, args: ["play"], params: {{ticks: 20}}}}
  w2: {{host: b, program: {PROGRAMS / 'actor.py'}, args: ["work,stop"], params: {{fail_in: work, lines: 40}}}}
  w3: {{host: c, program: {PROGRAMS / 'actor.py'}, args: ["work,stop"]}}
services: {{clksync: {{reference: a}}, camp: {{interval_ms: 10}}}}
streams: {{play: {{enable: [PLAY]}}}}
# w1's events are all in before w2 fails: its step's barrier is passed first.
schedule: [launch, sync_clocks, start_logging, {{phase: play, components: [w1]}},
           {{phase: work, components: [w2, w3]}}, stop, stop_logging, collect]
"""
# A fleet past the page's fold (web/fleet.py FOLD_HOSTS, 12): 16 hosts in two groups by name.
# Spans of ~1 ms in `warm` then ~4 ms in `soak` (a phase change, flat within each phase);
# web-07 slow in soak; db-2 hangs in work (the step passes on `need`; db-2 is ended at the
# deadline while finish runs); web-03 raises in finish, after the deadline. 16 hosts, not 300:
# the fold, the grid, the names and the page's height are the same past 12 (bench/browser.py
# measures 300 and 1000).
FLEET_HOSTS = [f"web-{i:02}" for i in range(1, 13)] + [f"db-{i}" for i in range(1, 5)]


def _fleet_component(host: str) -> str:
    params = {"ticks": 5, "span_ms_warm": 1, "span_ms_soak": 4, "lines": 3}
    params.update({"web-07": {"slow_in": "soak", "slow_ms": 400}, "db-2": {"hang_in": "work"},
                   "web-03": {"fail_in": "finish", "slow_in": "finish", "slow_ms": 2000}}.get(host, {}))
    inline = ", ".join(f"{k}: {v}" for k, v in params.items())
    return (f"  x{host.replace('-', '')}: {{host: {host}, program: {PROGRAMS / 'actor.py'}, "
            f"args: [\"warm,soak,work,finish\"], params: {{{inline}}}}}")


FLEET = (f"""
experiment: browse-fleet
hosts: {{{", ".join(f"{h}: {{}}" for h in FLEET_HOSTS)}}}
components:
""" + "\n".join(_fleet_component(h) for h in FLEET_HOSTS) + f"""
services: {{clksync: {{reference: web-01}}, camp: {{interval_ms: 100}}}}
streams: {{play: {{enable: [PLAY]}}}}
schedule: [launch, sync_clocks, start_logging, warm, soak,
           {{phase: work, need: {len(FLEET_HOSTS) - 1}, deadline: 1500ms}}, finish, stop_logging, collect]
""")
STALL = REPO / "experiments" / "openloop" / "stall.py"
# A run with faults (tests/e2e/test_browser_faults.py): the server paused 300 ms while an
# open-loop client asks it 200 requests a second; a command the schedule kills; and a run
# whose background command is SIGKILLed from outside, by a component of its own.
FAULTS = f"""
experiment: browse-faults
hosts: {{a: {{}}}}
components:
  server: {{host: a, program: {STALL}, args: [--role, server], params: {{stall_ms: 1, every_s: 100}}}}
  client: {{host: a, program: {STALL}, args: [--role, client],
           params: {{rate: 200, duration_s: 1.5, timeout_ms: 1000}}}}
  hold: {{host: a, command: "exec sleep 30", start: cut}}
streams: {{load: {{enable: [LOAD]}}}}
schedule: [launch, start_logging, {{phase: listen, components: [server]}},
           {{phase: open, components: [client]}}, cut, stop_logging, collect]
faults:
  - {{pause: server, at: {{phase: open, after: 500ms}}, for: 300ms}}
  - {{kill: hold, at: {{phase: cut, after: 200ms}}}}
"""
OUTSIDE = """
experiment: browse-outside
hosts: {a: {}}
components:
  victim: {host: a, command: "echo $$ > victim.pid; exec sleep 30", start: launch, stop: collect}
  killer: {host: a, command: "sleep 0.3; kill -9 $(cat ../../victim/work/victim.pid); sleep 0.5", start: cut}
schedule: [launch, cut, collect]
"""
SWEEP = OK.replace("browse-ok", "browse-sweep").replace("count: 300", "count: 100") + """
sweep: {params: {client.size: [64, 16384]}}
repeat: {runs: 2, metric: interval to_client}
"""


def made_runs(name: str, made: dict[str, tuple[str, int]]) -> Path:
    """session_dir()/NAME with runs/ made by real runs of `made` (file name -> experiment text
    and the exit code it must end with), once per session, whichever xdist worker asks first."""
    root = session_dir() / name
    with open(session_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "made").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            env = {**os.environ, "NETSPEC_HOME": str(root / "home")}
            for file, (text, _) in made.items():
                (root / f"{file}.yaml").write_text(textwrap.dedent(text))
            # At once: each run waits on its daemons and steps more than it computes.
            with ThreadPoolExecutor(len(made)) as pool:
                done = dict(zip(made, pool.map(lambda file: ns_control(
                    "run", f"{file}.yaml", "--quiet", cwd=root, env=env, timeout=180), made), strict=True))
            for file, (_, code) in made.items():
                assert done[file].returncode == code, done[file].stdout + done[file].stderr
            (root / "made").write_text("")
    return root


@pytest.fixture(scope="session")
def results() -> Path:
    """A directory with runs/ (and its campaigns/) made by real runs, once per session."""
    return made_runs("browser", {"ok": (OK, 0), "failing": (FAILING, 1), "sweep": (SWEEP, 0)})


@pytest.fixture(scope="session")
def faults_results() -> Path:
    """A directory with runs/ holding the FAULTS and OUTSIDE runs, once per session."""
    return made_runs("browser-faults", {"faults": (FAULTS, 0), "outside": (OUTSIDE, 1)})


@pytest.fixture(scope="session")
def fleet_results() -> Path:
    """A directory with runs/ holding the FLEET run, once per session (apart from `results`,
    whose runs the other browser tests wait for)."""
    return made_runs("browser-fleet", {"fleet": (FLEET, 1)})


def run_ref(root: Path, experiment: str, index: int = 0) -> str:
    return f"{experiment}/{sorted(p.name for p in (root / 'runs' / experiment).iterdir())[index]}"


@contextmanager
def serving(root: Path) -> Iterator[str]:
    """The app on a free 127.0.0.1 port in a thread of this process; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(create_app(root / "runs", root / "runs" / "campaigns"),
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), what="the results browser's server")
        assert server.started, "the results browser's server ended before it started"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def chromium() -> Iterator:
    """A headless Chromium under selenium, or a skip that says what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): "
                    "apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1800", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_page(driver, url: str, timeout: float = 30, unfold: bool = True) -> None:
    """Load `url` and wait until its panels drew (the page marks its body ready); with
    `unfold`, open every section the page folds (as a user asks for more) and wait until
    their panels drew too."""
    driver.get(url)
    deadline = time.monotonic() + timeout
    while not driver.execute_script("return document.body && document.body.dataset.ready === 'yes'"):
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not finish drawing within {timeout} s")
        time.sleep(0.05)
    if not unfold:
        return
    # a section's panels begin drawing once it is in the URL's `open` (netspec.js)
    opened = driver.execute_script(UNFOLD)
    while not driver.execute_script(UNFOLDED, opened):
        if time.monotonic() > deadline:
            raise AssertionError(f"{url}: the sections opened did not finish drawing within {timeout} s")
        time.sleep(0.05)


UNFOLD = """const closed = [...document.querySelectorAll('details.panel:not([open])')];
    closed.forEach((d) => d.querySelector('summary').click()); return closed.map((d) => d.id)"""
UNFOLDED = """const open = (new URLSearchParams(location.hash.slice(1)).get('open') || '').split(',');
    return arguments[0].every((id) => open.includes(id)) && (document.body.dataset.drawing || '0') === '0'"""


# Chromium aborts every request in flight when an interface of the machine changes (other
# tests' containers, pods and namespaced hosts come and go): the page asks such a GET again
# (netspec.js `panel`), so the abort's own console line is no error of the page's.
NETWORK_CHANGED = "net::ERR_NETWORK_CHANGED"


def console_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and NETWORK_CHANGED not in e["message"]]
