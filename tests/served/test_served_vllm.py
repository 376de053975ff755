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
