"""The campaign runner (harness.runner): one rule for resume, --report-only, when to stop, provenance, the output
folder and the exit code, shown on a small campaign defined here and on the tree campaign."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import types

import pytest

from harness.configs import option
from harness.errors import HarnessError
from harness.runner import JOURNAL, campaign_parser, command_line, parser_for, run

CALLS: list[int] = []


@dataclasses.dataclass
class _Config:
    n: int = option(3, "--n", "cells", int, "N")
    bad: int = option(0, "--bad", "cells whose record says FAIL", int, "N")


def _cell(i: int) -> dict:
    CALLS.append(i)
    return {"i": i, "square": i * i}


def _report(run_) -> int:
    run_.write_result("records.json", "campaign.small", rows=run_.records,
                      summary={"command": run_.command, "complete": run_.complete})
    return 1 if any(r["i"] < run_.config.bad for r in run_.records) else 0


def _validate(config) -> None:
    if config.n < 0:
        raise HarnessError("--n must be >= 0")


def _campaign() -> types.ModuleType:
    module = types.ModuleType("small")
    module.__doc__ = "A small campaign: the squares of 0..n-1."
    module.Config, module.run_cell, module.report, module.validate = _Config, _cell, _report, _validate
    module.cells = lambda c: {f"i{i}": (i,) for i in range(c.n)}
    module.provenance_fields = lambda c: {"seed": 7, "dtype": "float64"}
    return module


def _records(out) -> dict:
    envelope = json.loads((out / "records.json").read_text())  # a result envelope: rows, summary, provenance
    return {"records": envelope["rows"], "provenance": envelope["provenance"], **envelope["summary"]}


def test_a_rerun_resumes_from_the_journal_and_fresh_runs_every_cell_again(tmp_path):
    CALLS.clear()
    assert run("small", ["--out", str(tmp_path)], _campaign()) == 0
    assert CALLS == [0, 1, 2] and (tmp_path / JOURNAL).exists()
    assert run("small", ["--out", str(tmp_path), "--n", "4"], _campaign()) == 0
    assert CALLS == [0, 1, 2, 3]  # only the new cell ran
    assert [r["square"] for r in _records(tmp_path)["records"]] == [0, 1, 4, 9]
    assert run("small", ["--out", str(tmp_path), "--n", "4", "--fresh"], _campaign()) == 0
    assert CALLS == [0, 1, 2, 3, 0, 1, 2, 3]


def test_report_only_and_a_spent_budget_run_nothing_and_report_what_is_journaled(tmp_path):
    CALLS.clear()
    assert run("small", ["--out", str(tmp_path), "--n", "2"], _campaign()) == 0
    assert run("small", ["--out", str(tmp_path), "--n", "5", "--report-only"], _campaign()) == 2  # 3 cells lacking
    assert run("small", ["--out", str(tmp_path), "--n", "5", "--budget-s", "0"], _campaign()) == 2  # spent: none ran
    with pytest.raises(HarnessError, match="already past"):  # 1970: refused before anything runs
        run("small", ["--out", str(tmp_path), "--n", "5", "--stop-at", "1"], _campaign())
    assert CALLS == [0, 1]
    record = _records(tmp_path)
    assert len(record["records"]) == 2 and record["complete"] is False


def test_the_exit_code_is_the_reports_and_the_record_carries_provenance_and_the_command(tmp_path):
    assert run("small", ["--out", str(tmp_path), "--bad", "1"], _campaign()) == 1
    record = _records(tmp_path)
    assert {"seed", "git_commit", "machine", "versions", "device", "dtype", "utc_time"} <= set(record["provenance"])
    assert record["provenance"]["seed"] == 7 and record["provenance"]["dtype"] == "float64"
    assert record["command"] == f"specdec campaign small --bad 1 --out {tmp_path}"
    assert run("small", ["--out", str(tmp_path), "--bad", "1", "--n", "5", "--report-only"], _campaign()) == 1  # 2
    #   cells lacking, but the cells made already show a failure: 1 stands


def test_bad_settings_raise_before_any_cell_runs(tmp_path):
    CALLS.clear()
    with pytest.raises(HarnessError, match="--n must be"):
        run("small", ["--out", str(tmp_path), "--n", "-1"], _campaign())
    with pytest.raises(HarnessError, match="--stop-at"):
        run("small", ["--out", str(tmp_path), "--stop-at", "noon"], _campaign())
    (tmp_path / "a-file").write_text("")
    with pytest.raises(HarnessError, match="--out"):  # not a folder: refused before any cell runs
        run("small", ["--out", str(tmp_path / "a-file")], _campaign())
    with pytest.raises(SystemExit) as usage:  # argparse: one line, exit 2 (specdec main returns the code)
        run("small", ["--n", "x"], _campaign())
    assert usage.value.code == 2 and CALLS == []


def test_the_output_folder_of_every_campaign_on_the_runner_is_declared_in_suites_outputs():
    from harness.cli import campaign_names, policy
    from harness.runner import is_campaign
    from suites.outputs import FOLDERS

    on_runner = [n for n in campaign_names() if is_campaign(policy(n))]
    assert {"tree", "families", "tail", "headline", "check_time", "invariance", "sequential", "estimate"} <= set(on_runner)
    for name in on_runner:
        assert campaign_parser(name).get_default("out") is None  # resolved by the runner from suites/outputs.py
        assert FOLDERS[f"campaign.{name}"].startswith("results/")


def test_command_line_lists_the_flags_that_differ_from_their_defaults():
    assert command_line("small", _Config(n=5)) == "specdec campaign small --n 5"


@dataclasses.dataclass
class _PartsConfig:
    parts: tuple[str, ...] = ("a", "b")  # the runner's --parts sets it
    n: int = option(2, "--n", "cells per part", int, "N")


def _parts_campaign(seen: list) -> types.ModuleType:
    module = types.ModuleType("parted")
    module.PARTS, module.OPT_IN_PARTS, module.Config = ("a", "b"), ("c",), _PartsConfig
    module.cells = lambda c, out: {f"{p}{i}": (p, i, str(out)) for p in c.parts for i in range(c.n)}
    module.run_cell = lambda p, i, out: {"part": p, "i": i, "out": out}

    def session(config):
        yield "held"

    module.session = contextlib.contextmanager(session)

    def report(run_):
        seen.append(run_)
        return 0

    module.report = report
    return module


def test_parts_are_one_runner_flag_validated_in_one_place(tmp_path):
    seen: list = []
    assert run("parted", ["--out", str(tmp_path)], _parts_campaign(seen)) == 0
    assert seen[-1].config.parts == ("a", "b") and list(seen[-1].done) == ["a0", "a1", "b0", "b1"]
    assert seen[-1].done["a0"]["out"] == str(tmp_path)  # cells(config, out): the folder is a cell's argument
    assert seen[-1].context == "held" and len(seen[-1].load) == 3  # what the session yielded, the load at start
    assert run("parted", ["--out", str(tmp_path), "--parts", "c,a"], _parts_campaign(seen)) == 0
    assert seen[-1].config.parts == ("a", "c")  # the campaign's order; an opt-in part runs when named
    assert seen[-1].command == f"specdec campaign parted --parts a,c --out {tmp_path}"
    for bad, message in (("a,x", "unknown part 'x' of campaign parted; its parts: a, b [(]opt-in: c[)]"),
                         (",", "no part named")):
        with pytest.raises(HarnessError, match=message):
            run("parted", ["--out", str(tmp_path), "--parts", bad], _parts_campaign(seen))
    help_text = parser_for("parted", _parts_campaign(seen)).format_help()
    assert "--parts PART,..." in help_text and "opt-in, run only when named: c" in help_text


def test_parts_need_the_plain_parts_field(tmp_path):
    module = _parts_campaign([])
    module.Config = _Config  # PARTS, but no `parts` field to set: no --parts either
    assert "--parts" not in parser_for("parted", module).format_help()


PENDING = {"vllm_cpu"}  # moving onto the engine interface (issue 56, another change): its --only still names parts


def test_no_campaign_spells_its_own_parts_flag():
    """--parts is the runner's (PARTS and a plain `parts` field); a campaign's --only names entries, never parts."""
    from harness.cli import campaign_names, policy
    from harness.configs import cli_fields
    from harness.runner import parts_of

    for name in sorted(set(campaign_names()) - PENDING):
        module = policy(name)
        flags = {f.metadata["flag"]: f for f in cli_fields(module.Config)}
        assert "--parts" not in flags, name
        assert parts_of(module)[0] == getattr(module, "PARTS", ()), name
        only = flags.get("--only")
        assert only is None or not set(only.metadata.get("choices") or ()) & set(getattr(module, "PARTS", ())), name


@pytest.mark.stochastic(false_alarm=0.011, seed='0 and 1000')  # FAIL 0.01 + PASS 0.001
def test_the_tree_campaign_on_the_command_line_resumes(tmp_path, capsys):
    from harness.cli import main

    argv = ["campaign", "tree", "--mutant-seeds", "1", "--control-seeds", "1", "--control-rows", "2000", "--only",
            "residual_wrong_sibling", "tree_single_coin", "--out", str(tmp_path)]
    assert main(argv) == 0
    first = json.loads((tmp_path / "campaign.json").read_text())
    assert first["kind"] == "campaign.tree" and first["provenance"]["git_commit"]
    assert {r["name"]: r["fails_at_gate"] for r in first["rows"]} == {"residual_wrong_sibling": 1,
                                                                        "tree_single_coin": 0}
    assert main([*argv, "--report-only"]) == 0
    again = json.loads((tmp_path / "campaign.json").read_text())
    assert [r["family_p"] for r in again["rows"]] == [r["family_p"] for r in first["rows"]]
    assert first["config"]["mutant_seeds"] == 1 and first["config"]["names"] == ["residual_wrong_sibling",
                                                                                  "tree_single_coin"]
    assert main(["run", "--config", str(tmp_path / "campaign.json"), "--out", str(tmp_path)]) == 0  # reruns: resumed
    assert main(["campaign", "tree", "--only", "no_such_entry", "--out", str(tmp_path)]) == 2
    assert "no_such_entry" in capsys.readouterr().err


def test_every_campaign_on_the_runner_records_a_config_that_reruns():
    """The config an envelope records (the campaign's Config) gives back the same Config through `specdec run`'s
    command line (harness.rerun.campaign_argv); the tree campaign's test reruns a real result file."""
    from harness.cli import campaign_names, policy
    from harness.configs import cli_fields
    from harness.envelope import config_dict
    from harness.rerun import campaign_argv
    from harness.runner import campaign_config, is_campaign

    for name in [n for n in campaign_names() if is_campaign(policy(n))]:
        module = policy(name)
        config = module.Config()
        argv = campaign_argv(name, config_dict(config), None)
        assert campaign_config(name, module, parser_for(name, module).parse_args(argv)) == config, name
        assert all(f.metadata["flag"] for f in cli_fields(module.Config)), name
