"""Bad input to the reference gets a clear SpecDecInputError naming the argument."""

import pytest
import torch

from specdec_ref import SpecDecInputError, toy
from specdec_ref.generate import speculative_generate
from specdec_ref.verify import verify_step


def _verify_inputs(B=2, gamma=2, V=5):
    g = torch.Generator().manual_seed(0)
    p = torch.rand(B, gamma + 1, V, generator=g).softmax(-1)
    q = torch.rand(B, gamma, V, generator=g).softmax(-1)
    x = torch.zeros(B, gamma, dtype=torch.long)
    return p, q, x


@pytest.mark.parametrize("mutate,needle", [
    (lambda p, q, x: (p.log(), q, x), "target_probs"),  # logits instead of probabilities
    (lambda p, q, x: (p, q * 1.1, x), "draft_probs rows must sum to 1"),
    (lambda p, q, x: (p.masked_fill(p > 0.3, float("nan")), q, x), "NaN"),
    (lambda p, q, x: (p, q, x[:, :0]), "gamma must be >= 1"),
    (lambda p, q, x: (p, q[:, :, :4].softmax(-1), x), "vocabularies must match"),
    (lambda p, q, x: (p[:, :2], q, x), "target_probs must have shape"),
    (lambda p, q, x: (p, q, x + 7), "token ids in"),
    (lambda p, q, x: (p, q, x.float()), "integer"),
])
def test_verify_bad_input(mutate, needle):
    p, q, x = mutate(*_verify_inputs())
    with pytest.raises(SpecDecInputError, match=needle):
        verify_step(p, q, x, torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def pair():
    return toy.tiny_llama(16, seed=0, max_positions=32), toy.tiny_llama(16, seed=1, max_positions=32)


@pytest.mark.parametrize("kwargs,needle", [
    (dict(gamma=0), "gamma must be an integer >= 1"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_k=0), "top_k"),
    (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "empty"),
    (dict(input_ids=torch.zeros(1, 30, dtype=torch.long)), "exceeds the model's context of 32"),
    (dict(input_ids=torch.full((1, 3), 99)), "token ids in"),
    (dict(max_new_tokens=-1), "max_new_tokens"),
])
def test_generate_bad_input(pair, kwargs, needle):
    target, draft = pair
    args = dict(input_ids=torch.zeros(1, 3, dtype=torch.long), max_new_tokens=5, gamma=2, temperature=1.0)
    args.update(kwargs)
    input_ids = args.pop("input_ids")
    with pytest.raises(SpecDecInputError, match=needle):
        speculative_generate(target, draft, input_ids, **args)


def test_vocabulary_mismatch_names_both_sizes(pair):
    target, _ = pair
    other = toy.tiny_llama(24, seed=2)
    with pytest.raises(SpecDecInputError, match=r"target 16 tokens, draft 24 tokens"):
        speculative_generate(target, other, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=4, gamma=2)


def test_nan_logits_from_a_model_are_refused(pair):
    target, draft = pair
    broken = toy.tiny_llama(16, seed=0, max_positions=32)
    with torch.no_grad():
        broken.lm_head.weight[3, 0] = float("nan")
    with pytest.raises(SpecDecInputError, match="target logits contains NaN"):
        speculative_generate(broken, draft, torch.zeros(1, 3, dtype=torch.long), max_new_tokens=4, gamma=2)


# ---------------------------------------------------------------------------------------------------
# The command line under bad input: one test per kind, each asserting the exit code (docs/EXIT_CODES.md:
# 1 = the implementation is judged not lossless, 2 = the run could not be done) and ONE message line,
# never a traceback. The catalogue in docs/EXIT_CODES.md lists every kind below by its id.

IMPLS = "tests.impls.broken"
FAST = ["--cases", "anti-logits", "--samples", "50", "--threads", "1"]  # one small case: seconds per kind
GEN = ["--level", "generation", "--pair", "toy", "--samples", "50", "--threads", "1", "--contexts", "none"]


