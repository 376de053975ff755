"""Report of `specdec bench --endpoint`: rows.json / rows.csv, PNG figures and report.md (atomic writes)."""

from __future__ import annotations

import math
from pathlib import Path

from harness.bench.plots import pyplot
from harness.bench.report import SYNTHETIC_LABEL, fmt, markdown_table, write_rows
from harness.records import atomic_write_text, git_commit, save_figure, utc_now

LABELS = {"spec": "speculation on", "nospec": "speculation off"}


def _at_concurrency(rows, role):
    return sorted((r for r in rows if r["kind"] == "concurrency" and r["role"] == role), key=lambda r: r["concurrency"])


def fig_throughput(rows):
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4))
    for role in ("spec", "nospec"):
        lv = _at_concurrency(rows, role)
        a.plot([r["concurrency"] for r in lv], [r["throughput_tokens_per_s"] for r in lv], "o-", label=LABELS[role])
    a.set(xlabel="concurrent requests", ylabel="completion tokens / s (all requests)", title="throughput")
    a.legend(fontsize=8)
    on = _at_concurrency(rows, "spec")
    xs = [r["concurrency"] for r in on]
    b.plot(xs, [r.get("speedup_throughput", math.nan) for r in on], "o-", label="throughput")
    b.plot(xs, [r.get("speedup_request_median", math.nan) for r in on], "s--", label="per request (median)")
    b.axhline(1.0, color="grey", lw=0.8)
    b.set(xlabel="concurrent requests", ylabel="spec on / spec off", title="speedup")
    b.legend(fontsize=8)
    for ax in (a, b):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    fig.tight_layout()
    return fig


