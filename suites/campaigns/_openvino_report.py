"""The report of `specdec campaign openvino_genai` (results/findings/openvino-genai/README.md, finding.json), from
the cells' records only: every number below is one the run measured (or resumed from its journal)."""

from __future__ import annotations

import os

from harness.errors import HarnessError
from suites.engines_matrix import cmp_verdict, weakest_tv  # the matrix's rule: the page and the matrix agree

SOURCE_COMMIT = "da1db864d2bc1a265e9a036f5b57ef13f0e86c2c"  # openvino.genai master, 2026-08-21: the nearest stored
SRC = "src/cpp/src"

ROOT_CAUSE = f"""## Root cause (read from the source)

The installed wheel is `2026.4.1.0-3408-ab01d1771e4`; commit `ab01d1771e4` and the 2026.4 release branch are in no
stored snapshot of openvino.genai, so the source read is master at `{SOURCE_COMMIT[:9]}` (2026-08-21, after the
2026.3 branch). The installed build's assertion message names the same line as that source
(`sequence_group.cpp:32`), and its measured behaviour below is what this reading predicts. Lines are of
`{SRC}/sampling/sampler.cpp` at that commit unless named otherwise.

1. **The acceptance test divides the wrong probabilities** (`Sampler::validate_candidate`, 1386-1433). At draft
   position i the target pass first samples a fresh token x from its processed law p_i (`_multinomial_sample`,
   1542). `validate_candidate` then sets `p_i = exp(` the candidate's stored log-prob `)` — the *draft's*
   q_i(d_i), stored when the draft sampled it — and `q_i = exp(sampled_token.m_log_prob)` = p_i(x), the target's
   probability of the *fresh* token (1408-1410), and accepts iff r ≤ q_i(d_i) / p_i(x). The lossless rule is
   r ≤ p_i(d_i) / q_i(d_i) (Leviathan et al. 2023). Even a draft identical to the target (q = p) is rejected
   whenever p(d) < r · p(x): with α = 1 the speculative step still changes the law.
2. **The uniform has 101 levels** (1412-1414): `r = uniform_int_distribution<>(0, 100)(rng) / 100`, so r = 0
   with probability 1/101 (a draft the target gives probability 0 is still accepted that often) and every
   acceptance probability is rounded to a multiple of 1/101.
3. **The rejection is handled one iteration late** (openvino.genai #4190): on a rejection with sampling on,
   `sample_from_sequence_group` `continue`s (1575-1578) without emitting anything; the next iteration samples from
   the logits of position i + 1, which are conditioned on the rejected draft d_i, and registers that token in d_i's
   place (1551-1585). No residual max(0, p − q) is ever drawn: `get_p_prime` (1436-1460) only rescales the
   reported log-prob of that token.
4. **One token too few is rolled back from the KV cache**, the crash. The late iteration records
   `max_removed_tokens_per_request = generated_seq_token_offset` (1554), one less than the rejected candidate's
   offset. For the last candidate that is 0, so the rollback after `finish_iteration()` (1799-1801: `if
   (max_removed_tokens_per_request)`) is skipped and the sequence counts one processed token more than it holds.
   With prefix caching on, the next block hash asserts `content_length <= prompt_ids.size() +
   m_generated_ids.size()` (`{SRC}/sequence_group.cpp:32`, in `Sequence::_make_hash`); with prefix caching off, the
   next step attends to the rejected draft's keys and values in the slot of the token that replaced it.

Greedy decoding and prompt lookup take the other branch of `validate_candidate` (1416: accept iff the token the
target samples equals the draft, sample-and-match, lossless for any drafter) and roll back
`token_idx` tokens at the rejection itself (1426-1428): none of the four applies to them.

**Would #4190's patch fix it?** Its fix (PR #4490, "Accept Correct Token after Candidate Rejection", open) replaces
the `continue` by removing the rejected candidates and recording their count, and emits the token sampled at the
rejected position: it removes 3 and 4. It leaves 1 and 2 untouched. The sampler-level table below checks both rules
as planted §1a copies (`harness.mutants.openvino`): `as_read_verify` (1-3) and `patched_4190_verify` (1, 2, with the
fresh sample emitted at a rejection).
"""

