"""A participant's outcome, decided in one place (protocol/outcome.py) for show, the browser
and netspec.results alike."""

import msgspec
from netspec.protocol.exits import KILLED
from netspec.protocol.outcome import FAILING, FINE, WORST_FIRST, Outcome, decide, worst
from netspec.protocol.runstep import Entry


def test_an_entry_decides_its_outcome_by_what_the_controller_recorded_else_its_ack():
    assert decide(Entry()) == Outcome.RUNNING  # no ack yet
    assert decide(Entry("ok", acked_ns=2, entered_ns=1)) == Outcome.OK
    assert decide(Entry("warning", acked_ns=2, entered_ns=1, outcome=Outcome.OK)) == Outcome.WARNING
    assert decide(Entry("ok", acked_ns=9, entered_ns=1, outcome=Outcome.LATE)) == Outcome.LATE
    assert decide(Entry("error", outcome=Outcome.SKIPPED)) == Outcome.SKIPPED
    # an error acked at or past its step's deadline was killed there; one before it failed
    assert decide(Entry("error", acked_ns=11, entered_ns=1), deadline_ns=10) == Outcome.KILLED
    assert decide(Entry("error", acked_ns=10, entered_ns=1), deadline_ns=10) == Outcome.ERROR


def test_the_words_are_run_jsons_as_they_were_and_killed_by_schedule_is_the_exit_verdicts():
    entry = Entry("ok", outcome=Outcome.SCHEDULED)
    assert msgspec.json.encode(entry) == b'{"status":"ok","outcome":"killed by schedule"}'
    assert msgspec.json.decode(b'{"outcome":"late"}', type=Entry).outcome is Outcome.LATE
    assert Outcome.SCHEDULED == KILLED and Outcome.KILLED == "killed"


def test_every_outcome_has_its_place_worst_first_and_one_killed_by_the_schedule_did_what_was_asked():
    assert sorted(WORST_FIRST) == sorted(Outcome) and len(set(WORST_FIRST)) == len(Outcome)
    assert worst(["ok", KILLED, "warning"]) == Outcome.WARNING
    assert worst(["ok", KILLED]) == Outcome.SCHEDULED  # not the worst of all, as the browser's folds had it
    assert worst(["skipped", "late", "error"]) == Outcome.ERROR
    assert worst([]) is None
    assert not FAILING & FINE and Outcome.SCHEDULED in FINE