def fig_latency(rows):
    plt = pyplot()
    streamed = any(r.get("streamed") for r in rows if r["kind"] == "concurrency")
    fig, axes = plt.subplots(1, 2 if streamed else 1, figsize=(9 if streamed else 4.8, 3.4), squeeze=False)
    for role in ("spec", "nospec"):
        lv = _at_concurrency(rows, role)
        xs = [r["concurrency"] for r in lv]
        axes[0][0].plot(xs, [r["tpot_ms_median"] for r in lv], "o-", label=LABELS[role])
        if streamed:
            axes[0][1].plot(xs, [r["itl_ms_median"] for r in lv], "o-", label=f"{LABELS[role]} median")
            axes[0][1].plot(xs, [r["itl_ms_p90"] for r in lv], "x:", label=f"{LABELS[role]} p90")
    axes[0][0].set(xlabel="concurrent requests", ylabel="ms", title="time per output token (median)")
    if streamed:
        axes[0][1].set(xlabel="concurrent requests", ylabel="ms", title="inter-token latency (stream chunks)")
    for ax in axes[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_categories(rows):
    cats = [r for r in rows if r["kind"] == "category" and r["role"] == "spec" and "speedup" in r]
    if not cats:
        return None
    plt = pyplot()
    names = list(dict.fromkeys(r["category"] for r in cats))
    levels = sorted({r["concurrency"] for r in cats})
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(names)), 3.4))
    width = 0.8 / len(levels)
    for k, c in enumerate(levels):
        vals = [next((r["speedup"] for r in cats if r["category"] == n and r["concurrency"] == c), math.nan)
                for n in names]
        ax.bar([i + k * width for i in range(len(names))], vals, width, label=f"concurrency {c}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(names))], names, rotation=20)
    ax.set(ylabel="speedup (median per request)", title="speedup by prompt category")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def fig_acceptance(rows):
    lv = [r for r in _at_concurrency(rows, "spec") if r.get("acceptance_per_position")]
    if not lv:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for r in lv:
        acc = r["acceptance_per_position"]
        ax.plot(range(len(acc)), acc, "o-", label=f"concurrency {r['concurrency']}")
    ax.set(xlabel="draft position", ylabel="accepted / drafts", title="acceptance per position (/metrics)",
           ylim=(0, 1))
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


FIGURES = {"throughput_vs_concurrency.png": fig_throughput, "latency_vs_concurrency.png": fig_latency,
           "speedup_by_category.png": fig_categories, "acceptance_per_position.png": fig_acceptance}


def write_http_report(out_dir: Path, rows: list[dict], config, models: dict,
                      clipped: list[str] | None = None, synthetic: bool = False) -> dict[str, Path]:
    """`synthetic`: the engine has no tokenizer (its replies are token ids written out), so the catalogue's text
    reached it as characters folded into its vocabulary: the report is labelled synthetic inputs."""
    import matplotlib.pyplot as plt

    files = write_rows(out_dir, rows, kind="bench.http", config=config,
                       summary={"models": models, "clipped": list(clipped or []), "synthetic_inputs": synthetic})
    for name, make in FIGURES.items():
        fig = make(rows)
        if fig is None:
            (out_dir / name).unlink(missing_ok=True)
            continue
        files[name] = save_figure(fig, out_dir / name)
        plt.close(fig)
    meta = {"utc_time": utc_now(), "git_commit": git_commit()}
    on, off = _at_concurrency(rows, "spec"), _at_concurrency(rows, "nospec")
    lines = ["# Served speculative decoding: speculation on vs off over HTTP", "",
             f"- engine (speculation on): `{config.endpoint}` model `{models['spec']}`",
             f"- reference (speculation off): `{config.reference_endpoint}` model `{models['nospec']}`",
             f"- catalogue: {len(config.prompts)} prompts in {len({p['category'] for p in config.prompts})} categories "
             f"({', '.join(dict.fromkeys(p['category'] for p in config.prompts))}), × {config.repeats} per level; "
             f"{config.max_tokens} new tokens max, temperature {config.temperature:g}, seeds from {config.seed}",
             f"- concurrency levels: {', '.join(map(str, config.concurrency))} (the two endpoints take turns per "
             "level, alternating which goes first)",
             f"- measured: UTC {meta['utc_time']}; harness commit `{meta['git_commit']}`; client load average "
             f"{_loadavg()}",
             "- raw: [requests.jsonl](requests.jsonl) (one line per request), [rows.csv](rows.csv), "
             "[rows.json](rows.json)"]
    if config.command:
        lines.append(f"- reproduce: `{config.command}`")
    if synthetic:
        lines.append(f"- **{SYNTHETIC_LABEL}**: the engine has no tokenizer (its replies are token ids written out, "
                     "as specdec serve gives for a toy pair); the catalogue's text reached it as characters folded "
                     "into its vocabulary, so these speedups are not those on text")
    if clipped:
        lines.append(f"- {len(clipped)} prompts longer than the served context keep their last tokens: "
                     f"{', '.join(clipped)}")
    lines += ["", "Throughput = completion tokens of all requests of a level / the level's wall time. Per request: "
              "tokens / latency (median over requests); time per output token = (latency − time to first token) / "
              "(tokens − 1) when streamed, latency / tokens otherwise; inter-token latency = gaps between streamed "
              "chunks (under speculation a chunk can carry several tokens). Speedup = on / off at the same level.",
              "", "## By concurrency", "",
              markdown_table(["concurrency", "tokens/s on", "tokens/s off", "speedup", "per-request speedup", "TPOT ms on",
                      "TPOT ms off", "ITL ms on (median / p90)", "ITL ms off (median / p90)", "streamed",
                      "identical outputs"],
                     [[str(a["concurrency"]), a["throughput_tokens_per_s"], b["throughput_tokens_per_s"],
                       a.get("speedup_throughput"), a.get("speedup_request_median"), a["tpot_ms_median"],
                       b["tpot_ms_median"], f"{fmt(a['itl_ms_median'], 1)} / {fmt(a['itl_ms_p90'], 1)}",
                       f"{fmt(b['itl_ms_median'], 1)} / {fmt(b['itl_ms_p90'], 1)}",
                       f"{'yes' if a['streamed'] else 'no'} / {'yes' if b['streamed'] else 'no'}",
                       fmt(a.get("identical_outputs"), 2)] for a, b in zip(on, off, strict=True)]),
              "", "![throughput](throughput_vs_concurrency.png)", "", "![latency](latency_vs_concurrency.png)", "",
              "## Latency (`vllm bench serve`'s definitions and names)", "",
              "TTFT = time to the first streamed token; TPOT = (E2EL − TTFT) / (tokens − 1); ITL = every gap between "
              "streamed chunks; E2EL = request latency. mean / median / p99 over the level's requests (ITL: over "
              "all gaps); '–' where the server did not stream (no TTFT, TPOT or ITL).", "",
              markdown_table(["concurrency", "speculation", "requests", "TTFT ms (mean / median / p99)", "TPOT ms", "ITL ms",
                      "E2EL ms"],
                     [[str(r["concurrency"]), LABELS[r["role"]].split()[-1], fmt(r.get("completed")),
                       *(_stat3(r, m) for m in ("ttft", "tpot", "itl", "e2el"))]
                      for a, b in zip(on, off, strict=True) for r in (a, b)]), ""]
    cats = [r for r in rows if r["kind"] == "category" and r["role"] == "spec" and "speedup" in r]
    if cats:
        names = list(dict.fromkeys(r["category"] for r in cats))
        levels = sorted({r["concurrency"] for r in cats})

        def cell(n, c):
            r = next((r for r in cats if r["category"] == n and r["concurrency"] == c), None)
            if r is None:
                return "–"
            if "speedup_paired_median" not in r:
                return fmt(r["speedup"])
            return (f"{r['speedup']:.3f} (paired {r['speedup_paired_median']:.3f}, IQR "
                    f"[{fmt(r.get('speedup_paired_q25'))}, {fmt(r.get('speedup_paired_q75'))}], range "
                    f"[{r['speedup_paired_min']:.3f}, {r['speedup_paired_max']:.3f}], n = {r['paired_requests']} "
                    f"requests of {r.get('prompts', '–')} prompts)")

        per_cat = {n: next(r for r in cats if r["category"] == n) for n in names}
        lines += ["## Speedup by category (median per-request tokens/s, on / off)"
                  + (f" [{SYNTHETIC_LABEL}]" if synthetic else ""), "",
                  "Each cell: the ratio of the medians; in brackets the per-request ratios (the same prompt and "
                  "repeat with speculation on / off): median, interquartile range and [min, max] over n requests, "
                  "and how many distinct prompts those requests are (column 'prompts'). A cell resting on a few "
                  "prompts is an anecdote, not a measurement of the category.", "",
                  markdown_table(["category", "prompts"] + [f"concurrency {c}" for c in levels],
                         [[n, str(per_cat[n].get("prompts", "–"))] + [cell(n, c) for c in levels] for n in names]),
                  "", "![categories](speedup_by_category.png)", ""]
    lines += ["## Speculation counters (/metrics, differenced over each level)", ""]
    reported = [r for r in on if r.get("source")]
    if not reported:
        lines.append("The engine exposes no speculation counters on /metrics: no acceptance is reported.")
    for r in reported:
        parts = [f"source {r['source']}"]
        if r.get("spec_decode_num_drafts") is not None:
            parts.append(f"acceptance rate {r['spec_decode_acceptance_rate']:.1f}% (accepted / draft tokens), "
                         f"acceptance length {r['spec_decode_acceptance_length']:.3f} (1 + accepted / drafts), "
                         f"drafts {r['spec_decode_num_drafts']}, draft tokens {r['spec_decode_draft_tokens']}, "
                         f"accepted tokens {r['spec_decode_accepted_tokens']}")
            parts.append("per position, conditional (accepted at i / accepted at i − 1) " + ", ".join(
                f"{a:.3f}" for a in r["per_position_acceptance_conditional"]))
        if r.get("acceptance_per_position"):
            parts.append("per position, unconditional (accepted at i / drafts) "
                         + ", ".join(f"{a:.3f}" for a in r["acceptance_per_position"]))
        for key in ("tokens_per_target_call",):
            if r.get(key) is not None:
                parts.append(f"{key.replace('_', ' ')} {fmt(r[key])}")
        lines.append(f"- concurrency {r['concurrency']}: " + "; ".join(parts))
    if "acceptance_per_position.png" in files:
        lines += ["", "![acceptance per position](acceptance_per_position.png)"]
    files["report.md"] = atomic_write_text(out_dir / "report.md", "\n".join(lines) + "\n")
    return files


def _stat3(row: dict, metric: str) -> str:
    if row.get(f"mean_{metric}_ms") is None:
        return "–"
    return " / ".join(fmt(row.get(f"{s}_{metric}_ms"), 1) for s in ("mean", "median", "p99"))


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
