import signal

from netspec.controller.record.results import ComponentResult


def test_tail_joins_output_split_anywhere_and_keeps_each_streams_apart():
    result = ComponentResult("h", "c", ["prog", "--flag"])
    result.add_output("stderr", b"oops\n")
    for piece in [b"one\ntw", b"o\n", b"thr"]:
        result.add_output("stdout", piece)
    assert result.tail(10) == {"stdout": ["one", "two", "thr"], "stderr": ["oops"]}
    assert result.tail(2) == {"stdout": ["two", "thr"], "stderr": ["oops"]}


def test_a_noisy_stderr_leaves_the_last_line_of_stdout_in_the_tail():
    # etcd's case: the reason on stdout, then a stream of warnings on stderr.
    result = ComponentResult("h", "etcd", ["etcd"])
    result.add_output("stdout", b"starting\nerror: member count is unequal\n")
    result.add_output("stderr", b"".join(b"warning %d\n" % i for i in range(50)))
    assert result.tail(10)["stdout"][-1] == "error: member count is unequal"
    assert result.tail(10)["stderr"] == [f"warning {i}" for i in range(40, 50)]


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
    (line,) = result.tail(1)["stdout"]
    assert line.endswith("xEND") and len(line) <= 4096