def _verify(impl, *extra):
    return ["verify", "--impl", impl, *extra]


def _a_file(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    return f


# (id, argv builder (tmp_path -> argv), exit code, text the one message line must contain)
KINDS = [
    ("impl-module-missing", lambda t: _verify("no_such_module:verify", *FAST), 2, "cannot import module"),
    ("impl-dependency-missing", lambda t: _verify("tests.impls.needs_missing_dep:verify", *FAST), 2,
     "imports 'specdec_no_such_dependency', which is not installed"),
    ("impl-import-raises", lambda t: _verify("tests.impls.import_raises:verify", *FAST), 2,
     "raised RuntimeError: config file not found"),
    ("impl-attribute-missing", lambda t: _verify(f"{IMPLS}:missing", *FAST), 2, "has no attribute 'missing'"),
    ("impl-not-callable", lambda t: _verify(f"{IMPLS}:not_callable", *FAST), 2,
     "not callable (it is of type int)"),
    # issue 55: a file path where a module name is due, and an implementation checked at the other level
    ("impl-file-path", lambda t: _verify("./myspec.py:verify", *FAST), 2,
     "--impl takes a module name, not a file path: from the folder that holds myspec.py, give --impl myspec:verify"),
    ("impl-file-path-in-a-folder", lambda t: _verify("src/myspec.py:verify", *FAST), 2,
     "from the folder that holds myspec.py (src), give --impl myspec:verify"),
    ("impl-sampler-at-generation-level", lambda t: _verify("specdec_ref.adapters:verify", *GEN), 2,
     'cannot be called as the generation contract generate(target, draft, input_ids, *, max_new_tokens, gamma, '
     'temperature, top_k, top_p, seed): missing a required argument: \'generator\'; it fits the sampler contract '
     '(§1a): check it with --level sampler (Python: level="sampler")'),
    ("impl-generate-at-sampler-level", lambda t: _verify("specdec_ref.adapters:generate", *FAST), 2,
     'it fits the generation contract (§1b): check it with --level generation (Python: level="generation")'),
    ("impl-tree-at-sampler-level", lambda t: _verify("specdec_ref.adapters:tree_verify_topk", *FAST), 2,
     "it fits the tree contract (CONTRACT-tree.md): check it with --family tree"),
    ("impl-signature", lambda t: _verify(f"{IMPLS}:two_args", *FAST), 2, "cannot be called as the sampler contract"),
    ("impl-spec-form", lambda t: _verify(IMPLS, *FAST), 2, "MODULE:CALLABLE"),
    ("returns-none", lambda t: _verify(f"{IMPLS}:returns_none", *FAST), 1, "returned NoneType"),
    ("returns-list", lambda t: _verify(f"{IMPLS}:returns_list", *FAST), 1, "returned list"),
    ("returns-wrong-shape", lambda t: _verify(f"{IMPLS}:wrong_shape", *FAST), 1, "returned shape"),
    ("returns-float", lambda t: _verify(f"{IMPLS}:returns_float", *FAST), 1, "returned dtype torch.float32"),
    ("returns-out-of-range", lambda t: _verify(f"{IMPLS}:out_of_range", *FAST), 1, "outside [0, 64)"),
    ("one-row-returns-none", lambda t: _verify(f"{IMPLS}:one_row_none_beyond_gamma1", *FAST), 1,
     "returned NoneType for one row (B = 1)"),
    ("impl-raises", lambda t: _verify(f"{IMPLS}:raises", *FAST), 1,
     "raised RuntimeError during case anti-logits: CUDA error: device-side assert triggered (at "
     "tests/impls/broken.py:"),
    ("impl-raises-no-message", lambda t: _verify(f"{IMPLS}:raises_without_message", *FAST), 1,
     "RuntimeError during case anti-logits: (no message) (at tests/impls/broken.py:"),
    ("impl-raises-sometimes", lambda t: _verify(f"{IMPLS}:flaky", *FAST), 1, "raised ValueError"),
    ("impl-hangs", lambda t: _verify(f"{IMPLS}:hangs", *FAST, "--timeout", "0.5"), 1, "timed out"),
    ("generation-raises", lambda t: _verify(f"{IMPLS}:generate_raises", *GEN), 1,
     "raised KeyError during greedy generation: 'past_key_values' (at tests/impls/broken.py:"),
    ("generation-returns-none", lambda t: _verify(f"{IMPLS}:generate_returns_none", *GEN), 1, "returned NoneType"),
    ("samples-zero", lambda t: _verify("specdec_ref.adapters:verify", "--samples", "0"), 2, "--samples must be >= 1"),
    ("samples-negative", lambda t: _verify("specdec_ref.adapters:verify", "--samples", "-5"), 2, "--samples"),
    ("samples-not-a-number", lambda t: _verify("specdec_ref.adapters:verify", "--samples", "many"), 2,
     "invalid int value"),
    ("gamma-zero", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--gamma", "0"), 2, "--gamma must be >= 1"),
    ("false-alarm-rate-out-of-range", lambda t: _verify("specdec_ref.adapters:verify", "--false-alarm-rate", "2"), 2,
     "false-alarm rate must be in (0, 1)"),
    ("tv-zero", lambda t: _verify("specdec_ref.adapters:verify", "--tv", "0"), 2, "--tv must be in (0, 1)"),
    ("power-one", lambda t: _verify("specdec_ref.adapters:verify", "--power", "1"), 2, "--power must be in (0, 1)"),
    ("timeout-zero", lambda t: _verify("specdec_ref.adapters:verify", "--timeout", "0"), 2, "--timeout must be > 0"),
    ("threads-zero", lambda t: _verify("specdec_ref.adapters:verify", *FAST[:4], "--threads", "0"), 2,
     "--threads must be >= 1"),
    ("unknown-level", lambda t: _verify("specdec_ref.adapters:verify", "--level", "engine2"), 2, "invalid choice"),
    ("unknown-case", lambda t: _verify("specdec_ref.adapters:verify", "--cases", "anti-logit"), 2,
     "Did you mean 'anti-logits'"),
    ("unknown-pair", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--pair", "toyy"), 2,
     "Did you mean 'toy'"),
    ("target-without-draft", lambda t: _verify("specdec_ref.adapters:generate", "--level", "generation",
                                               "--target", "x"), 2, "give both --target and --draft"),
    ("unknown-setting-name", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--setting", "minp"), 2,
     "Did you mean 'min_p'"),
    ("unknown-setting-field", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--setting", "T=1,minp=0.1"),
     2, "Known: T, bad_words_ids"),
    ("setting-without-value", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--setting", "top_p"), 2,
     "top_p has no value"),
    ("unknown-mutant", lambda t: ["mutants", "--only", "always_acept", "--out", str(t)], 2,
     "Did you mean 'always_accept'"),
    ("mutants-seeds-zero", lambda t: ["mutants", "--seeds", "0", "--out", str(t)], 2, "--seeds"),
    ("mutants-unknown-contract", lambda t: ["mutants", "--contract", "engine", "--out", str(t)], 2, "invalid choice"),
    ("compare-plans-without-generation", lambda t: ["mutants", "--compare-plans", "--contract", "sampler", "--out", str(t)],
     2, "--compare-plans compares the generation level's plans"),
    ("headline-sims-zero", lambda t: ["campaign", "headline", "--sims", "0", "--out", str(t)], 2, "--sims must be"),
    ("headline-timing-unknown-mutant", lambda t: ["campaign", "headline", "--timing", "penalties_count_rejected",
                                                  "--out", str(t)], 2, "unknown implementation 'penalties_count_rejected'"),
    ("json-unwritable", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--json",
                                          str(_a_file(t) / "r.json")), 2, "--json"),
    ("json-is-a-folder", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--json", str(t)), 2, "is a folder"),
    ("bench-out-unwritable", lambda t: ["bench", "--pair", "toy", "--out", str(_a_file(t) / "b")], 2,
     "--out"),
    ("mutants-out-unwritable", lambda t: ["mutants", "--quick", "--out", str(_a_file(t))], 2, "is a file"),
    ("demo-out-unwritable", lambda t: ["demo", "--out", str(_a_file(t) / "d")], 2, "--out"),
    ("numerics-out-unwritable", lambda t: ["numerics", "--pair", "toy", "--out", str(_a_file(t) / "n")], 2, "--out"),
    ("device-unknown", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--device", "banana"), 2,
     "--device 'banana' is not a device"),
    ("device-unavailable", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--device", "cuda:7"), 2,
     "--device cuda:7"),
    ("bench-device-unavailable", lambda t: ["bench", "--pair", "toy", "--device", "banana", "--out", str(t)], 2,
     "--device"),
    ("dtype-unknown", lambda t: _verify("specdec_ref.adapters:generate", *GEN, "--dtype", "bf17"), 2,
     "unknown dtype 'bf17'"),
    ("numerics-dtype-not-low", lambda t: ["numerics", "--pair", "toy", "--dtype", "float32", "--out", str(t)], 2,
     "low precision"),
    ("bench-gamma-zero", lambda t: ["bench", "--pair", "toy", "--gamma", "0", "--out", str(t)], 2, "--gamma"),
    ("bench-top-k-zero", lambda t: ["bench", "--pair", "toy", "--top-k", "0", "--out", str(t)], 2, "--top-k"),
    ("bench-top-p-above-one", lambda t: ["bench", "--pair", "toy", "--top-p", "1.5", "--out", str(t)], 2, "--top-p"),
    ("bench-temperature-negative", lambda t: ["bench", "--pair", "toy", "--temperature", "-1", "--out", str(t)], 2,
     "--temperature"),
    ("bench-unknown-pair", lambda t: ["bench", "--pair", "toyy", "--out", str(t)], 2, "Did you mean 'toy'"),
    ("numerics-too-long", lambda t: ["numerics", "--pair", "toy", "--max-new-tokens", "500", "--out", str(t)], 2,
     "context"),
    ("vary-unknown-field", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--vary", "gama=1,3",
                                             "--matrix-out", str(t)), 2, "did you mean 'gamma'"),
    ("vary-bad-value", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--vary", "seed=0,one",
                                         "--matrix-out", str(t)), 2, "bad value 'one'"),
    ("vary-invalid-configuration", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--vary", "tv=0.02,-1",
                                                     "--matrix-out", str(t)), 2, "--tv"),
    ("vary-unknown-impl", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--vary",
                                            "impl=specdec_ref.adapters:verify,no_such_module:verify",
                                            "--matrix-out", str(t)), 2, "cannot import module"),
    ("vary-matrix-out-unwritable", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--vary", "seed=0,1",
                                                     "--matrix-out", str(_a_file(t))), 2, "cell journal"),
    ("scheduler-without-vary", lambda t: _verify("specdec_ref.adapters:verify", *FAST, "--workers", "2"), 2,
     "go with --vary"),
    ("campaign-stop-at-bad", lambda t: ["campaign", "tree", "--stop-at", "noon", "--out", str(t)], 2, "--stop-at"),
    ("campaign-stop-at-hour-25", lambda t: ["campaign", "invariance", "--stop-at", "25:00", "--out", str(t)], 2,
     "--stop-at"),
    ("campaign-stop-at-past", lambda t: ["campaign", "invariance", "--stop-at", "1", "--out", str(t)], 2,
     "already past"),
    ("serve-tool-call-tokens-equal", lambda t: ["serve", "--tool-call-tokens", "5,5"], 2, "two different token ids"),
    ("serve-tool-call-tokens-one", lambda t: ["serve", "--tool-call-tokens", "5"], 2, "two different token ids"),
    ("bench-unknown-category", lambda t: ["bench", "--pair", "smollm2-ngram", "--categories", "poetry", "--out",
                                          str(t)], 2, "poetry"),
]


