"""The findings page of `specdec campaign onnxruntime_genai` (results/findings/onnxruntime-genai/README.md), written
from the campaign's records only (suites/campaigns/onnxruntime_genai.py)."""

from __future__ import annotations

SNAPSHOT = "a0c04eb1313b886c963e415bbd974748cb89a4eb"  # microsoft/onnxruntime-genai main, 2026-08-22 (stored snapshot)
INSTALLED_COMMIT = "00d66ef04ec56c0dae66d93ae2690f72e7bb90eb"  # onnxruntime_genai.__commit__ of the 0.18.0 wheel
PUBLIC = ("microsoft/onnxruntime-genai PR #2233 (base speculative decoding v0), #2287 (v1), #2314 / #2315 (n-gram v0 "
          "/ v1), #2414 (docs), #2491 / #2493 (Engine: verify caller-supplied drafts, `Request.set_draft_tokens`), "
          "#2495 (chained MTP in the engine; its review notes the sampled draft steps draw from a host mt19937 apart "
          "from the device sampler, so a seed's output depends on scheduling: narrowed in the seed contract), #2528 "
          "(stop strings under speculation)")
SEARCHED = ("the issues corpus for: onnxruntime-genai speculative decoding wrong distribution; n-gram output differs "
            "from greedy; ComputeAcceptProb p_draft zero; set_draft_tokens engine verification; sampled verification "
            "of supplied drafts. No correctness report (an issue saying speculative output is not the target's law) "
            "was found for onnxruntime-genai")


