"""The audit's TCP verdict: a link whose TCP probes took longer than a connect of the same
instant implies says "the emulation changes TCP"; one that did not says nothing of TCP."""

from netspec.analysis.linktcp import changes, figures, slow_start_rounds
from netspec.datastream.schema import TcpProbeRecord

MS = 1_000_000


def _probe(connect_ms: float, request_ms: float, burst_ms: float, error: str | None = None) -> TcpProbeRecord:
    return TcpProbeRecord("b", int(connect_ms * MS), int(request_ms * MS), int(burst_ms * MS), 65_536, error)


def test_slow_start_takes_a_round_trip_per_doubling_of_the_initial_window() -> None:
    sizes = (100, 14_480, 14_481, 43_440, 65_536, 101_360)
    assert [slow_start_rounds(n) for n in sizes] == [1, 1, 2, 2, 3, 3]


def test_a_link_as_a_real_one_says_nothing_of_tcp_and_the_fastest_probe_is_judged() -> None:
    # bench/links.py's figures at 10 ms each way after the fix; a lossy probe slower
    probes = [_probe(20.70, 20.82, 61.0), _probe(25.0, 90.0, 300.0), _probe(0, 0, 0, "TimeoutError")]
    got = figures(probes, None)
    assert (got.probes, got.failed, got.connect_ms, got.request_ms) == (3, 1, 20.70, 20.82)
    assert got.burst_expected_ms == 3 * 20.70
    assert changes(got.columns()) is None


def test_a_request_that_waited_for_its_first_write_to_leave_is_said() -> None:
    # bench/links.py's figures at 10 ms each way before the fix: 31.29 ms against 20.85
    said = changes(figures([_probe(20.85, 31.29, 62.0)], None).columns())
    assert said is not None
    assert said.startswith("the emulation changes TCP: a request in two writes cost 1.50 round trips")


def test_a_burst_held_to_a_few_segments_a_delay_is_said_and_a_rate_adds_its_serialisation() -> None:
    # two segments a one-way delay: 46 segments in 23 delays, against slow start's 3 round trips
    assert changes(figures([_probe(20.0, 20.1, 230.0)], None).columns()) is not None
    # at 10 Mbit/s the burst's 52.4 ms on the wire are implied, not a distortion
    assert figures([_probe(20.0, 20.1, 112.0)], 10.0).burst_expected_ms == 60.0 + 65_536 * 8 / 10e3
    assert changes(figures([_probe(20.0, 20.1, 112.0)], 10.0).columns()) is None


def test_no_probe_done_is_not_judged() -> None:
    got = figures([_probe(0, 0, 0, "ConnectionRefusedError")], None)
    assert (got.probes, got.failed, got.connect_ms) == (1, 1, None)
    assert changes(got.columns()) is None and changes({}) is None


def test_the_reports_tcp_lines_give_each_probed_link_and_step() -> None:
    import duckdb
    from netspec.analysis.linktcp import lines

    db = duckdb.connect()
    db.execute("""CREATE TABLE links AS SELECT * FROM (VALUES
                  ('a', 'b', 3, 'run', 4, 0, 20.7, 20.8, 61.0, 62.1),
                  ('b', 'a', 3, 'run', 0, 0, NULL, NULL, NULL, NULL)) AS t(src, dst, step, phase, tcp_probes,
                  tcp_failed, tcp_connect_ms, tcp_request_ms, tcp_burst_ms, tcp_burst_expected_ms)""")
    said = lines(db)
    assert said[0].startswith("TCP probes (the fastest of each step")
    assert said[2].split() == ["a", "->", "b", "run", "4", "0", "20.700", "20.800", "61.000", "62.100"]
    assert len(said) == 3  # b -> a had none
