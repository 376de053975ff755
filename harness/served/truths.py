"""The ground truths of the engine level: which one a run uses, and the tests of a (prompt, sampling setting)
cell's continuations against it.

(a) `local`: a local copy of the target (`--pair` / `--target`), tokenizer identity checked first;
    randomized PIT pooled / per position / serial, plus the exact joint law for tiny vocabularies;
(b) `score`: a second endpoint with speculation off scores the continuations (prompt logprobs);
    randomized PIT of the top-k coarsening (harness.served.battery);
(c) `two-sample`: the second endpoint samples too; chi-square homogeneity per position and joint.

After a failed cell with a local target, the advisory conventions check names the processing conventions that
explain the output; `tv_estimate` estimates how far it is (harness.served.estimate). `run` is the check run
(harness.served.check.EngineRun).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from harness.check.driver import Cell, Check
from harness.check.settings import Setting
from harness.errors import HarnessError
from harness.served import battery
from harness.served.client import EngineClient
from harness.served.draws import score_rows
from harness.served.probe import (
    choice_token_ids,
    prompt_scoring,
    raw_law_suffices,
    scoring_mode,
    server_tokenize,
)
from harness.served.requests import server_prompt_ids
from harness.served.text import PROBE_TEXT, decode, encode
from harness.stats import TestResult


def check_tokenizer_identity(client: EngineClient, model: str, tokenizer) -> None:
    """The server must tokenize like the local model: its tokenization of a probe string, else its ids vs text."""
    want = encode(tokenizer, PROBE_TEXT)
    got = server_tokenize(client, model, PROBE_TEXT)
    if got is not None:
        if got != want and got[1:] != want:  # a leading BOS added by the server is not a different tokenizer
            raise HarnessError(f"the server tokenizes differently from the local model ({got[:8]}... vs "
                               f"{want[:8]}...): point --pair/--target at the model the server runs")
        return
    reply = client.post("/v1/completions", {"model": model, "prompt": PROBE_TEXT, "max_tokens": 8, "seed": 0,
                                            "return_token_ids": True, "return_tokens_as_token_ids": True,
                                            "logprobs": 0})
    choice = reply["choices"][0]
    ids = choice_token_ids(choice)
    if ids is None:
        raise HarnessError("the server returns no token ids (and has no tokenize route), so the local model cannot "
                           "score its output: enable token ids (vLLM: return_token_ids) or use --ground-truth "
                           "two-sample with --reference-endpoint")
    if decode(tokenizer, ids) != choice.get("text"):
        raise HarnessError("the server's token ids do not decode to its text with the local tokenizer: point "
                           "--pair/--target at the model the server runs")


def choose_ground_truth(config, pair, reference, reference_model) -> str:
    if config.ground_truth != "auto":
        return config.ground_truth
    if pair is not None:
        return "local"
    if reference is None:
        raise HarnessError("no ground truth: give --pair/--target (a local copy of the target) or "
                           "--reference-endpoint (the engine with speculation off)")
    if prompt_scoring(reference, reference_model, "1 2 3") != "prompt_logprobs":
        return "two-sample"
    # a scorer whose prompt scores ignore the sampling parameters (vLLM) scores only the raw law
    if raw_law_suffices(config.settings) or scoring_mode(reference, reference_model, "1 2 3", "prompt_logprobs") == "processed":
        return "score"
    return "two-sample"


def require_processed(run, sampling: list[Setting], prompts: list) -> None:
    if raw_law_suffices(sampling):
        return
    mode = scoring_mode(run.reference, run.reference_model, prompts[0], "prompt_logprobs")
    if mode != "processed":
        raise HarnessError(f"the scoring endpoint's prompt scores are {mode} (before temperature/top-k/top-p), so it "
                           "cannot score sampling at T != 1 or with truncation (vLLM writes prompt scores raw whatever "
                           "its --logprobs-mode, even processed_logprobs): use --ground-truth two-sample, a local "
                           "target (--pair), or settings at T = 1 without truncation")


def count_tests_for_cell(ground_truth: str, length: int, enumerate_law: bool) -> int:
    """Gating tests one (prompt, sampling setting) cell emits: format + the ground truth's battery."""
    if ground_truth == "local":
        return 1 + battery.count_tests_for_local_target(length, enumerate_law)
    if ground_truth == "score":
        return 1 + battery.count_tests_for_pit(length)
    return 1 + battery.count_tests_for_two_sample(length)