def _tv(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _p(x) -> str:
    return "–" if x is None else f"{x:.2g}"


def expected_ok(records: list[dict]) -> bool:
    """The campaign's own checks behaved: the planted cell FAILed, no control and the faithful rule PASSed, the q = 0
    copy FAILed."""
    planted = [r for r in records if r["kind"] == "two" and r.get("scale", 1.0) != 1.0]
    controls = [r for r in records if r["kind"] == "control"]
    rules = {r["impl"].rsplit(":", 1)[1]: r["verdict"] for r in records if r["kind"] == "rule"}
    return (all(r["verdict"] == "fail" for r in planted) and all(r["verdict"] == "pass" for r in controls)
            and rules.get("verify", "pass") == "pass" and rules.get("q_zero_verify", "fail") == "fail")


def _setting_failed(r: dict, setting: str) -> bool:
    return bool(r.get("settings", {}).get(setting, {}).get("rejected"))


def speculation_failures(records: list[dict]) -> list[str]:
    """Cells that say speculation changed the law: a speculative local cell failing a setting its speculation-off
    control (same pair) passes, a two-sample cell (not planted) failing, or speculative greedy != the engine's own."""
    off = {(r["pair"], k) for r in records if r["kind"] == "local" and r["impl"].endswith(":off_generate")
           for k, v in (r.get("settings") or {}).items() if v.get("rejected")}
    out = []
    for r in records:
        if r["kind"] == "local" and not r["impl"].endswith(":off_generate"):
            out += [f"{r['pair']} {r['impl'].rsplit(':', 1)[1]} {k}" for k in (r.get("settings") or {})
                    if _setting_failed(r, k) and (r["pair"], k) not in off]
        elif r["kind"] == "two" and r.get("scale", 1.0) == 1.0 and r["verdict"] == "fail":
            out.append(f"{r['pair']} {r['method']} {r['setting']} (two-sample)")
        elif r["kind"] == "greedy" and r.get("spec_vs_off_differ"):
            out.append(f"{r['pair']} {r['method']} greedy")
    return out


def engine_semantics_failures(records: list[dict]) -> list[str]:
    """(pair, setting) where the engine with speculation off already fails against the local target."""
    return sorted({f"{r['pair']} {k}" for r in records if r["kind"] == "local" and r["impl"].endswith(":off_generate")
                   for k in (r.get("settings") or {}) if _setting_failed(r, k)})


def _local_rows(records) -> list[list[str]]:
    rows = []
    for r in records:
        if r["kind"] != "local":
            continue
        impl = r["impl"].rsplit(":", 1)[1]
        if r.get("verdict") == "error":
            rows.append([r["pair"], impl, "all", "ERROR", "–", "–", "–", r.get("message", "")[:120]])
            continue
        stats = r.get("stats") or {}
        acc = (f"{stats.get('draft_tokens_accepted', 0)}/{stats.get('draft_tokens_evaluated', 0)} judged drafts kept "
               f"({stats.get('draft_tokens_proposed', 0)} proposed)" if stats.get("draft_tokens_proposed")
               else "no drafts (speculation off)")
        for setting, s in r["settings"].items():
            verdict = "FAIL" if s["rejected"] else ("PASS (equal)" if setting == "greedy" else r["verdict"].upper())
            rows.append([r["pair"], impl, setting, verdict, _tv(s.get("detectable_tv")), str(s.get("samples", "–")),
                         _p(s["min_p"]), acc])
        rows.append([r["pair"], impl, "(whole run)", r["verdict"].upper(), _tv(r["detectable_tv"]), str(r["samples"]),
                     f"family p {_p(r['family_p'])}, {r['seconds']:.0f} s", ""])
    return rows


def _two_rows(records) -> list[list[str]]:
    rows = []
    for r in records:
        if r["kind"] not in ("two", "control"):
            continue
        what = r["label"] if r["kind"] == "two" else f"control {r['repeat']}: off vs off"
        stats = r.get("stats") or {}
        acc = (f"{stats.get('draft_tokens_accepted', 0)}/{stats.get('draft_tokens_evaluated', 0)}"
               f" ({stats.get('draft_tokens_proposed', 0)})" if stats else "–")
        rows.append([r["pair"], what, ", ".join(r["settings"]), r["verdict"].upper(), _tv(r["detectable_tv_positions"]),
                     _tv(r["detectable_tv"]), str(r["samples"]), f"{r['seconds']:.0f}", _p(r["family_p"]), acc])
    return rows


def _greedy_rows(records) -> list[list[str]]:
    return [[r["pair"], r["method"], f"{r['prompts']} × {r['length']}", f"{r['spec_vs_off_differ']}/{r['prompts']}",
             f"{r['off_vs_transformers_differ']}/{r['prompts']}", f"{r['spec_vs_transformers_differ']}/{r['prompts']}",
             f"{r.get('wall_s', 0):.0f}"]
            for r in records if r["kind"] == "greedy"]


def _rule_rows(records) -> list[list[str]]:
    return [[r["impl"].rsplit(":", 1)[1], r["verdict"].upper(), _tv(r["detectable_tv"]), str(r["samples"]),
             _p(r["family_p"]), ", ".join(r["rejected"][:2]) or "–", f"{r['seconds']:.0f}"]
            for r in records if r["kind"] == "rule"]


def _table(head, rows) -> str:
    from harness.bench.report import markdown_table

    return markdown_table(head, rows) if rows else "(no cells run yet)"


def readme(run, records: list[dict]) -> str:
    spec_fail, semantics = speculation_failures(records), engine_semantics_failures(records)
    local_tv = [s.get("detectable_tv") for r in records if r["kind"] == "local" and r.get("settings")
                and r["pair"] != "smollm2" and "off_generate" not in r["impl"] for s in r["settings"].values()
                if s.get("detectable_tv")]
    two_tv = [r["detectable_tv_positions"] for r in records if r["kind"] == "two" and r.get("scale", 1.0) == 1.0
              and r.get("detectable_tv_positions")]
    controls = [r for r in records if r["kind"] == "control"]
    planted = [r for r in records if r["kind"] == "two" and r.get("scale", 1.0) != 1.0]
    versions = next((r for r in records if r["kind"] == "versions"), {})
    if spec_fail:
        headline = "**speculation FAILS** in " + "; ".join(spec_fail)
    else:
        headline = (f"**no speculative-decoding bug found**: on the toy pair at TV ≤ "
                    f"{_tv(max(local_tv) if local_tv else None)} per continuation law against the local target and "
                    f"≤ {_tv(max(two_tv) if two_tv else None)} per position against the engine with speculation off "
                    "(detectable TV at power 0.99), greedy equal token for token")
    if semantics:
        headline += ("; **the engine's own top-p is not the nucleus** (speculation off FAILS as well: "
                     + "; ".join(semantics) + ", see below)")
    return "\n".join([
        "# ONNX Runtime GenAI 0.18.0: speculative decoding checked end to end", "",
        f"Verdict: {headline}. Draft model (`model.draft` in genai_config.json) and n-gram (`ngram_size`), greedy, "
        "T = 1 and T = 0.7 / top-p 0.9, against the local target (transformers, the same weights) and against the "
        "engine's own generation with speculation off (two-sample).", "",
        f"Rerun: `SPECDEC_ORT_GENAI_PYTHON=V/bin/python {run.command}` "
        f"({run.seconds / 60:.1f} min in the last invocation; the journal keeps earlier cells). Timings are on a "
        "shared 2-core machine with other agents' jobs running beside them. The engine venv V: "
        "`python3 -m venv V && V/bin/pip install onnxruntime-genai==0.18.0 'onnxruntime>=1.31' numpy torch==2.13.0 "
        "transformers onnx onnx_ir` (the builder's needs; `gguf` too for GGUF input).", "",
        "## Versions", "",
        f"onnxruntime-genai {versions.get('onnxruntime_genai', '0.18.0')} (wheel commit "
        f"{versions.get('commit') or INSTALLED_COMMIT}), onnxruntime {versions.get('onnxruntime', '?')}, "
        f"builder `onnxruntime_genai.models.builder` of the same wheel with torch {versions.get('torch', '?')} and "
        f"transformers {versions.get('transformers', '?')}; CPU execution provider, fp32, one thread. Source read "
        f"at microsoft/onnxruntime-genai {SNAPSHOT[:10]} (main, 2026-08-22: the stored snapshot; the wheel's commit "
        f"{INSTALLED_COMMIT[:10]} is later and not in it, so line numbers are the snapshot's).", "",
        "## Against the local target (generation level)", "",
        "`specdec verify --level generation --contexts none` of the adapter's §1b functions "
        "(harness/engines/onnxruntime_genai.py): greedy equality with the target's greedy (2 prompts × 16 tokens), "
        "and the exact joint law of 3 new tokens (toy, enumerated in float64) or the PIT (SmolLM2), Holm at "
        "family-wise 1e-3 over every gating test of the run. Detectable TV at power 0.99 per "
        "prompt's continuation law. `off_generate` is the control: the engine without speculation.", "",
        _table(["pair", "impl", "setting", "verdict", "detectable TV", "samples", "min p", "speculation"],
               _local_rows(records)), "",
        *([("Not in this table: SmolLM2 at T = 1 (int8 draft, 100 samples per prompt) and SmolLM2's greedy cells, cut "
             "short on the shared CPU (the T = 1 cell ran over 15 minutes); `specdec campaign onnxruntime_genai "
             "--local-samples 20000` (without --no-smollm2) runs them."), ""]
          if not any(r["kind"] == "local" and r["pair"] == "smollm2" and r.get("setting") == "T=1" for r in records)
          else []),
        "## Against the engine with speculation off (two-sample)", "",
        "Per position (3 new tokens) and whole continuations, chi-square homogeneity "
        "(harness.served.battery.tests_for_two_sample), both arms from og.Generator with disjoint seeds, 2 prompts, "
        "Holm at family-wise 1e-3 over the cell. Detectable TV (power 0.99) is that of n_eff = n/2 draws.", "",
        _table(["pair", "arms", "setting", "verdict", "detectable TV per position", "… whole continuation",
                "samples", "s", "family p", "drafts kept/judged (proposed)"], _two_rows(records)), "",
        f"False alarms of this cell with speculation off in both arms: {sum(r['verdict'] == 'fail' for r in controls)}"
        f"/{len(controls)} (family-wise rate 1e-3 per cell). Planted fault (the speculative arm at "
        f"{planted[0]['scale'] if planted else '–'} × T): "
        + (", ".join(f"{r['verdict'].upper()} (family p {_p(r['family_p'])})" for r in planted) or "not run") + ".", "",
        "## Greedy: token for token", "",
        _table(["pair", "method", "prompts × tokens", "speculative ≠ engine greedy", "engine ≠ transformers",
                "speculative ≠ transformers", "s"], _greedy_rows(records)), "",
        "## top-p: a nucleus larger than the nucleus (speculation off and on alike)", "",
        "Where the local cells at T = 0.7 / top-p 0.9 fail with speculation off too, the cause is the engine's "
        "sampler, not speculation: `FindNucleus` (src/sampling_distribution.h:122-206, used by plain sampling and by "
        "both laws of the speculative check, :283-297) stops at the first sorted position i where prefix ≥ p · "
        "(prefix + (V − i − 1) · exp_i), a lower bound of the true cumulative mass; its comment says the nucleus "
        "\"may include a few extra tokens compared to exact global softmax\". The exact pass is taken only for "
        "V ≤ 64 (:186-203), so on the toy pairs (V = 17) top-p is exact and on SmolLM2 (V = 49,152) it is not: the "
        "support test finds generated tokens of probability 0 under the target's nucleus. On SmolLM2's first "
        "prompt the exact nucleus at T = 0.7, top-p 0.9 is 2 tokens (0.899 + 0.033). Speculation keeps the engine's "
        "own (widened) law: the draft and target rows are both built by ComputeSampledCategorical, and the "
        "two-sample cells compare with it.", "",
        "## Same seed, same rows?", "",
        _table(["pair", "method", "rows", "identical at T = 1", "identical at T = 0.7 / top-p 0.9"],
               [[r["pair"], r["method"], str(r["n"]), str(r["T=1"]), str(r["T=0.7,top_p=0.9"])]
                for r in records if r["kind"] == "same_seed"]), "",
        "n-gram verification draws the target's token with the round's generator and keeps the draft while they match "
        "(`VerifyDeterministicProposal`), restoring the generator state of each emitted token "
        "(speculative_decoding_strategy.cpp:764-775): where every row is identical, n-gram speculation is the plain "
        "sampler seed for seed, and its law cannot differ. The draft model consumes uniforms for its own draws and "
        "the acceptance test, so its rows differ and only the law can agree (the cells above).", "",
        "## The q = 0 edge (`ComputeAcceptProb`)", "",
        f"src/speculative_sampling.h:140-146 (at {SNAPSHOT[:10]}) returns acceptance probability 1 when the draft's "
        "probability of the drafted token is ≤ 0. On the draft-model path this branch is unreachable: the draft token "
        "is drawn from the very sparse law q that judges it (src/base_speculative_strategy.cpp:24-38, "
        "`SelectProposalToken` → `SampleSparseToken`, std::discrete_distribution, which never draws a weight-0 "
        "entry), so q(x) > 0 (src/speculative_decoding_strategy.cpp:726-729). A proposal row is empty only for a "
        "grammar-forced token (base_speculative_strategy.cpp:119-126), and forced tokens are auto-accepted before "
        "any ratio (speculative_decoding_strategy.cpp:1058-1080: the grammar admits nothing else, so the masked "
        "target puts probability 1 on them). n-gram proposals carry no q at all and are verified by sample-and-match "
        "(src/speculative_sampling.h:96-127, `VerifyDeterministicProposal`: lossless), and the Engine's "
        "caller-supplied drafts (`Request.set_draft_tokens`, PR #2493) likewise sample the target and keep a draft "
        "while it matches (PR #2495's review quotes scheduled_requests.cpp:361). `set_draft_tokens` could not be "
        "tried here: og.Engine on CPU reports max_draft_tokens_per_proposal() = 0 for a non-paged model, and the "
        "builder refuses paged attention on CPU (\"PagedAttention (use_paged_attention=true) requires CUDA with "
        "FP16/BF16 or WebGPU with FP16, not (cpu, FLOAT)\"). The rule itself, transcribed "
        "(harness/engines/onnxruntime_genai_rule.py), checked at the sampler level:", "",
        _table(["copy of the rule", "verdict", "detectable TV", "samples", "family p", "first rejections", "s"],
               _rule_rows(records)), "",
        "`q_zero_verify` is what the edge would do to any proposal judged by the ratio without a probability: every "
        "such draft kept, whatever p says. No public API reaches it in 0.18 on CPU.", "",
        "## How the models were made (and what the builder could not convert)", "",
        "- toy pairs: `save_pretrained` of the pair's target and draft, a word-level stand-in tokenizer (the builder "
        "requires one: \"Couldn't instantiate the backend tokenizer …\" without it) and an EOS id (\"Could not "
        "resolve eos_token_id from the model config, text config, or tokenizer\" without one), then "
        "`-p fp32 -e cpu`.", "",
        "- A model without EOS: 0.18 refuses an EOS id outside the vocabulary (\"eos_token_id (16) must be in range "
        "[0, 16) (vocab_size)\"), and an empty list falls back to the pad id, which then stops generation. The "
        "adapter appends one logits column at -1e30 (id V, probability exactly 0) as pad and EOS.", "",
        "- SmolLM2-135M-Instruct: the float32 HF folder transformers dequantizes from the embedded Q4_1 GGUF "
        "(harness/models/smollm2.py), built at fp32 (target) and int8 (the draft: the builder's weight-only "
        "quantization of the same weights). The embedded GGUF itself is Q4_1, which the builder does not take "
        "(it reads F16 / F32 GGUF only): `-i SmolLM2-135M-Instruct.Q4_1.gguf` stops in loaders/gguf.py:115 with "
        "\"RuntimeError: shape '[192, 576]' is invalid for input of size 69120\" (the Q4_1 blocks read as floats). "
        "The F32 GGUF (harness/models/gguf_f32.py) converts, given `-m` the local HF folder for config and tokenizer "
        "(without it the builder asks the hub: \"LocalTokenNotFoundError: Token is required\") and the `gguf` "
        "package in the engine venv (\"No module named 'gguf'\" otherwise); the cells use the HF-folder build.", "",
        "- MTP: needs a checkpoint with an MTP head (Qwen3.6); none is available offline here: not run.", "",
        "## Public record", "",
        f"{PUBLIC}. Searched: {SEARCHED}.", "",
        "## Reproducer", "",
        "results/findings/onnxruntime-genai/repro.py (≤ 30 lines): speculative vs plain sampling on one toy prompt, "
        "with the engine's own counters.", ""]) + "\n"
