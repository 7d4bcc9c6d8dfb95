import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from netspec.controller.experiment.durations import parse_duration
from netspec.controller.experiment.load import load
from netspec.controller.experiment.schemacheck import schema, validator
from netspec.protocol.errors import ConfigError

REPO = Path(__file__).parents[3]

GOOD = """\
experiment: demo
hosts:
  a: {}
  b: {address: "127.0.0.1:7420"}
components:
  server: {host: a, program: ACTOR, args: [launch]}
  load: {host: b, command: [sleep, "5"], start: run, stop: collect}
schedule:
  - launch
  - {phase: run, deadline: 500ms}
"""

# Components alike but for a key or two: YAML 1.1's merge key.
MERGED = """\
experiment: demo
hosts:
  a: {}
  b: {}
components:
  base: &base {host: a, command: [sleep, "5"]}
  quick: &quick {host: b, command: ["true"], env: {X: "1"}}
  other:
    <<: *base
    host: b
  both:
    <<: [*quick, *base]
schedule: [launch]
"""


def test_a_good_file_resolves_defaults_and_paths(experiment):
    plan = load(experiment(GOOD))
    assert [s.phase for s in plan.schedule] == ["launch", "run", "collect"]
    assert plan.schedule[1].deadline_s == 0.5
    assert plan.component("server").aware and Path(plan.component("server").program).is_absolute()
    assert plan.component("load").command == ("sleep", "5")
    assert plan.hosts[1].address == "127.0.0.1:7420"
    assert len(plan.sha256) == 64


