"""The context catalogue's sizes: the cache-block sizes its contexts must straddle, the prompt lengths, how
many contexts per family, the continuation length (harness.contexts builds the contexts from these, loaded
through harness.policy; the campaign that measures what they buy is suites/campaigns/contexts.py)."""

BLOCK_SIZES = (16, 32, 64, 128, 256)  # the common paged-KV block sizes (vLLM, SGLang, TensorRT-LLM)
CONTINUATION = 40  # new tokens per sample on the toy pairs: ≥ 33 passes two 16-token boundaries
SHARED_PREFIX = 16  # the random family's prompt pairs share one 16-token cache block
# Prompt lengths 4, 35, 66, …, 221 (step 31): windows of 40 new positions overlap (positions 4 … 260: every
# residue mod 16 … 256, a 256-boundary straddled), and the first block starts at 8 residues mod 16 (4, 3, …,
# 13; later blocks start wherever acceptance puts them). Contexts of one length share one generate() call and
# every family (the toy pairs' 4-token prompts too) uses these lengths, so a setting's contexts take 8 calls
# of ~140 rows: on the toy pairs a speculative generate() costs per step, not per row, up to ~150 rows
# (measured: ~25 % less time per token at 140 rows than at 70), and 16 lengths (all residues mod 16 for the
# first block) took 16 calls of ~70. Many contexts per length, few samples per context.
LENGTHS = tuple(range(4, 222, 31))
PAIRS_PER_LENGTH = 16  # random family: 16 prompt pairs (32 prompts) per length
RESAMPLED_CHAINS = 32  # target samples the resampled family cuts its prefixes from (one context per length each)
RESAMPLED_LENGTHS = LENGTHS  # the shortest (4) is a chain's random start itself
REAL_KINDS = ("chat", "code", "summarize")
REAL_RESAMPLED = (2, (32, 64, 128))  # real pairs: resampled chains and their cut lengths (beside the prompt set)
