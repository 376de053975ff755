"""Where each `specdec` producer writes when no --out is given: the results/ folders (policy).

The commands whose mechanism lives in harness/ (bench, numerics, the verify matrix), and every campaign of
suites/campaigns ("campaign.NAME": the default of its --out; harness.runner reads it for the campaigns built on it)."""

FOLDERS = {
    "bench": "results/bench",  # specdec bench: OUT/RUN per suite run
    "numerics": "results/numerics",  # specdec numerics
    "verify-matrix": "results/verify-matrix",  # specdec verify --vary
    "campaign.api_semantics": "results/findings/api-semantics",
    "campaign.architectures": "results/findings/architectures",
    "campaign.bench_batched": "results/bench/batched",
    "campaign.bench_costs": "results/bench/costs",
    "campaign.contexts": "results/contexts",
    "campaign.demo": "results/demo",
    "campaign.engine": "results/engine",
    "campaign.engines": "results/engines",
    "campaign.invariance": "results/invariance",
    "campaign.llama_server": "results/findings/llama-server",
    "campaign.llamacpp": "results/findings/llamacpp",
    "campaign.onnxruntime_genai": "results/findings/onnxruntime-genai",
    "campaign.openvino_genai": "results/findings/openvino-genai",
    "campaign.params": "results/params",
    "campaign.peers": "results/peers",
    "campaign.sequential": "results/sequential",
    "campaign.structured": "results/structured",
    "campaign.vllm_cpu": "results/findings/vllm-cpu",
    "campaign.zoo": "results/lossless",
    "campaign.check_time": "results/bench/check-time",
    "campaign.estimate": "results/estimate",
    "campaign.families": "results/families",
    "campaign.headline": "results/headline",
    "campaign.tail": "results/tail",
    "campaign.tree": "results/tree",
}