def _message_lines(err: str) -> list[str]:
    """stderr without progress lines (those name their loop: 'verify sampler: ...', 'mutant zoo: ...')."""
    return [line for line in err.splitlines() if line.startswith("specdec")]


@pytest.mark.parametrize("kind,argv,code,needle", KINDS, ids=[k[0] for k in KINDS])
def test_cli_bad_input(kind, argv, code, needle, tmp_path, capsys):
    from harness.cli import main

    assert main(argv(tmp_path)) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Traceback" not in out
    lines = _message_lines(err)
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]
    if code == 1:
        assert "verdict: FAIL" in out  # exit 1 is a verdict, and the output says so
    elif kind != "numerics-too-long":  # (the context is known only once the models are loaded)
        assert "elapsed" not in err  # refused before any work started (no progress display was opened)


def test_output_folder_without_permission_is_refused(tmp_path, monkeypatch):
    """As root (these machines) permissions are not enforced: the refusal is simulated at the write probe."""
    import tempfile

    import harness.preflight as preflight
    from harness.errors import HarnessError

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(HarnessError, match=r"--out .*: cannot write there \(Permission denied\)"):
        preflight.output_dir(tmp_path / "out", "--out")


def test_flaky_implementation_is_not_taken_for_a_one_row_one(capsys):
    """One random probe call would classify it as B = 1 (its first call raises): the probe repeats."""
    from harness.cli import main

    assert main(_verify(f"{IMPLS}:flaky", *FAST)) == 1
    assert "one row at a time" not in capsys.readouterr().out


