"""Where the committed engine findings keep their verdicts, as data for the engines matrix (suites/engines_matrix.py).

Each entry names a check-report JSON under results/findings/ (a result envelope, or a key path to a report inside
one) and what it measured: engine, method (None: speculation off is not a matrix row), ground truth, the label
shown beside it, the engine version where the file does not record it, and the public record. The verdict,
detectable TV, samples and date are read from the file, setting by setting (suites/engines_matrix.py); nothing
here is a result. An entry with `reader` names a campaign's own record format instead of a check report
(suites/engines_matrix.py READERS): "openvino" (`specdec campaign openvino_genai`'s finding.json: `arms` maps each
arm of its law and greedy cells to (method, label), None: a control, not a matrix cell; `settings` maps each law
setting to (matrix check, label)), "ortgenai" (`specdec campaign onnxruntime_genai`'s campaign.json: `impls` maps
each generation-level function to (method, label), None: speculation off). `RECORDS`: each engine's public record
as its findings page states it.
"""

from __future__ import annotations

F = "results/findings"

FINDINGS = (
    # vLLM CPU: `vllm serve` on SmolLM2-135M, the CPU expand kernel leaves sampling parameters uninitialized
    dict(engine="vllm-cpu", method="ngram", truth="local", path=f"{F}/vllm-cpu/engine_ngram_local.json"),
    dict(engine="vllm-cpu", method="ngram", truth="off", path=f"{F}/vllm-cpu/engine_ngram_two_sample.json"),
    dict(engine="vllm-cpu", method="draft", truth="local", path=f"{F}/vllm-cpu/engine_draft_local.json"),
    dict(engine="vllm-cpu", method="eagle", truth="local", path=f"{F}/vllm-cpu/engine_eagle_local.json"),
    dict(engine="vllm-cpu", method="ngram", truth="local", label="with specdec's expand fix",
         path=f"{F}/vllm-cpu/expand-fix/engine_fixed_local.json"),
    dict(engine="vllm-cpu", method="ngram", truth="local", check="logprobs",
         path=f"{F}/vllm-cpu/logprobs_raw_ngram.json"),
    # llama.cpp llama-server with a draft model (SmolLM2-135M)
    dict(engine="llama-server", method="draft", truth="local", label="its default truncation, judged in its order",
         path=f"{F}/llama-server/finding.json",
         keys=("report", "checks", "tokens/speculation-on, defaults, --processing-order llama_cpp"),
         version_key="version"),
    dict(engine="llama-server", method="draft", truth="local", label="truncation off",
         path=f"{F}/llama-server/finding.json",
         keys=("report", "checks", "tokens/speculation-on, truncation off, documented order"), version_key="version"),
    dict(engine="llama-server", method="draft", truth="local", check="logprobs", label="raw",
         path=f"{F}/llama-server/finding.json", keys=("report", "checks", "logprobs/raw/speculation-on"),
         version_key="version"),
    # llama-cpp-python's server, prompt lookup on vs off (two-sample)
    dict(engine="llama-cpp-python", method="ngram", truth="off", path=f"{F}/llamacpp/finding.json",
         keys=("report", "checks", 0, "report"), version="llama-cpp-python 0.3.36"),
    dict(engine="llama-cpp-python", method="ngram", truth="off", path=f"{F}/llamacpp/finding.json",
         keys=("report", "checks", 1, "report"), version="llama-cpp-python 0.3.36"),
    # OpenVINO GenAI 2026.4.1 on SmolLM2 (specdec campaign openvino_genai): each arm against the engine with
    # speculation off (two-sample), greedy against speculation off; the record does not hold the engine's version
    # (its findings page does: openvino-genai 2026.4.1.0)
    dict(engine="openvino-genai", reader="openvino", truth="off", pair="smollm2",
         path=f"{F}/openvino-genai/finding.json", version="openvino-genai 2026.4.1.0",
         arms={"draft": ("draft", None), "draft+prefix-cache": ("draft", "prefix caching on"),
               "draft-bf16": ("draft", "draft at bf16 / u8"), "lookup": ("ngram", None), "off": None,
               "off-control": None},
         settings={"T=1,top_k=3": ("T=1", "top-k 3"), "T=1": ("T=1", None),
                   "T=0.7,top_p=0.9": ("T=0.7,top_p=0.9", None)}),
    # ONNX Runtime GenAI 0.18.0 (specdec campaign onnxruntime_genai): the generation level against the local target,
    # two-sample against the engine with speculation off, greedy token for token (against both)
    dict(engine="onnxruntime-genai", reader="ortgenai", path=f"{F}/onnxruntime-genai/campaign.json",
         impls={"off_generate": None, "draft_generate": ("draft", None), "ngram_generate": ("ngram", None),
                "int8_draft_generate": ("draft", "int8 draft")}),
    # transformers assisted generation on the toy pair (generation level, γ pinned)
    dict(engine="transformers", method="draft", truth="local", label="toy-low, γ pinned",
         path=f"{F}/hf_assisted_toy_low_gamma_pinned.json"),
)

RECORDS = {  # each engine's public record as its findings page's "Public record" section gives it (issue 57, item 5)
    "vllm-cpu": "vLLM #55005 (open), fix PR #55006 (open): results/findings/vllm-cpu/README.md, Public record",
    "llama-server": "llama.cpp #27972 (open), fix PR #27196 (open), the logprobs: "
                    "results/findings/llama-server/public-record.md",
    "llama-cpp-python": "llama-cpp-python #2362 / PR #2363 (pieces over 32 bytes; not speculation): "
                        "results/findings/llamacpp/public-record.md",
    "transformers": "the one-token-back recurrent-state rollback: none found (new; nearest #49036): "
                    "results/findings/architectures/README.md, Public record",
    "sglang": "none found for CPU; the CPU path is sglang PR #27862: results/findings/sglang/README.md",
    "openvino-genai": "openvino.genai #4190 (open; fix PR #4490, open) reports the late rejection and the prefix-caching "
                      "crash; the acceptance ratio q(d)/p(fresh token) and the 101-level uniform: none found (new): "
                      "results/findings/openvino-genai/README.md",
    "onnxruntime-genai": "no correctness report found (searched: the issues corpus; PRs #2233, #2287, #2314/#2315, "
                         "#2491, #2085 read); top-p's early-stopping nucleus bound (PR #2085) on V > 64: none found: "
                         "results/findings/onnxruntime-genai/README.md",
    "specdec-serve": "the project's own server: none applies",
}
