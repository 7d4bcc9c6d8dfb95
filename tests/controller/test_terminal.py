"""What a person sees on a terminal: a bar while a fleet is brought up or gathered."""

import io

from netspec.controller.cli import Terminal
from netspec.controller.summary import LISTED_OK


def test_a_fleet_beyond_a_few_hosts_gets_a_bar_on_a_terminal_that_leaves_the_lines_alone():
    screen = io.StringIO()
    terminal = Terminal(screen, bars=True)
    terminal.out("  collect         ", end=False)
    hosts = LISTED_OK + 4
    for done in range(1, hosts + 1):
        terminal.count("collect", done, hosts)
    terminal.out(" and 12 more ok [3 ms]")
    shown = screen.getvalue()
    assert "collect hosts" in shown and f"{hosts}/{hosts}" in shown
    # The open line was ended before the bar drew, and the bar is gone once done.
    assert shown.startswith("  collect         \n") and terminal.bar is None
    assert shown.endswith(" and 12 more ok [3 ms]\n")


def test_no_bar_for_a_few_hosts_or_off_a_terminal():
    for bars, hosts in ((True, LISTED_OK), (False, 100)):
        screen = io.StringIO()
        terminal = Terminal(screen, bars=bars)
        for done in range(1, hosts + 1):
            terminal.count("connect", done, hosts)
        assert screen.getvalue() == "" and terminal.bar is None
