"""harness.served.vllm_server: the command line it runs, and a server that dies at start-up is one clear error."""

from __future__ import annotations

import json
import sys

import pytest

from harness.errors import HarnessError
from harness.served.vllm_server import server_command, vllm_server


def test_the_command_keeps_chunked_prefill_off_float32_localhost_and_passes_the_speculative_config():
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    cmd = server_command("py", "/m", port=8123, served_name="s", speculative=spec)
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"]
    assert "--no-enable-chunked-prefill" in cmd and cmd[cmd.index("--dtype") + 1] == "float32"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert json.loads(cmd[cmd.index("--speculative-config") + 1]) == spec
    assert "--speculative-config" not in server_command("py", "/m", port=1, served_name="s", speculative=None)


def test_a_server_that_exits_during_start_up_is_a_harness_error_naming_its_log(tmp_path):
    # this Python has no vLLM (or no model at /nonexistent): the child exits at once
    with pytest.raises(HarnessError, match="exited during start-up"), \
            vllm_server(sys.executable, "/nonexistent", log=tmp_path / "server.log", startup_timeout_s=120):
        pass
    assert (tmp_path / "server.log").read_text()


def test_ngram_proposal_is_the_token_after_the_latest_longest_match():
    from suites.campaigns.vllm_cpu import ngram_proposal

    assert ngram_proposal([5, 6, 7, 1, 5, 6]) == 7  # suffix (5, 6) seen earlier, followed by 7
    assert ngram_proposal([5, 6, 7, 5, 6, 9, 6]) == 9  # suffix (6,): the latest earlier 6 is followed by 9
    assert ngram_proposal([1, 2, 3]) is None


def test_draft_echo_counts_emitted_tokens_equal_to_the_ngram_draft(tmp_path):
    """A server that always emits the n-gram draft scores 1.00 where a draft exists; one that never does, 0.00."""
    from suites.campaigns.vllm_cpu import draft_echo, ngram_proposal

    prompt = [3, 4, 3, 4, 3]
    echo = []
    for _ in range(3):
        echo.append(ngram_proposal(prompt + echo))
    never = [9, 8, 7]
    (tmp_path / "responses").mkdir()
    for name, ids in (("engine-echo", echo), ("engine-never", never)):
        record = {"key": f"engine/T=1/{json.dumps(prompt)}/0/0", "response": {"choices": [{"token_ids": ids}] * 25}}
        (tmp_path / "responses" / f"{name}.jsonl").write_text(json.dumps(record) + "\n")
    text = draft_echo(tmp_path)
    rows = {line.split("|")[1].strip(): line.split("|")[5].split() for line in text.splitlines()[2:]}
    assert rows["engine-echo"][:3] == ["1.00"] * 3
    assert rows["engine-never"][0] == "0.00" and "1.00" not in rows["engine-never"]