PUBLIC = """## Public record (searched: openvino.genai issues and pull requests, `search` corpus issues, 2026-12-07)

- openvino.genai **#4190** (open, 2026-07-20): "Speculative decoding (`draft_model()`) + non-greedy sampling: crash
  and silent output corruption from a one-iteration-late rejection handler": the crash at `sequence_group.cpp:32` and
  the word-dropping corruption, root cause 3-4 above. Its fix: **PR #4490** (open, 2026-09-16).
- openvino.genai **#4476** (greedy differs with a GPU target and a CPU draft) and **#4425** (EAGLE3 on CPU): other
  speculative-decoding reports, not this rule.
- openvino.genai **PR #2331**: a prompt-lookup sampling fix; prompt lookup verifies by sample-and-match here.
- History (git log -S in the snapshot): the acceptance test and its 101-level uniform came with PR **#1068**
  (commit `f617099a7`, 2024-10-28, "Split assistant generation and speculative decoding"), the late-rejection path
  with PR **#1092** (commit `5fcdf990e`, 2024-10-29, "Speculative sampling"). Both are unchanged in
  `releases/2026/3` (the same code 24 lines earlier: 1386-1388, 1553) and in master `da1db864d`.
- Root causes 1 (the draft's q over the target's p of a fresh token) and 2 (the 101-level uniform) were found in no
  public report (searched: "acceptance ratio draft probability divided by target probability", "uniform_int_distribution
  (0, 100)", "validate_candidate", "speculative sampling acceptance openvino"): **new** as far as that search reaches;
  #4190's patch does not touch them.
"""


def _measured_s(done: dict) -> float:
    total = 0.0
    for rec in done.values():
        total += rec.get("seconds", 0.0) + sum(a.get("seconds", 0.0) for a in rec.get("arms", {}).values()
                                               if isinstance(a, dict))
    return total


def _fmt(x, spec=".3g"):
    return "–" if x is None else format(x, spec)


