"""The generic engine battery: every check an engine's capabilities allow, on any registered engine.

    specdec campaign engines --engine NAME [--pair toy-low] [--methods draft ngram] [--samples 1000]
    specdec campaign engines                  # no engine: regenerate results/engines/README.md (the matrix) only

For each speculation method the engine offers (harness.engines: `specdec engines`) and each check that applies
(harness.engines.battery.not_applicable): greedy equality, the law at T = 1 and at T = 0.7 / top-p 0.9 against the
local target and against the same engine with speculation off, and on a server the API battery and logprobs
honesty. Each cell is one engine-level check (`run_engine_check`, its power stated: detectable TV at power 0.99)
and records verdict, detectable TV, samples, seconds and the engine's version. An in-process engine is served by
specdec's OpenAI app around it.

Cells run in this process (WHERE = "local") against the engines the run holds, which the runner hands each cell as
its context (CONTEXT = True: harness.engines.battery.EngineHost); journaled in OUT/journal.jsonl, keyed by engine,
pair, method, check, ground truth, samples and seed, so that one journal (results/engines/) holds every engine's
cells and a rerun resumes. Writes OUT/NAME.md and OUT/NAME.json per engine, and regenerates OUT/README.md, the
matrix of every registered engine × method × check from these cells and the committed findings
(suites/catalogues/engine_findings.py).
"""

from __future__ import annotations

import contextlib
import dataclasses

from harness.configs import option
from harness.defaults import DEFAULT_FALSE_ALARM_RATE
from harness.engines.battery import CHECKS, TRUTHS
from harness.reporting import header, rerun, table

WHERE = "local"
CONTEXT = True
TV_BAR = 0.05  # default --tv-bar: as every engine campaign's (suites/campaigns/_servers.py ENGINE_TV_BAR)


@dataclasses.dataclass
class Config:
    """`specdec campaign engines`: the engine, its pair, which methods / checks / ground truths, and sizes."""

    engine: str | None = option(None, "--engine", "a registered engine (`specdec engines`); none: regenerate the "
                                "matrix results/engines/README.md only", metavar="NAME")
    pair: str = option("toy-low", "--pair", "the registered pair the engine runs and the local ground truth is",
                       metavar="NAME")
    methods: list[str] = option([], "--methods", "speculation methods (default: every method the engine offers)",
                                metavar="M", nargs="+")
    checks: list[str] = option(list(CHECKS), "--checks", "the checks to run", choices=CHECKS, nargs="+")
    truths: list[str] = option(list(TRUTHS), "--truths", "ground truths: local (the pair's target), off (the same "
                               "engine with speculation off)", choices=TRUTHS, nargs="+")
    samples: int = option(1000, "--samples", "continuations per prompt and sampling setting", int, "N")
    seed: int = option(0, "--seed", "seed of every request", int, "S")
    tv_bar: float = option(TV_BAR, "--tv-bar", "a passing cell whose detectable TV (power 0.99) is above this is "
                           "INCONCLUSIVE, never PASS", float, "TV")
    gamma: int = option(3, "--gamma", "drafted tokens per step", int, "G")
    engine_options: list[str] = option([], "--engine-option", "KEY=VALUE for the adapter's Setup.options "
                                             "(repeatable), e.g. impl=MODULE:CALLABLE for specdec-serve",
                                             metavar="KEY=VALUE", action="append")


def _options(config: Config) -> dict:
    return dict(text.split("=", 1) for text in config.engine_options or ())


def validate(config: Config) -> None:
    from harness.engines.registry import get, probe
    from harness.errors import HarnessError

    for name, values, allowed in (("--checks", config.checks, CHECKS), ("--truths", config.truths, TRUTHS)):
        bad = sorted(set(values) - set(allowed))
        if bad or not values:
            raise HarnessError(f"{name} takes {', '.join(allowed)}, got {', '.join(values) or 'nothing'}")
    if any("=" not in text for text in config.engine_options or ()):
        raise HarnessError("--engine-option takes KEY=VALUE")
    if config.samples < 1 or not 0 < config.tv_bar < 1:
        raise HarnessError("--samples must be >= 1 and --tv-bar in (0, 1)")
    if config.engine is None:
        return
    cls = get(config.engine)
    if not cls.runnable:
        raise HarnessError(f"engine {config.engine} cannot be run: {cls.not_runnable_why}")
    p = probe(cls)
    if not p.installed:
        raise HarnessError(f"engine {config.engine} is not installed here: {p.reason}")
    bad = sorted(set(config.methods) - set(cls.capabilities.methods))
    if bad:
        raise HarnessError(f"engine {config.engine} offers {', '.join(cls.capabilities.methods)}; not {', '.join(bad)}")


def _key(config: Config, method: str, check: str, truth: str) -> str:
    options = "".join(f"/{o}" for o in sorted(config.engine_options or ()))  # a planted fault is another engine
    return f"{config.engine}{options}/{config.pair}/{method}/{check}/{truth}/{config.samples}/{config.seed}/{config.tv_bar:g}"


