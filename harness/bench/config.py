"""`BenchConfig`: the one description of a benchmark run; the `specdec bench` flags are built from it.

Each field's metadata names its flag, help text and parser, so the CLI (`harness.bench.cli`) and the
Python API can never disagree on a default. Grid fields left at None take the suite's value; a value
given here overrides every sweep of the suite.
"""

from __future__ import annotations

import dataclasses
import math
import shlex

from harness.configs import option as _field
from harness.errors import HarnessError


def parse_int_list(text: str) -> tuple[int, ...]:
    """'1..8', '1-8', '1,2,4' or a mix ('1,2,4..6') -> (1, 2, ...)."""
    values: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        lo, sep, hi = part.replace("..", "-").partition("-")
        try:
            values.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise HarnessError(f"cannot read {text!r} as a list of integers (e.g. '1..8' or '1,2,4')") from None
    return tuple(values)


def parse_float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in str(text).replace(" ", "").split(","))
    except ValueError:
        raise HarnessError(f"cannot read {text!r} as a list of numbers (e.g. '0,1' or '0.7')") from None


def parse_names(text: str) -> tuple[str, ...]:
    return tuple(n for n in str(text).replace(" ", "").split(",") if n)


def parse_cost_ms(text: str) -> tuple[float, float]:
    """'TARGET_MS,DRAFT_MS' -> (target_ms, draft_ms)."""
    values = parse_float_list(text)
    if len(values) != 2:
        raise HarnessError(f"--synthetic-cost takes TARGET_MS,DRAFT_MS (e.g. 40,4), got {text!r}")
    return values


