"""Whether a component asked to stop is at work on its end, from two looks at /proc."""

import os

from netspec.daemon.ending import CLOCK_TICKS, activity, ending

HALF_S = 0.5
# A twentieth of a CPU over half a second, in /proc's ticks: what counts as at work.
AT_WORK_TICKS = HALF_S * CLOCK_TICKS / 20


def test_a_process_asleep_at_both_looks_with_its_cpu_time_still_is_idle():
    assert not ending(1, {1: (b"S", 10)}, {1: (b"S", 10)}, HALF_S)


def test_a_process_runnable_at_one_look_only_is_idle_and_at_both_is_at_work():
    assert not ending(1, {1: (b"S", 10)}, {1: (b"R", 10)}, HALF_S)
    assert not ending(1, {1: (b"R", 10)}, {1: (b"S", 10)}, HALF_S)
    assert ending(1, {1: (b"R", 10)}, {1: (b"R", 10)}, HALF_S)
    assert ending(1, {1: (b"D", 10)}, {1: (b"R", 10)}, HALF_S)


def test_a_process_using_a_twentieth_of_a_cpu_between_the_looks_is_at_work():
    assert ending(1, {1: (b"S", 10)}, {1: (b"S", 10 + int(AT_WORK_TICKS) + 1)}, HALF_S)
    assert not ending(1, {1: (b"S", 10)}, {1: (b"S", 10 + int(AT_WORK_TICKS) - 1)}, HALF_S)


def test_a_process_exited_unreaped_or_gone_is_ending():
    assert ending(1, {1: (b"S", 10)}, {1: (b"Z", 10)}, HALF_S)
    assert ending(1, {1: (b"S", 10)}, {}, HALF_S)


def test_its_descendants_count_but_not_the_cpu_of_one_that_began_between_the_looks():
    assert ending(1, {1: (b"S", 1), 2: (b"R", 1)}, {1: (b"S", 1), 2: (b"R", 1)}, HALF_S)
    assert not ending(1, {1: (b"S", 1)}, {1: (b"S", 1), 3: (b"S", 500)}, HALF_S)


def test_activity_reads_this_process_and_leaves_out_one_that_is_gone():
    seen = activity([os.getpid(), 2**22 + 1])
    assert list(seen) == [os.getpid()]
    state, cpu = seen[os.getpid()]
    assert state == b"R" and cpu >= 0
