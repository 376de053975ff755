"""The sampling-parameters campaign: the parameter mutants (exact TV + detection over seeds) and the reference under
every parameter at once (false alarms over seeds), through suites.campaigns.zoo on the toy pairs.

    specdec campaign params --out results/params [--seeds 20 --control-seeds 200]

Writes OUT/campaign.{csv,json}, OUT/report.md (suites.campaigns.zoo.write_report) and OUT/exact_tv.json.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from harness.check.exact_laws import continuation_law, total_variation
from harness.configs import Parser, add_arguments, option
from harness.envelope import write_result
from harness.models.toy_pairs import toy_models, toy_prompts
from harness.mutants import get
from harness.mutants.generation import exact_output_law
from harness.records import provenance
from specdec_ref.generate import default_eos, eos_set
from suites.campaigns.zoo import CampaignConfig, run_campaign, write_report
from suites.outputs import FOLDERS

MUTANTS = ("min_p_first_position_only", "logit_bias_draft_only", "penalties_from_prefix_before_block",
           "penalty_draft_only", "min_new_tokens_bonus_only", "bad_words_bonus_only", "top_p_before_temperature")
CONTROL = "reference_all_parameters"
KINDS = {"toy": "0.7", "toy-eos": "eos"}  # registered pair -> its float64 toy models


def exact_tvs(length: int = 3, gamma: int = 3) -> dict:
    """Per mutant and prompt: TV between its exact output law and the target's (float64 enumeration)."""
    out = {}
    for name in MUTANTS + (CONTROL,):
        impl = get(name)
        target, draft = toy_models(KINDS[impl.pair], torch.float64)
        eos = eos_set(default_eos(target))
        (setting,) = impl.fn.settings
        hooks = getattr(impl.fn, "hooks", None)
        from specdec_ref.generate import REFERENCE_HOOKS

        out[name] = {"pair": impl.pair, "setting": setting.label, "tv_per_prompt": [
            total_variation(exact_output_law(target, draft, p, length, gamma, setting, hooks or REFERENCE_HOOKS, eos),
                            continuation_law(target, p, length, setting, target.config.vocab_size, eos))
            for p in toy_prompts()[:2]]}
    return out


@dataclasses.dataclass
class Config:
    """`specdec campaign params`: its flags (harness.configs.option)."""

    out: str = option(FOLDERS["campaign.params"], "--out", "results folder (default: suites/outputs.py)", metavar="DIR")
    seeds: int = option(20, '--seeds', 'seeds', int)
    control_seeds: int = option(200, '--control-seeds', 'control seeds', int)
    samples: int = option(2000, '--samples', "per prompt × setting", int)


def argument_parser() -> argparse.ArgumentParser:
    """`specdec campaign params`: every flag from a config field (Config, the runner's)."""
    ap = Parser(description=__doc__.splitlines()[0], prog='specdec campaign params')
    add_arguments(ap, Config)
    return ap


def main(argv=None) -> int:
    ap = argument_parser()
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    tvs = exact_tvs()
    write_result(f"{args.out}/exact_tv.json", "campaign.params.exact_tv", config=args,
                 provenance=provenance(seed=None, dtype="float64"), report=tvs, summary={"entries": len(tvs)})
    config = CampaignConfig(seeds=args.seeds, generation_control_seeds=args.control_seeds,
                            generation_samples=args.samples, only=MUTANTS + (CONTROL,), curve_seeds=0)
    summary = write_report(run_campaign(config), args.out)
    for name, row in tvs.items():
        print(f"{name:36s} {row['pair']:8s} exact TV {', '.join(f'{t:.4f}' for t in row['tv_per_prompt'])}")
    print("ok" if summary["ok"] else "PROBLEMS: " + "; ".join(summary["problems"]))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