@dataclasses.dataclass
class BenchConfig:
    """Everything a benchmark run depends on (None = the suite's default)."""

    suite: str | None = _field(None, "--suite", "named suite: default, quick, synthetic, gpu (default: default, "
                               "or a plain grid when --pair/--target is given)")
    pairs: tuple[str, ...] | None = _field(None, "--pair", "registered pair name(s), comma-separated "
                                           "(`specdec pairs` lists them)", parse_names, "NAME[,NAME]")
    target: str | None = _field(None, "--target", "target checkpoint directory (with --draft)", metavar="PATH")
    draft: str | None = _field(None, "--draft", "draft checkpoint directory (with --target)", metavar="PATH")
    gammas: tuple[int, ...] | None = _field(None, "--gamma", "drafted tokens per step (default 1..8)",
                                            parse_int_list, "LIST")
    temperatures: tuple[float, ...] | None = _field(None, "--temperature", "sampling temperatures, 0 = greedy "
                                                    "(default 0,1)", parse_float_list, "LIST")
    top_k: int | None = _field(None, "--top-k", "top-k filter for p and q (default off)", int, "K")
    top_p: float | None = _field(None, "--top-p", "top-p filter for p and q (default off)", float, "P")
    repeats: int | None = _field(None, "--repeats", "timed repeats per cell, after the warm-up (default 3)", int, "R")
    prompts: int | None = _field(None, "--prompts", "prompts per cell, each generated with B = 1 (with --endpoint: "
                                 "the first N of each category; default all)", int, "N")
    max_new_tokens: int | None = _field(None, "--max-new-tokens", "new tokens per prompt", int, "N")
    synthetic_cost_ms: tuple[float, float] | None = _field(
        None, "--synthetic-cost", "pad every target/draft forward to this wall time (emulates an accelerator)",
        parse_cost_ms, "TARGET_MS,DRAFT_MS")
    compare_hf: bool = _field(False, "--compare-hf", "also run transformers assisted generation side by side",
                              action="store_true")
    quick: bool = _field(False, "--quick", "a small version of the suite that CI can afford (<= 2 min)",
                         action="store_true")
    device: str | None = _field(None, "--device", "torch device (default cpu; the gpu suite: cuda)", metavar="DEV")
    dtype: str | None = _field(None, "--dtype", "model dtype, e.g. float32, bf16 (default: the pair's)", metavar="DT")
    seed: int = _field(0, "--seed", "base seed (repeat r, prompt i use seed + 1000 r + i)", int, "S")
    out: str | None = _field(None, "--out", "results folder; the run writes into OUT/RUN (default: the policy's, "
                             "suites/outputs.py)", metavar="DIR")
    run_name: str | None = _field(None, "--run", "run folder name (default: the suite's name)", metavar="RUN")
    resume: bool = _field(True, "--no-resume", "recompute cells already in OUT/RUN/rows.jsonl",
                          action="store_false")
    time_budget_s: float | None = _field(None, "--time-budget", "start no new cell after this many seconds "
                                         "(a rerun resumes)", float, "SECONDS")
    threads: int | None = _field(None, "--threads", "torch CPU threads (default: 1 for toy pairs, else torch's)",
                                 int, "N")
    scheduler: str | None = _field(None, "--scheduler", "measure cells on the workers of this dask scheduler "
                                   "(each cell is timed on its worker)", metavar="ADDRESS")
    endpoint: str | None = _field(None, "--endpoint", "bench a served engine over HTTP: the engine with speculation "
                                  "on (with --reference-endpoint)", metavar="URL")
    reference_endpoint: str | None = _field(None, "--reference-endpoint", "the same engine with speculation off "
                                            "(with --endpoint)", metavar="URL")
    concurrency: tuple[int, ...] | None = _field(None, "--concurrency", "with --endpoint: requests in flight "
                                                 "(default 1,2,4)", parse_int_list, "LIST")
    interleave: bool = _field(False, "--interleave", "time the autoregressive baseline inside every γ cell, in "
                              "rotation with it (speedup, r and c from the same minutes of machine load: for a "
                              "shared machine; one more generation per cell)", action="store_true")
    prompt_select: tuple[str, ...] | None = _field(None, "--prompt-select", "in-process: only these kinds or ids of "
                                                   "the pair's default prompts (suites/prompts/prompts.jsonl, e.g. "
                                                   "rewrite,code-rename), or catalogue:CATEGORY / catalogue:ID of "
                                                   "suites/prompts/bench.jsonl (e.g. catalogue:rag; pairs with a "
                                                   "tokenizer)", parse_names, "NAME[,NAME]")
    categories: tuple[str, ...] | None = _field(None, "--categories", "prompt categories of the catalogue "
                                                "(suites/prompts/bench.jsonl): with --endpoint the ones sent (default "
                                                "all); in-process one group per category, for pairs with a "
                                                "tokenizer", parse_names, "NAME[,NAME]")
    workers: int | None = _field(None, "--workers", "measure cells on a local dask cluster of N worker processes "
                                 "(they share this machine's cores: for counts and resilience, not timing)", int, "N")

    def __post_init__(self):
        if self.out is None:
            from harness.policy import results_folder

            self.out = results_folder("bench")

    def validate(self) -> BenchConfig:
        """Raise HarnessError naming the bad field; return self."""
        for name, values in (("--gamma", self.gammas), ("--temperature", self.temperatures)):
            if values is not None and not values:
                raise HarnessError(f"{name} needs at least one value")
        if self.gammas is not None and any(g < 1 for g in self.gammas):
            raise HarnessError(f"--gamma values must be integers >= 1 (tokens drafted per step), got {list(self.gammas)}")
        if self.temperatures is not None and any(not (t >= 0 and math.isfinite(t)) for t in self.temperatures):
            raise HarnessError(f"--temperature values must be finite and >= 0 (0 = greedy), got {list(self.temperatures)}")
        if self.top_k is not None and self.top_k < 1:
            raise HarnessError(f"--top-k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise HarnessError(f"--top-p must be in (0, 1], got {self.top_p}")
        for name, value in (("--repeats", self.repeats), ("--prompts", self.prompts),
                            ("--max-new-tokens", self.max_new_tokens), ("--threads", self.threads),
                            ("--workers", self.workers)):
            if value is not None and value < 1:
                raise HarnessError(f"{name} must be >= 1, got {value}")
        if self.synthetic_cost_ms is not None and min(self.synthetic_cost_ms) < 0:
            raise HarnessError(f"--synthetic-cost must be >= 0 ms, got {self.synthetic_cost_ms}")
        if (self.endpoint is None) != (self.reference_endpoint is None):
            raise HarnessError("--endpoint and --reference-endpoint go together: the engine with speculation on and "
                               "the same engine with it off")
        if self.endpoint is not None and self.prompt_select:
            raise HarnessError("--prompt-select chooses in-process prompts; with --endpoint use --categories")
        if self.endpoint is None and self.concurrency:
            raise HarnessError("--concurrency goes with --endpoint (a served engine)")
        if self.categories and self.prompt_select:
            raise HarnessError("--categories and --prompt-select both choose prompts: give one (in-process, "
                               "--categories C is --prompt-select catalogue:C, one group per category)")
        if self.concurrency is not None and (not self.concurrency or min(self.concurrency) < 1):
            raise HarnessError(f"--concurrency values must be >= 1, got {list(self.concurrency)}")
        if (self.target is None) != (self.draft is None):
            raise HarnessError("--target and --draft go together: give both checkpoints")
        if self.target is not None and self.pairs:
            raise HarnessError("give either --pair or --target/--draft, not both")
        return self


def config_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(BenchConfig))


def command_line(config: BenchConfig) -> str:
    """The `specdec bench` command that reproduces `config` (flags that differ from the defaults)."""
    words = ["specdec", "bench"]
    for field in config_fields():
        value = getattr(config, field.name)
        if value == field.default:
            continue
        flag = field.metadata["flag"]
        if field.metadata["action"]:
            words.append(flag)
        else:
            text = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) \
                if isinstance(value, tuple) else str(value)
            words += [flag, text]
    return shlex.join(words)