@pytest.mark.stochastic(false_alarm=0.001, seed=0)  # no false FAIL 0.001
def test_generation_level_wraps_one_row_implementations(capsys):
    from harness.cli import main

    assert main(_verify(f"{IMPLS}:generate_one_row", *GEN, "--allow-inconclusive")) == 0
    assert "one prompt row at a time" in capsys.readouterr().out


def test_dtype_the_device_cannot_compute_in_is_refused(monkeypatch):
    import harness.preflight as preflight
    from harness.errors import HarnessError

    def no_half(*args, dtype=None, **kwargs):
        raise RuntimeError(f"\"addmm_impl_cpu_\" not implemented for '{dtype}'")

    monkeypatch.setattr(torch, "ones", no_half)
    with pytest.raises(HarnessError, match="does not compute on --device cpu"):
        preflight.dtype("float16", "cpu")


@pytest.mark.end_to_end
def test_over_long_generation_is_clamped_and_reported(tmp_path, capsys):
    from harness.cli import main

    assert main(["bench", "--pair", "toy", "--gamma", "1", "--temperature", "0", "--repeats", "1", "--prompts", "1",
                 "--max-new-tokens", "100000", "--threads", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "max_new_tokens clamped to fit the model's context" in out and "asked 100000" in out
    assert "max_new_tokens clamped" in next(tmp_path.glob("*/report.md")).read_text()


@pytest.mark.end_to_end
def test_interrupted_sweep_exits_130_then_resumes(tmp_path, capsys, monkeypatch):
    from harness.bench import measure
    from harness.cli import main

    real, calls = measure.measure_cell, []

    def dies_on_second(pair, cell):
        calls.append(cell.id)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(pair, cell)

    monkeypatch.setattr(measure, "measure_cell", dies_on_second)
    argv = ["bench", "--pair", "toy", "--gamma", "1", "--temperature", "0", "--repeats", "1", "--prompts", "1",
            "--max-new-tokens", "4", "--threads", "1", "--out", str(tmp_path)]
    assert main(argv) == 130
    lines = _message_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "interrupted" in lines[0]
    assert main(argv) == 0
    assert "1 resumed from an earlier run of the same commit" in capsys.readouterr().out


def test_catalogue_lists_every_kind():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "EXIT_CODES.md").read_text()
    missing = [k[0] for k in KINDS if f"`{k[0]}`" not in doc]
    assert not missing, f"docs/EXIT_CODES.md lacks {missing}"