def _law_tests(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    """The ground truth's battery on one (prompt, setting) cell's continuations."""
    run, data = cell.summary["_run"], cell.data
    rows, ref_rows = trials
    rng = np.random.default_rng([run.config.seed, data.index, int(data.setting.temperature * 1000)])
    kw = {"rate": rate, "power": power, "prefix": cell.name}
    if run.ground_truth == "local":
        from harness.check.exact_laws import target64
        from specdec_ref.generate import default_eos, eos_set

        return battery.tests_for_local_target(
            rows, list(data.prompt), model=target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target,
            setting=data.setting, vocab=run.pair.vocab_size,
            eos=eos_set(default_eos(run.pair.target)), length=run.length, enumerate_law=cell.summary["joint_law"],
            rng=rng, order=run.config.processing_order, classes=run.engine.classes, **kw)
    if run.ground_truth == "score":
        prompt_ids = data.prompt if isinstance(data.prompt, list) else server_prompt_ids(run, data.prompt)
        masses = np.concatenate(score_rows(run, prompt_ids, rows, data.setting) or [np.zeros((0, 3))])
        u, off, hidden = battery.pit_from_coarse_masses(masses, rng)
        positions = np.concatenate([np.arange(len(r)) for r in rows])
        seq_ids = np.concatenate([np.full(len(r), j) for j, r in enumerate(rows)])
        cell.summary.update(top_logprobs=run.config.top_logprobs, hidden_mass=hidden)
        return battery.charge_hidden_mass(battery.tests_for_pit(u, positions, seq_ids, off, length=run.length, **kw),
                                          masses[:, 2], positions)
    cell.summary["reference_samples"] = len(ref_rows)
    return battery.tests_for_two_sample(rows, ref_rows, length=run.length, **kw)


def _law_tests_open(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    """`_law_tests`, then a cell whose continuations are all one and the same is marked vacuous.

    Every continuation equal means the sampler never had a choice worth the name there (a prompt whose
    continuation is near-certain, or an engine that ignores the sampling request): the tests pass
    trivially and the tiny detectable TV they report says nothing about the speculative path. Such a
    cell promises no detectable TV (inf), so the run is INCONCLUSIVE, never PASS; a rejection still
    fails (a constant continuation the target never emits is a finding)."""
    results = _law_tests(cell, trials, rate, power)
    rows, ref_rows = trials
    if not vacuous(rows, ref_rows):
        return results
    message = (f"all {len(rows)} continuations are identical ({rows[0][:8]}): the cell cannot show a "
               "speculative-sampling error; choose a prompt or setting with open continuations")
    cell.summary["vacuous"] = message
    return [dataclasses.replace(t, detectable_tv=math.inf, details={**t.details, "vacuous": message})
            if t.details.get("detectable_metric", "").startswith("TV") else t for t in results]


def vacuous(rows: list[list], ref_rows: list[list] | None = None) -> bool:
    """Whether every continuation (of the engine, and of the reference when there is one) is the same."""
    return all(len({tuple(r) for r in sample}) <= 1 for sample in (rows, ref_rows or []))


def _engine_conventions(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    """Advisory (local ground truth): after a failed cell, the other processing conventions under which the
    target explains the engine's output (a convention to declare with --processing-order, not a bug)."""
    run, data = cell.summary["_run"], cell.data
    if run.ground_truth != "local" or not cell.decided(rate):
        return []
    import torch

    from harness.check.conventions import consistent_conventions
    from harness.check.exact_laws import target64
    from specdec_ref.generate import default_eos, eos_set

    rows = trials[0]
    width = max(1, max(map(len, rows), default=1))
    tokens = torch.tensor([r + [-1] * (width - len(r)) for r in rows], dtype=torch.long)
    model = target64(run.pair) if run.config.score_dtype == "float64" else run.pair.target
    cell.summary["consistent_conventions"] = consistent_conventions(
        tokens, model, list(data.prompt), run.length, data.setting, run.pair.vocab_size,
        eos_set(default_eos(run.pair.target)), run.config.processing_order, rate, power, cell.summary["joint_law"],
        run.config.seed + data.index)
    return []


def _engine_estimate(cell: Cell, trials, rate: float, power: float) -> list[TestResult]:
    from harness.served.estimate import estimate_run

    return estimate_run(cell, trials, rate, power)


ENGINE_LAW = Check("ground_truth", lambda cell: count_tests_for_cell(cell.summary["ground_truth"], cell.summary["length"],
                                                                     cell.summary["joint_law"]) - 1,  # - format
                   _law_tests_open)
ENGINE_CONVENTIONS = Check("conventions", lambda cell: 0, _engine_conventions, gating=False)
ENGINE_ESTIMATE = Check("tv_estimate", lambda cell: 0, _engine_estimate, gating=False)
