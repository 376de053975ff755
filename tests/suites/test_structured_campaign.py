"""The structured-output entry points: `specdec verify --setting` with a constraint (PASS for the reference, FAIL for a
structured mutant, through the CLI), and `specdec campaign structured` on the campaign runner (what `nox -s
structured` runs): a tiny run of the step part (the reference passes, every step mutant fails, a rerun resumes), its
README written from the records present only, and a bad setting exit 2 with one line before any run."""

import json

import pytest

from harness.cli import main
from harness.envelope import write_result
from harness.records import provenance

pytest.importorskip("llguidance")

SETTING = "T=1,regex=[a-eg-p]*f[a-c]+"


@pytest.mark.parametrize("impl,code", [("specdec_ref.adapters:generate", 0),
                                       ("harness.mutants.structured:grammar_state_one_behind", 1)])
@pytest.mark.stochastic(false_alarm=0.01, seed=1)  # per item: PASS 0.001 or FAIL 0.01
def test_specdec_verify_setting_takes_the_constraint(impl, code, capsys, tmp_path):
    out_json = tmp_path / "report.json"
    got = main(["verify", "--impl", impl, "--level", "generation", "--pair", "toy", "--setting", SETTING,
                "--samples", "2000", "--seed", "1", "--threads", "1", "--contexts", "none", "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert got == code, out[-2000:] + err[-2000:]
    report = json.loads(out_json.read_text())["report"]
    fmt = [t for t in report["tests"] if t["name"].endswith("constraint_format")]
    if code == 0:  # one per prompt: the constraint reached every cell, and every output obeys it
        assert len(fmt) == 2 and all(t["p_value"] == 1.0 for t in fmt)
    else:  # the run stops after the first failed cell: its format test names an output the automaton refuses
        assert report["verdict"] == "fail" and fmt and fmt[0]["p_value"] == 0.0
    assert "Traceback" not in out + err


def test_campaign_readme_is_written_from_the_records_present_only(tmp_path, capsys):
    assert main(["campaign", "structured", "--out", str(tmp_path), "--parts", "readme"]) == 0
    text = (tmp_path / "README.md").read_text()
    assert text.count("not run") >= 6  # exact, zoo, step, toy + SmolLM2 findings, llama-server: no records
    engine = {"version": "version: 1 (abc)", "grammar_gbnf": "root ::= [a-z]+", "prompts": ["p"], "length": 16,
              "samples_per_prompt": 5,
              "sides": {"on": {"check": {"verdict": "fail", "samples": 5, "detectable_tv": 0.5, "min_p_value": 0.0},
                               "format": {"pass": False, "violations": 1, "outputs": 5,
                                          "message": "1 of 5 outputs break the constraint; first: row 3: token 7"},
                               "stopped_on_eos": 2, "metrics": {"spec_decode_num_draft_tokens_total": 40,
                                                                "spec_decode_num_accepted_tokens_total": 30},
                               "seconds": 12.0, "load_at_start": [1.5, 1.0, 1.0]}}}
    write_result(tmp_path / "llama_server.json", "campaign.structured.llama_server", config={},
                 provenance=provenance(seed=0), report=engine, summary={})
    assert main(["campaign", "structured", "--out", str(tmp_path), "--parts", "readme"]) == 0
    from suites.campaigns.structured import engine_rows

    assert engine_rows(engine) == [["on", "**fail**", "5", "0.5", "0", "FAIL (1 of 5: 1 of 5 outputs break the "
                                    "constraint; first: row 3: token 7) (5 outputs)", "2", "40 / 30", "12 (1.5)"]]
    assert "| on | **fail** |" in (tmp_path / "README.md").read_text()


@pytest.mark.parametrize("argv,needle", [(["--parts", "exact,bogus"], "unknown part 'bogus'"),
                                         (["--engine-sides", "on,maybe"], "--engine-sides 'on,maybe'"),
                                         (["--samples", "0"], "--samples")])
def test_campaign_bad_setting_is_exit_2_with_one_line(argv, needle, tmp_path, capsys):
    assert main(["campaign", "structured", "--out", str(tmp_path / "s"), *argv]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out + err
    assert not (tmp_path / "s").exists()  # refused before any work


@pytest.mark.stochastic(false_alarm=0.031, seed=0)  # PASS 0.001 + three FAIL 0.01
def test_the_step_part_runs_on_the_runner_and_a_rerun_resumes(tmp_path, capsys):
    """One seed of the reference masked step and of every step mutant: the reference passes and every mutant fails
    (exit 0); step.json and the README say so; a rerun runs nothing again, one more seed stopped by --stop-at is
    reported as not run."""
    argv = ["campaign", "structured", "--parts", "step", "--step-seeds", "1", "--seeds", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    progress = [line for line in err.splitlines() if line.startswith("campaign structured:")]
    total = int(progress[-1].split("/")[1].split()[0])
    assert progress[-1] == f"campaign structured: {total}/{total} cells" and total >= 3
    record = json.loads((tmp_path / "step.json").read_text())
    assert record["kind"] == "campaign.structured.step" and record["config"]["parts"] == ["step"]
    step = record["report"]
    assert step["verify_masked"] == {**step["verify_masked"], "kind": "control", "seeds": 1, "fail": 0}
    assert all(r["fail"] == r["seeds"] == 1 for r in step.values() if r["kind"] == "mutant") and len(step) == total
    from suites.campaigns.structured import step_table

    assert ["`verify_masked`", "control", "0/1"] in step_table(step)
    assert "| `verify_masked` | control |" in (tmp_path / "README.md").read_text()
    assert main(argv) == 0
    assert [line for line in capsys.readouterr().err.splitlines() if line.startswith("campaign structured:")] == \
        [f"campaign structured: {total}/{total} cells"]  # every run from the journal
    assert main([*argv, "--step-seeds", "2", "--budget-s", "0"]) == 2  # out of time: the new seed does not start
    assert json.loads((tmp_path / "step.json").read_text())["report"]["verify_masked"]["seeds"] == 1


@pytest.mark.lint
def test_the_nox_session_runs_the_structured_tests_and_the_campaign():
    import ast
    import pathlib

    source = (pathlib.Path(__file__).resolve().parents[2] / "noxfile.py").read_text()
    (session,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "structured"]
    calls = [ast.unparse(c) for c in ast.walk(session) if isinstance(c, ast.Call)]
    assert any("'nox.session'" in ast.unparse(d) or "nox.session" in ast.unparse(d) for d in session.decorator_list)
    assert any("'pytest'" in c and "test_structured.py" in c for c in calls), calls
    assert any("'specdec', 'campaign', 'structured'" in c and "'results/structured'" in c for c in calls), calls


def test_the_zoo_part_runs_the_controls_over_the_first_seeds_and_the_reference_part_the_rest(tmp_path):
    """How many runs each entry gets: every structured mutant --seeds, both controls the first 20 seeds (the zoo
    part), the reference control the rest up to --control-seeds (the reference part, last)."""
    from collections import Counter

    from suites.campaigns import structured

    cells = structured.cells(structured.Config(parts=("zoo", "reference"), seeds=2, control_seeds=30), tmp_path)
    runs = Counter(args[1].name for args in cells.values())
    assert runs == {name: 30 if name == "reference_constrained" else 20 if name in structured.CONTROLS else 2
                    for name in structured.structured_names()}
    assert [args[1].name for args in cells.values()][-10:] == ["reference_constrained"] * 10