def plan(config: Config) -> list[tuple[str, str, str, str | None]]:
    """(method, check, truth, why not) for every cell of this engine, runnable or not, in run order."""
    from harness.engines.battery import not_applicable
    from harness.engines.registry import get

    cls = get(config.engine)
    methods = config.methods or cls.capabilities.methods
    return [(m, c, t, not_applicable(cls, m, c, t)) for m in methods for t in TRUTHS if t in config.truths
            for c in CHECKS if c in config.checks]


def cells(config: Config) -> dict[str, tuple]:
    if config.engine is None:
        return {}
    return {_key(config, m, c, t): (m, c, t, config.samples, config.seed, config.tv_bar)
            for m, c, t, why in plan(config) if why is None}


@contextlib.contextmanager
def session(config: Config, out):
    """The runner context: the engines this run holds (none without --engine), all stopped at the end."""
    if config.engine is None:
        yield None
        return
    import torch

    from harness.engines.battery import EngineHost
    from harness.engines.registry import get

    torch.set_num_threads(1)
    host = EngineHost(get(config.engine), config.pair, config.gamma, out, _options(config))
    try:
        yield host
    finally:
        host.close()


def run_cell(host, method: str, check: str, truth: str, samples: int, seed: int, tv_bar: float) -> dict:
    from harness.engines.battery import check_cell

    return check_cell(host, method, check, truth, samples=samples, seed=seed,
                      false_alarm_rate=DEFAULT_FALSE_ALARM_RATE, inconclusive_tv=tv_bar)


def provenance_fields(config: Config) -> dict:
    return {"seed": config.seed}


def _tv(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def identity(key: str) -> str:
    """A cell's key without its size (samples, seed, TV bar): the same engine, options, pair, method, check, truth."""
    return key.rsplit("/", 3)[0]


def latest(journal: dict) -> dict[str, tuple[str, dict]]:
    """identity -> (key, record) of the last journaled measurement of each cell (the journal keeps every size)."""
    return {identity(k): (k, r) for k, r in journal.items()}


def engine_rows(run) -> list[dict]:
    """Every cell of this engine (every check and ground truth of its methods): this run's measurement, else the
    journal's last of the same cell at another size, else "not run: why"."""
    from harness.engines.battery import not_run_record
    from harness.engines.registry import get

    c = run.config
    cls = get(c.engine)
    last = latest(run.journal)
    full = dataclasses.replace(c, checks=list(CHECKS), truths=list(TRUTHS))
    rows = []
    for m, check, t, why in plan(full):
        key = _key(c, m, check, t)
        record = run.journal.get(key) or last.get(identity(key), (None, None))[1]
        if record is None:
            record = not_run_record(cls, m, check, t, why or "not run yet (`--checks` / `--truths` left it out, "
                                    "or cut short: the same command resumes)")
        rows.append({**record, "pair": c.pair})
    return rows


def md_rows(rows: list[dict]) -> list[list[str]]:
    """NAME.md's table: per cell its method, check, truth, verdict (or why not run), detectable TV, samples, seconds
    and first rejecting test."""
    return [[r["method"], r["check"], r["truth"], r["verdict"].upper() if r["verdict"] != "not run" else
             f"not run: {r.get('why')}", _tv(r.get("detectable_tv")), str(r.get("samples") or "–"),
             f"{r['seconds']:.0f}" if "seconds" in r else "–", r.get("first_reject") or "–"] for r in rows]


def engine_md(run, rows: list[dict]) -> str:
    from harness.engines.registry import get, probe

    c = run.config
    cls = get(c.engine)
    p = probe(cls)
    return "\n".join([
        f"# The generic engine battery on {c.engine} ({p.version or 'version unknown'})", "", header(run), "",
        f"{rerun(run)}; pair `{c.pair}`, {c.samples} continuations per prompt and setting, γ = "
        f"{c.gamma}; every cell one engine-level check (`run_engine_check`) at family-wise false-alarm rate "
        f"{DEFAULT_FALSE_ALARM_RATE:g}; a pass whose detectable TV (power 0.99) is above {c.tv_bar:g} is INCONCLUSIVE. "
        "Ground truth local: the pair's target here; off: the same engine with speculation off (two-sample).", "",
        table(["method", "check", "truth", "verdict", "detectable TV", "samples", "s", "first rejecting test"],
              md_rows(rows)), "",
        f"Capabilities: {cls.capabilities.notes or '–'}", ""]) + "\n"


def report(run) -> int:
    """OUT/NAME.json and OUT/NAME.md for the engine run, then OUT/README.md (the matrix). Exit 1 if a cell FAILs,
    3 if none fails and one is inconclusive, else 0; regenerating the matrix alone: 0."""
    from suites.engines_matrix import write_matrix

    code = 0
    if run.config.engine is not None:
        rows = engine_rows(run)
        name = run.config.engine
        run.write_result(f"{name}.json", "campaign.engines", rows=rows)
        run.write_text(f"{name}.md", engine_md(run, rows))
        verdicts = {r["verdict"] for r in rows}
        code = 1 if "fail" in verdicts else 3 if "inconclusive" in verdicts else 0
        for r in rows:
            print(f"{r['method']:<8} {r['check']:<16} {r['truth']:<6} {r['verdict']:<13} tv {_tv(r.get('detectable_tv'))}")
    path = write_matrix(run.out, run.journal)
    print(f"engines campaign -> {run.out} (matrix: {path})")
    return code
