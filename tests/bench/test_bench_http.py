"""`specdec bench --endpoint`: speculation on vs off over HTTP (harness.bench.http), against `specdec serve`."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from harness.bench.http import acceptance, scrape, timed_request
from harness.cli import main
from harness.pairs import get_pair
from harness.served.serve import serving
from specdec_ref.adapters import generate


@pytest.mark.end_to_end
def test_tiny_bench_against_specdec_serve_writes_the_report_with_plots(tmp_path, capsys):
    with serving(generate, get_pair("toy")) as on, serving(generate, get_pair("toy"), speculative=False) as off:
        rc = main(["bench", "--endpoint", on.url + "/v1", "--reference-endpoint", off.url + "/v1", "--quick",
                   "--categories", "code,math,qa", "--out", str(tmp_path)])
    assert rc == 0
    run = tmp_path / "http"
    for name in ("report.md", "rows.json", "rows.csv", "requests.jsonl", "throughput_vs_concurrency.png",
                 "latency_vs_concurrency.png", "speedup_by_category.png"):
        assert (run / name).stat().st_size > 0, name
    rows = json.loads((run / "rows.json").read_text())["rows"]
    levels = [r for r in rows if r["kind"] == "concurrency"]
    assert sorted({(r["role"], r["concurrency"]) for r in levels}) == [("nospec", 1), ("nospec", 2), ("spec", 1),
                                                                        ("spec", 2)]
    spec = [r for r in levels if r["role"] == "spec"]
    nospec = [r for r in levels if r["role"] == "nospec"]
    assert all(r["speedup_throughput"] > 0 and r["requests"] == 3 for r in spec)
    # greedy: speculation must not change the output; the counters tell speculation from none
    assert all(r["identical_outputs"] == 1.0 for r in spec)
    assert all(r["tokens_per_target_call"] > 1.5 for r in spec)
    assert all(r["tokens_per_target_call"] <= 1.0 for r in nospec)
    assert {r["category"] for r in rows if r["kind"] == "category"} == {"code", "math", "qa"}
    report = (run / "report.md").read_text()
    assert "## By concurrency" in report and "tokens per target call" in report
    assert "**synthetic inputs (token ids, not text)**" in report  # the toy engine has no tokenizer
    assert "report.md" in capsys.readouterr().out


@pytest.mark.end_to_end
def test_endpoint_without_reference_is_exit_2():
    out = subprocess.run([sys.executable, "-m", "harness", "bench", "--endpoint", "http://127.0.0.1:9/v1"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "--reference-endpoint" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.end_to_end
def test_unknown_category_is_exit_2():
    out = subprocess.run([sys.executable, "-m", "harness", "bench", "--endpoint", "http://127.0.0.1:9/v1",
                          "--reference-endpoint", "http://127.0.0.1:9/v1", "--categories", "poetry"],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "poetry" in out.stderr and "Traceback" not in out.stderr


def _sse(chunks: list[str], usage: int) -> bytes:
    events = [{"choices": [{"text": c}]} for c in chunks] + [{"choices": [], "usage": {"completion_tokens": usage}}]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"


def test_streamed_replies_are_timed_chunk_by_chunk_and_usage_counts_tokens():
    def handler(request):
        body = json.loads(request.content)
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        return httpx.Response(200, content=_sse(["a", "bc", "d"], usage=5))

    with httpx.Client(base_url="http://engine", transport=httpx.MockTransport(handler)) as http:
        r = timed_request(http, "m", "hi", 5, 0.0, 0, True, None)
    assert r["streamed"] and r["tokens"] == 5 and r["chunks"] == 3 and len(r["gaps_s"]) == 2 and r["text"] == "abcd"


def test_a_server_refusing_streams_says_so():
    def handler(request):
        return httpx.Response(400, json={"error": {"message": "stream=true is not supported"}})

    with httpx.Client(base_url="http://engine", transport=httpx.MockTransport(handler)) as http:
        assert timed_request(http, "m", "hi", 5, 0.0, 0, True, None)["refused_stream"]


VLLM_METRICS = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {drafted}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
"""


@pytest.mark.parametrize("drafts", [0, 10])
@pytest.mark.parametrize("prefix", ["vllm:", "llamacpp:"])
def test_vllm_counters_give_acceptance_per_position_differenced(drafts, prefix):
    text = [VLLM_METRICS.replace("vllm:", prefix).format(drafts=d, drafted=2 * d, accepted=a, p0=p0, p1=p1)
            for d, a, p0, p1 in ((5, 4, 3, 1), (5 + drafts, 4 + 9, 3 + 6, 1 + 3))]
    replies = iter(text)

    def handler(request):
        return httpx.Response(200, text=next(replies))

    with httpx.Client(base_url="http://engine", transport=httpx.MockTransport(handler)) as http:
        before, after = scrape(http), scrape(http)
    acc = acceptance(before, after)
    if not drafts:
        assert acc == {}  # no drafts over the level: no acceptance claimed
    else:
        assert acc["source"] == {"vllm:": "vllm", "llamacpp:": "llama.cpp"}[prefix] and acc["acceptance_per_position"] == [0.6, 0.3]
        assert acc["mean_accepted_per_step"] == 0.9 and acc["draft_acceptance_rate"] == 9 / 20