@pytest.mark.parametrize(("text", "message"), [
    (GOOD.replace("host: a,", "hots: a,"),
     "exp.yaml:6: components.server.hots: unknown key 'hots' (did you mean 'host'?)"),
    (GOOD.replace("schedule:", "schedul:"),
     "exp.yaml:8: schedul: unknown key 'schedul' (did you mean 'schedule'?)"),
    (GOOD.replace("{host: a,", "{host: c,"),
     "exp.yaml:6: components.server.host: unknown host 'c'"),
    (GOOD.replace("{host: a,", "{host: aa,"),
     "exp.yaml:6: components.server.host: unknown host 'aa' (did you mean 'a'?)"),
    (GOOD.replace("deadline: 500ms", "deadline: 5 minutes"),
     "exp.yaml:10: schedule[1].deadline: '5 minutes' is not a valid duration"),
    (GOOD.replace("deadline: 500ms", "deadline: -3"),
     "exp.yaml:10: schedule[1].deadline: -3 is less than or equal to the minimum of 0"),
    (GOOD + "  - {deadline: 5s}\n", "exp.yaml:11: schedule[2]: missing key 'phase'"),
    (GOOD.replace("start: run", "start: rnu"),
     "exp.yaml:7: components.load.start: start phase 'rnu' is not in the schedule (did you mean 'run'?)"),
    (GOOD.replace("stop: collect", "stop: launch"),
     "exp.yaml:7: components.load.stop: stop phase 'launch' does not come after start phase 'run'"),
    (GOOD.replace("program: ACTOR", "program: nowhere.py"),
     "exp.yaml:6: components.server.program: program 'nowhere.py' not found"),
    (GOOD.replace("command: [sleep, \"5\"]", "program: ACTOR, command: [ls]"),
     "exp.yaml:7: components.load: give exactly one of 'program' (NETSPEC-aware) or 'command'"),
    (GOOD + "  - {phase: run, components: [sever]}\n",
     "exp.yaml:11: schedule[2].components[0]: unknown component 'sever' (did you mean 'server'?)"),
    (GOOD + "  - launch\n", "exp.yaml:11: schedule[2]: 'launch' must be the first step"),
    (GOOD.replace("experiment: demo", "experiment: demo\nexperiment: again"),
     "exp.yaml:2: experiment: key 'experiment' appears twice"),
    (GOOD.replace("hosts:", "hosts: [oops"),  # libyaml's words where PyYAML has it, else its own
     f"exp.yaml:3: not valid YAML: {'did not find ' if yaml.__with_libyaml__ else ''}expected ',' or ']'"),
    (GOOD.replace("experiment: demo\n", ""), "exp.yaml:1: missing key 'experiment'"),
    (GOOD.replace("args: [launch]", "args: launch"),
     "exp.yaml:6: components.server.args: expected array, got the string 'launch'"),
    (GOOD + "streams:\n  s: {enable: [STIM], components: [sevrer]}\n",
     "exp.yaml:12: streams.s.components[0]: unknown component 'sevrer' (did you mean 'server'?)"),
    (GOOD + "streams:\n  s: {enable: [STIM/a/b]}\n",
     "exp.yaml:12: streams.s.enable[0]: 'STIM/a/b' is not a valid entity pattern"),
    (GOOD + "streams:\n  s: {enable: [STIM], trigger: [STIM/fail]}\n",
     "exp.yaml:12: streams.s.trigger: a trigger writes a ring stream's chunks: give ring_chunks too"),
    (GOOD + "streams:\n  s: {enable: [STIM], ring_chunk: 5}\n",
     "exp.yaml:12: streams.s.ring_chunk: unknown key 'ring_chunk' (did you mean 'ring_chunks'?)"),
    (GOOD + "analysis:\n  graph:\n    n: {filter: select, input: events}\n    m: {filter: trim, input: n,\n"
            "        warmpu: 2s}\n",
     "exp.yaml:15: analysis.graph.m.warmpu: got an unexpected keyword argument 'warmpu'; trim takes warmup"),
    (GOOD + "analysis:\n  graph:\n    n: {filter: select, input: events, since: rnu}\n",
     "exp.yaml:13: analysis.graph.n.since: 'rnu' is neither a phase of the schedule (launch, run, collect)"),
    (GOOD + "analysis:\n  graph:\n    n: {filter: mine.py:f, input: events}\n",
     "exp.yaml:13: analysis.graph.n.filter: filter module mine.py not found"),
    (GOOD + "  - {phase: run, need: 3}\n",
     "exp.yaml:11: schedule[2].need: need 3 in step 'run', which has at most 2 participant(s): server, load"),
    (GOOD + "  - {phase: sync_clocks, need: 5}\n",
     "exp.yaml:11: schedule[2].need: need 5 in step 'sync_clocks', which has at most 3 participant(s): "
     "server and 2 host daemon(s)"),
    (GOOD.replace("  server:", "  netspecd:"),
     "exp.yaml:6: components.netspecd: 'netspecd' is the daemon's own name in node-wide steps"),
    # A key given twice beside a merge key is still refused; a merged key's problem is said at
    # the line it is written on.
    (MERGED.replace("    host: b\n", "    host: b\n    host: a\n"),
     "exp.yaml:11: components.other.host: key 'host' appears twice"),
    (MERGED.replace("    <<: *base\n", "    <<: *base\n    <<: *quick\n"),
     "exp.yaml:10: components.other.<<: key '<<' appears twice"),
    (MERGED.replace("{host: a, command", "{host: c, command"),
     "exp.yaml:6: components.base.host: unknown host 'c'"),
])
def test_errors_name_the_file_line_and_key(experiment, tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load(experiment(text))
    assert str(err.value).startswith(f"{tmp_path}/{message}"), str(err.value)


def test_streams_resolve_with_defaults(experiment):
    plan = load(experiment(GOOD + "streams:\n  s: {enable: [STIM], ring_chunks: 4, trigger: [STIM/x]}\n"))
    (stream,) = plan.streams
    assert (stream.name, stream.enable, stream.ring_chunks) == ("s", ("STIM",), 4)
    assert stream.trigger == ("STIM/x",)
    assert stream.chunk_records == 4096 and stream.components is None
    assert plan.resolved().streams["s"].flush_ms == 100


def test_a_single_host_is_implied_when_hosts_are_omitted(experiment):
    plan = load(experiment("experiment: x\ncomponents:\n  c: {command: 'true'}\nschedule: [launch]\n"))
    assert [h.name for h in plan.hosts] == ["local"]
    assert plan.component("c").command == ("/bin/sh", "-c", "true")


def test_durations_take_units():
    assert [parse_duration(v) for v in (2, 1.5, "250ms", "3s", "2m", "1h")] == \
        [2.0, 1.5, 0.25, 3.0, 120.0, 3600.0]


def test_the_published_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(schema())
    on_disk = json.loads((REPO / "controller" / "experiment" / "experiment.schema.json").read_text())
    assert on_disk == schema()


def test_every_shipped_experiment_is_valid():
    files = sorted((REPO / "experiments").glob("*/*.yaml"))
    assert files
    for path in files:
        load(path)


def test_every_shipped_experiment_points_editors_at_the_schema_where_it_is():
    files = sorted((REPO / "experiments").glob("*/*.yaml"))
    published = (REPO / "controller" / "experiment" / "experiment.schema.json").resolve()
    assert files
    for path in files:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        target = (path.parent / first.split("$schema=", 1)[1].strip()).resolve()
        assert target == published, (path, target)


def test_a_step_param_over_a_component_param_is_warned_of_unless_the_step_names_it_over_a_swept_one_an_error(
        experiment, tmp_path):
    text = """\
        experiment: w
        components:
          pub: {command: "true", params: {count: 3, size: 1}}
          sub: {command: "true", params: {count: 3}}
          other: {command: "true"}
        schedule:
          - launch
          - {phase: run, params: {count: 5, size: 1}, components: [pub]}
          - {phase: again, params: {size: 2}}
        sweep: {params: {sub.count: [1, 2]}}
        """
    plan = load(experiment(text))
    # The step that names pub means its count for it; the one that names none may not.
    assert plan.warnings == (f"{tmp_path}/exp.yaml:9: schedule[2].params.size: overrides param size "
                             "of component 'pub' in phase 'again': 1 -> 2 (a step that names its components "
                             "gives them its params without a warning)",)
    assert plan.resolved().warnings == list(plan.warnings)
    with pytest.raises(ConfigError) as err:
        load(experiment(text.replace(", components: [pub]", "")))
    assert str(err.value) == (f"{tmp_path}/exp.yaml:8: schedule[1].params.count: overrides the swept "
                              "param sub.count in phase 'run': every point of the sweep would run alike")


def test_the_schema_with_its_refs_written_out_finds_the_same_errors_as_the_schema():
    plain = jsonschema.Draft202012Validator(schema())
    documents = [
        {"experiment": "x", "components": {"c": {"host": 5, "command": "x", "bad": 1}}, "schedule": [1]},
        {"experiment": "no spaces", "hosts": {"a": {"address": []}}, "components": {},
         "schedule": [{"phase": "w", "deadline": "soon", "release": "later"}]},
        {"experiment": "x", "components": {"c": {"command": ["x"], "params": {"p": [{}]}}},
         "schedule": ["launch"], "services": {"clksync": {"interval_ms": -1}}, "extra": True},
    ]
    for document in documents:
        def said(errors):
            return sorted((e.validator, tuple(e.absolute_path), e.message) for e in errors)
        assert said(validator().iter_errors(document)) == said(plain.iter_errors(document)), document


def test_every_misspelt_key_is_an_error_at_once(experiment, tmp_path):
    text = (REPO / "experiments" / "stimulus_response" / "stimulus_response.yaml").read_text()
    lines = text.splitlines()
    bad = text.replace("\ncomponents:", "\ncomponets:").replace("\nschedule:", "\nschedul:")
    with pytest.raises(ConfigError) as err:
        load(experiment(bad))
    path = tmp_path / "exp.yaml"
    assert [str(e) for e in err.value.errors] == [
        f"{path}:{lines.index('components:') + 1}: componets: unknown key 'componets' "
        "(did you mean 'components'?)",
        f"{path}:{lines.index('schedule:') + 1}: schedul: unknown key 'schedul' (did you mean 'schedule'?)"]


def test_a_stream_pattern_no_program_declares_is_a_warning_with_a_did_you_mean(experiment, tmp_path):
    text = (GOOD + "streams:\n  s: {enable: [play, PLAY/tick, CAMP], trigger: [PLAY/tock], ring_chunks: 2, "
            "components: [server]}\n")
    plan = load(experiment(text))
    # A plain command may log through nodelib too: with one in the stream, nothing is known.
    assert load(experiment(text.replace(", components: [server]", ""))).warnings == ()
    assert plan.warnings == tuple(
        f"{tmp_path}/exp.yaml:12: streams.s.{key}: '{pattern}' matches no entity the stream's programs "
        "declare (PLAY/phase, PLAY/span, PLAY/tick) nor the daemon's (NETSPECD, CAMP, CLKSYNC) "
        f"(did you mean '{close}'?)"
        for key, pattern, close in (("enable[0]", "play", "PLAY"), ("trigger[0]", "PLAY/tock", "PLAY/tick")))


def test_a_program_whose_entities_are_not_all_literal_is_not_warned_of(experiment, tmp_path):
    program = tmp_path / "dynamic.py"
    program.write_text("from netspec import nodelib\nGROUP = 'KV'\nPUT = nodelib.event(GROUP, 'put')\n")
    text = (GOOD.replace("program: ACTOR", f"program: {program}")
            + "streams:\n  s: {enable: [kv], components: [server]}\n")
    assert load(experiment(text)).warnings == ()


def test_an_ssh_target_known_nowhere_here_is_a_warning(experiment, tmp_path, monkeypatch):
    config = tmp_path / "ssh_config"
    config.write_text("Host node1 node2\n  HostName 127.0.0.1\n")
    monkeypatch.setenv("NETSPEC_SSH_CONFIG", str(config))
    text = """\
        experiment: s
        hosts:
          a: {ssh: "me@nodee1:2222"}
          b: {ssh: node2}
          c: {ssh: "127.0.0.1:2222"}
          d: {ssh: localhost}
        components:
          c: {host: a, command: "true"}
        schedule: [launch]
        """
    assert load(experiment(text)).warnings == (
        f"{tmp_path}/exp.yaml:3: hosts.a.ssh: host 'a': 'nodee1' is no address, no alias of the SSH config "
        "(~/.ssh/config, $NETSPEC_SSH_CONFIG) and not in /etc/hosts (did you mean 'node1'?); unless DNS "
        "knows it (check asks no server), the run cannot reach it",)


def test_a_need_above_the_programs_that_register_the_phase_is_an_error(experiment, tmp_path):
    (tmp_path / "primary.py").write_text("from netspec import nodelib\nnodelib.register('work', print)\n")
    (tmp_path / "backup.py").write_text("from netspec import nodelib\n\n\n@nodelib.phase()\n"
                                        "def fail_over(ctx):\n    pass\n")
    text = """\
        experiment: ha
        components:
          primary: {program: primary.py}
          backup: {program: backup.py}
        schedule: [launch, work, {phase: fail_over, need: NEED}]
        """
    assert load(experiment(text.replace("NEED", "1"))).schedule[2].need == 1
    with pytest.raises(ConfigError) as err:
        load(experiment(text.replace("NEED", "2")))
    assert str(err.value) == (f"{tmp_path}/exp.yaml:5: schedule[2].need: need 2 in step 'fail_over', "
                              "which has at most 1 participant(s): backup")


def test_a_docker_hosts_memory_is_taken_in_bytes_or_with_a_unit_as_the_schema_allows(experiment):
    plan = load(experiment("""\
        experiment: m
        hosts:
          a: {docker: {memory: 268435456, cap_add: [NET_ADMIN]}}
          b: {docker: {memory: 256m}}
        components:
          c: {host: a, command: [sleep, "1"]}
        schedule: [launch, collect]
        """))
    a, b = plan.hosts
    assert (a.docker.memory, a.docker.cap_add, b.docker.memory) == (268435456, ("NET_ADMIN",), "256m")


def test_a_name_with_a_trailing_newline_is_refused(experiment):
    # The schema's patterns end in '$', which Python's re also matches before a final newline.
    with pytest.raises(ConfigError) as err:
        load(experiment(GOOD.replace("experiment: demo", 'experiment: "nl\\n"')))
    assert "exp.yaml:1: experiment: 'nl\\n' is not a valid" in str(err.value)
    with pytest.raises(ConfigError, match="hosts"):
        load(experiment(GOOD.replace("  a: {}", '  "a\\n": {}')))


PLAIN_TCP = """\
    experiment: plain
    hosts:
      a: {docker: {engine: "tcp://192.0.2.7:2375"EXTRA}}
    components:
      c: {host: a, command: [sleep, "1"]}
    schedule: [launch, collect]
    """


def test_a_tcp_engine_without_tls_is_refused_unless_the_file_says_insecure_tcp_and_then_warned_of(
        experiment, tmp_path, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    with pytest.raises(ConfigError) as err:
        load(experiment(PLAIN_TCP.replace("EXTRA", "")))
    assert str(err.value) == (f"{tmp_path}/exp.yaml:3: hosts.a.docker.engine: engine tcp://192.0.2.7:2375 "
                              "would be reached without TLS: give tls: {ca, cert, key}, or insecure_tcp: "
                              "true to send it everything in clear")
    tls = ', tls: {ca: /ca.pem, cert: /c.pem, key: /k.pem}'
    assert load(experiment(PLAIN_TCP.replace("EXTRA", tls))).warnings == ()
    plan = load(experiment(PLAIN_TCP.replace("EXTRA", ", insecure_tcp: true")))
    warning = (f"{tmp_path}/exp.yaml:3: hosts.a.docker.engine: engine tcp://192.0.2.7:2375 is reached "
               "without TLS (insecure_tcp: true): what the controller sends it, the host's key for the run "
               "included, crosses the network in clear, and anyone on that network may drive the engine")
    assert plan.warnings == (warning,)
    assert plan.resolved().warnings == [warning]  # run.json's plan keeps it
    assert plan.hosts[0].docker.insecure_tcp


def test_a_plain_tcp_docker_host_from_the_environment_is_refused_too(experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://192.0.2.7:2375")
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    text = PLAIN_TCP.replace('engine: "tcp://192.0.2.7:2375"EXTRA', "cpus: 1")
    with pytest.raises(ConfigError) as err:
        load(experiment(text))
    said = "hosts.a.docker: engine tcp://192.0.2.7:2375 (DOCKER_HOST) would be reached without TLS"
    assert said in str(err.value)
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    assert load(experiment(text)).warnings == ()


def test_a_merge_key_gives_the_merged_keys_and_a_key_given_beside_it_overrides_one(experiment):
    # YAML 1.1's merge key: keys given in the mapping override the merged ones, and of the
    # mappings merged, one earlier in the list overrides a later one.
    plan = load(experiment(MERGED))
    assert (plan.component("base").host, plan.component("other").host) == ("a", "b")
    assert plan.component("other").command == ("sleep", "5")
    both = plan.component("both")
    assert (both.host, both.command, both.env) == ("b", ("true",), {"X": "1"})


def test_a_mapping_merged_into_itself_is_no_endless_walk(experiment):
    text = MERGED.replace("  quick: &quick {host: b, command",
                          "  quick: &quick\n    <<: *quick\n    host: b\n    command")
    text = text.replace('["true"], env: {X: "1"}}', '["true"]')
    assert load(experiment(text)).component("quick").command == ("true",)


def test_a_sweep_value_given_twice_is_an_error_at_its_second_place(experiment):
    text = """\
        experiment: w
        components:
          w: {command: "true", params: {fail: 0, size: 1}}
        schedule: [launch]
        sweep:
          params:
            w.fail: [0, 1, 0]
            w.size: {from: 1, to: 2, step: 1}
        """
    with pytest.raises(ConfigError) as err:
        load(experiment(text))
    assert str(err.value).rpartition("/")[2] == (
        "exp.yaml:7: sweep.params.w.fail[2]: 0 is given again (first at [0]): two points would both be "
        "labelled w.fail=0; to run a point more than once, give repeat: {runs: N}")
    zipped = text.replace("sweep:\n", "sweep:\n          mode: zip\n").replace("{from: 1, to: 2, step: 1}",
                                                                              "[1, 2, 1]")
    with pytest.raises(ConfigError) as err:
        load(experiment(zipped))
    assert str(err.value).rpartition("/")[2] == (
        "exp.yaml:7: sweep.params: points w.fail=0 w.size=1 are given more than once: to run a point more "
        "than once, give repeat: {runs: N}")