def _law_rows(done: dict) -> list[str]:
    lines = ["| setting | arm (method, prefix caching) | verdict vs speculation off | requests | crashed | "
             "samples compared (arm / off) | smallest Holm p | detectable TV (weakest test, power 0.99) | plug-in TV "
             "per position | seconds (arm) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for key, rec in done.items():
        if not key.startswith("law/"):
            continue
        for arm, cmp in rec["comparisons"].items():
            tests = cmp["tests"]
            p = min((t["details"].get("p_holm", 1.0) for t in tests), default=1.0)
            tv = weakest_tv(cmp)
            a = rec["arms"][arm]
            lines.append(f"| {rec['setting']} | {arm} | **{cmp_verdict(cmp).upper()}** | {a['requests']} | {a['crashed']} | "
                         f"{cmp['n_arm']} / {cmp['n_off']} | {_fmt(p)} | {_fmt(tv, '.3f')} | "
                         f"{', '.join(format(x, '.2f') for x in cmp['plugin_tv'])} | {a['seconds']:.0f} |")
    return lines


def write_report(run) -> int:
    done = run.done
    sampler = [r for k, r in done.items() if k.startswith("sampler/")]
    laws = [r for k, r in done.items() if k.startswith("law/")]
    crashes = [r for k, r in done.items() if k.startswith("crash/")]
    greedy = next((r for k, r in done.items() if k.startswith("greedy/")), None)
    generation = [r for k, r in done.items() if k.startswith("generation/")]
    not_run = [k for k in run.cells if k not in done]
    versions = run.provenance.get("versions", {})
    lines = ["# OpenVINO GenAI 2026.4.1: speculative decoding checked end to end", "",
             f"Command: `{run.command}` ({_measured_s(done) / 60:.0f} min of measuring, summed over the cells, on a 2-core machine shared with other jobs; load "
             f"average at the report: {' '.join(f'{x:.1f}' for x in os.getloadavg())}). Engine: `openvino-genai "
             "2026.4.1.0` (`2026.4.1.0-3408-ab01d1771e4`, openvino `2026.4.1-22982-e213a147257`) in its own venv "
             "(`$SPECDEC_OPENVINO_PYTHON`), driven by `harness/engines/openvino_genai.py` through a JSON-lines worker "
             "subprocess. Model: the embedded SmolLM2-135M-Instruct, its Q4_1 GGUF's dequantized weights written as an "
             "F16 GGUF (matrices float16, norms float32; OpenVINO GenAI refuses an F32 GGUF: 'Unsupported quantization "
             "type'; its own reading of the Q4_1 file is checked in 'Numerics or speculation'), "
             "`INFERENCE_PRECISION_HINT` and `KV_CACHE_PRECISION` f32, one thread; "
             "the draft is the same IR (`draft_model()`), f32 or at the CPU defaults bf16 / u8 (`draft-bf16`, a draft "
             "slightly unlike the target). γ = `num_assistant_tokens`; prompt lookup with `max_ngram_size` 3.", "",
             f"Project versions: {', '.join(f'{k} {v}' for k, v in sorted(versions.items())) or 'not recorded'}.", ""]
    if not_run:
        lines += ["Not run (cut short): " + ", ".join(f"`{k}`" for k in not_run), ""]
    crashed = [(r["setting"], a, v["crashed"], v["requests"]) for r in laws for a, v in r["arms"].items()
               if "prefix-cache" in a] + [("T=1,top_k=3", f"draft γ={c['gamma']}", c["crashed"], c["requests"])
                                          for c in crashes]
    lines += ["## Summary", "",
              "- **Draft model, T > 0: not lossless.** " + "; ".join(
                  f"{r['setting']} {a}: {cmp_verdict(c).upper()}" for r in laws for a, c in r["comparisons"].items()
                  if a.startswith("draft")) + ". The root cause is in the sampling rule (below), so every T > 0 "
              "setting is affected; the cells at T = 1 untruncated and T = 0.7 / top-p 0.9 had too few samples here "
              "to show it (INCONCLUSIVE, detectable TV in the table), the planted copy of the rule FAILs at the "
              "sampler level at detectable TV 0.02.",
              "- **Prompt lookup: no bug found**, at the detectable TV of its cells (T = 1 and T = 0.7 / top-p 0.9: "
              "INCONCLUSIVE, about 0.5; greedy identical): it verifies by sample-and-match.",
              "- **Prefix caching on crashes requests**: " + "; ".join(f"{s_} {a}: {k}/{n}" for s_, a, k, n in crashed)
              + ". With it off, the law shift stays.",
              "- **Weaker draft**: the same IR at the CPU defaults (bf16 inference, u8 KV cache), `draft-bf16`; a "
              "truncated draft was not built.", ""]
    lines += ["## Verdicts", "",
              "Each arm's N continuations of one prompt (the chat-templated copy prompt of the engine campaigns) "
              "against N continuations of OpenVINO's own pipeline with speculation off at the same setting, f32: the "
              "project's two-sample test per position and for the whole continuation "
              "(`harness.served.battery.tests_for_two_sample`: chi-square homogeneity, rare columns pooled), Holm "
              f"at family-wise false-alarm rate {_rate(run)} per comparison. `off-control` is a second, independent "
              "sample of speculation off: the correct control of the same test. A crashed request is counted and "
              "left out of its arm's law (with prefix caching on the law compared is the law given no crash). A comparison "
              "that rejects nothing is PASS only where every test's detectable TV is at most 0.25, else INCONCLUSIVE "
              "(at T = 1 without truncation 100 continuations spread over so many tokens that the pooled laws are "
              "all the test can compare). The plug-in TV is descriptive only: biased upward at these sample sizes "
              "(see the control's).", ""]
    lines += _law_rows(done) if laws else ["(no law cell ran)"]
    lines += [""]
    if crashes:
        lines += ["## The crash with prefix caching on (draft model, T = 1, top-k 3)", "",
                  "| γ (num_assistant_tokens) | new tokens | requests | crashed | rate | seconds | message |",
                  "|---|---|---|---|---|---|---|"]
        for c in crashes:
            lines.append(f"| {c['gamma']} | {c['length']} | {c['requests']} | {c['crashed']} | "
                         f"{c['crashed'] / c['requests']:.2f} | {c['seconds']:.0f} | `{(c['first_error'] or '–')[:140]}` |")
        lines += [""]
    if greedy:
        lines += [f"## Greedy ({greedy['tokens']} tokens, speculation off as the reference)", "",
                  "| arm | identical to speculation off, per prompt |", "|---|---|"]
        for arm, same in greedy["identical"].items():
            if arm != "off":
                lines.append(f"| {arm} | {', '.join(map(str, same))} |")
        lines += [""]
    if sampler:
        lines += ["## The rule as read, and with #4190's patch, at the sampler level", "",
                  "`specdec verify --impl IMPL` (contract §1a, the default plan: every case of the sampler catalogue), "
                  "the reference on the same plan as the correct control.", "",
                  "| implementation | verdict | detectable TV | samples | family p | seconds | first failures |",
                  "|---|---|---|---|---|---|---|"]
        for s in sampler:
            lines.append(f"| `{s['impl']}` | **{s['verdict'].upper()}** | {_fmt(s['detectable_tv'], '.3f')} | "
                         f"{s['samples']} | {_fmt(s['family_p'])} | {s['seconds']:.0f} | "
                         f"{'; '.join(s['failure_summary'][:2])[:300] or '–'} |")
        lines += [""]
    if generation:
        lines += ["## Against the local SmolLM2 target (transformers, float64 scores): the generation level", "",
                  "| implementation | verdict | detectable TV | samples | family p | seconds | failures | command |",
                  "|---|---|---|---|---|---|---|---|"]
        for g in generation:
            lines.append(f"| `{g['impl'].split(':')[1]}` | **{g['verdict'].upper()}** | {_fmt(g['detectable_tv'], '.3f')} "
                         f"| {g['samples']} | {_fmt(g['family_p'])} | {g['seconds']:.0f} | "
                         f"{'; '.join(g['failure_summary'][:2]) or '–'} | `{g['command']}` |")
        lines += [""]
    lines += _numerics_lines(laws, generation, greedy)
    lines += [ROOT_CAUSE, PUBLIC,
              "## Reproducer", "", "[repro.py](repro.py) (OpenVINO GenAI only, ≤ 30 lines): the crash with prefix "
              "caching on, and the law shift of position 1 with a draft identical to the target, prefix caching off. Not run "
              "as a script here (the shared CPU): it repeats, with OpenVINO alone, what the crash and T=1,top_k=3 "
              "cells above measured.",
              ""]
    run.write_result("finding.json", "campaign.openvino_genai.finding",
                     report={"cells": done, "not_run": not_run}, summary={"not_run": not_run})
    run.write_text("README.md", "\n".join(lines) + "\n")
    print(f"wrote {run.out / 'README.md'}")
    planted = [s for s in sampler if s["impl"].startswith("harness.mutants.openvino:as_read")]
    control = [s for s in sampler if s["impl"].startswith("specdec_ref")]
    if any(s["verdict"] != "fail" for s in planted) or any(s["verdict"] == "fail" for s in control):
        raise HarnessError("the sampler-level controls did not behave (as-read rule not caught, or the reference "
                           "failed): the checks cannot speak (README.md)")
    engine_fail = any(c["verdict"] == "fail" for r in laws for a, c in r["comparisons"].items()
                      if a != "off-control") or any(c["crashed"] for c in crashes)
    return 1 if engine_fail else 0


def _verdict(records: list, impl_suffix: str) -> str:
    hits = [g for g in records if g["impl"].endswith(":" + impl_suffix)]
    return f"**{hits[0]['verdict'].upper()}** (detectable TV {_fmt(hits[0]['detectable_tv'], '.3f')})" if hits \
        else "not run"


def _numerics_lines(laws: list, generation: list, greedy: dict | None) -> list[str]:
    """Which differences come from the numerics and which from speculation, from the verdicts measured above."""
    control = [(r["setting"], cmp_verdict(r["comparisons"]["off-control"])) for r in laws
               if "off-control" in r["comparisons"]]
    spec = [(r["setting"], arm, cmp_verdict(c)) for r in laws for arm, c in r["comparisons"].items()
            if arm != "off-control"]
    same_greedy = "not run" if not greedy else all(all(v) for a, v in greedy["identical"].items() if a != "off")
    verdicts = {g["impl"].split(":")[1]: g["verdict"] for g in generation}
    q41 = ("The Q4_1 reader's model is not the one transformers loads while the F16 GGUF's is: a conversion "
           "difference, not speculation (openvino.genai PR #2563, merged 2025-08, fixed an earlier Q4_1 accuracy bug "
           "of that reader; this one was not diagnosed further); every other cell runs the F16 GGUF."
           if verdicts.get("off_generate_q41") == "fail" and verdicts.get("off_generate") == "pass" else
           "Every other cell runs the F16 GGUF.")
    return ["## Numerics or speculation", "",
            "- **OpenVINO against the local transformers target, speculation off** (numerics alone, one-sample, "
            f"generation level): on the F16 GGUF of the dequantized weights {_verdict(generation, 'off_generate')}; on "
            f"OpenVINO's own reading of the Q4_1 GGUF {_verdict(generation, 'off_generate_q41')}. {q41}",
            "- **The same engine, speculation on against off** (same weights, same kernels, f32): the control "
            f"(off against off) {', '.join(f'{s}: {v.upper()}' for s, v in control) or 'not run'}; speculative arms "
            f"{', '.join(f'{s} {a}: {v.upper()}' for s, a, v in spec) or 'not run'}. A FAIL here is speculation, "
            "not numerics: the two arms share everything else.",
            f"- **Greedy**: every arm identical to speculation off on every prompt: {same_greedy}. Greedy "
            "verification is sample-and-match (root cause below), untouched by the sampling rule.",
            f"- **The draft model against the local target** (speculation and numerics together): "
            f"{_verdict(generation, 'draft_generate')}; prompt lookup: {_verdict(generation, 'lookup_generate')}.",
            ""]


def _rate(run) -> str:
    return format(getattr(run.config, "false_alarm_rate", 0.001), "g")
