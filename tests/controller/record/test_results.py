import signal

from netspec.controller.record.results import ComponentResult


def test_tail_joins_output_split_anywhere_and_marks_stderr():
    result = ComponentResult("h", "c", ["prog", "--flag"])
    for piece in [b"one\ntw", b"o\n", b"thr"]:
        result.add_output("stdout", piece)
    result.add_output("stderr", b"oops\n")
    assert result.tail(10) == ["one", "two", "stderr: oops", "thr"]
    assert result.tail(2) == ["stderr: oops", "thr"]


def test_exit_descriptions():
    result = ComponentResult("h", "c", ["prog", "a b"])
    assert result.describe_exit() == "is still running" and result.ok
    result.exit_status, result.duration_s = 3, 12.4
    assert result.describe_exit() == "exited 3 after 12.4 s" and not result.ok
    result.exit_status = -signal.SIGKILL
    assert result.describe_exit() == "was killed by SIGKILL"
    assert result.command_line() == "prog 'a b'"


def test_an_endless_line_keeps_only_its_end():
    result = ComponentResult("h", "c", ["prog"])
    for _ in range(1000):
        result.add_output("stdout", b"x" * 65536)
    result.add_output("stdout", b"END")
    (line,) = result.tail(1)
    assert line.endswith("xEND") and len(line) <= 4096
