"""specdec_ref: a faithful reference implementation of speculative sampling.

Conventions (Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", arXiv:2211.17192; Chen et al. 2023, arXiv:2302.01318), used everywhere in this project
and never flipped:

- **p** = target probabilities (the model whose output law must be preserved),
- **q** = draft probabilities (the cheap model that proposes tokens),
- **gamma (γ)** = number of drafted tokens per step,
- **alpha (α)** = acceptance rate = Σ_x min(p(x), q(x)) = 1 − TV(p, q).

Algorithm 1 (one verification step): walk the γ drafted tokens left to right; keep x ~ q with
probability min(1, p(x)/q(x)); at the first rejection emit a token drawn from norm((p − q)₊) and stop;
if all γ are kept, emit a bonus token drawn from p at position γ. Every emitted token is then
distributed exactly as the target alone would produce it.

Modules:
- `processing` — logits → bias / penalties / masks → temperature → top-k → top-p → min_p → softmax
  (one function for p and q; `SamplingParams`, the tokens so far as `History`).
- `sampling`   — inverse-CDF sampling from explicit uniforms (so random draws can be replayed).
- `verify`     — the acceptance rule (stochastic and greedy), batched over rows.
- `runners`    — how logits are obtained from a transformers model: KV-cached or recomputed.
- `generate`   — whole speculative generation and the autoregressive baseline, with statistics.
- `tree`       — one verification step over a token tree (SpecInfer, deterministic top-k children).
- `toy`        — tiny real transformers models whose exact law is computable by enumeration.
- `adapters`   — the contract signatures (`verify`, `generate`) the harness calls.
"""

from specdec_ref.errors import SpecDecInputError

__all__ = ["SpecDecInputError"]
__version__ = "0.1.0"
