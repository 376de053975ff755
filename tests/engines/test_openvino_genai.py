"""The OpenVINO GenAI adapter without OpenVINO: registration, the installed() probe, and the worker's JSON-lines
channel (bounded, closed) run by this Python, where `import openvino_genai` fails and must come back as one reply."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.engines import openvino_genai as ov
from harness.errors import HarnessError


def test_registered_with_its_capabilities():
    from harness.engines.registry import get

    cls = get("openvino-genai")
    assert cls is ov.OpenVinoGenAI and cls.runnable and cls.kind == "in-process"
    assert set(cls.capabilities.methods) == {"draft", "ngram"} and cls.capabilities.n


def test_installed_says_why_not(monkeypatch, tmp_path):
    monkeypatch.delenv(ov.PYTHON_ENV, raising=False)
    assert not ov.OpenVinoGenAI.installed().installed
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("")
    monkeypatch.setenv(ov.PYTHON_ENV, str(fake))
    probe = ov.OpenVinoGenAI.installed()
    assert not probe.installed and "no openvino-genai" in probe.reason
    info = tmp_path / "lib" / "python3.11" / "site-packages" / "openvino_genai-2026.4.1.0.dist-info"
    info.mkdir(parents=True)
    probe = ov.OpenVinoGenAI.installed()
    assert probe.installed and probe.version == "2026.4.1.0"


def test_worker_channel_replies_errors_and_quits(tmp_path):
    worker = ov.Worker(Path(sys.executable), tmp_path / "w.log")
    try:
        with pytest.raises(HarnessError, match="unknown op"):
            worker.call({"op": "nonsense"}, 60)
        with pytest.raises(HarnessError, match="no pipeline loaded"):
            worker.call({"op": "generate", "prompt": [1], "max_new_tokens": 1}, 60)
    finally:
        assert worker.close() == "quit"
    assert worker.proc.returncode == 0


def test_flag_reads_command_line_values():
    assert ov._flag(True) and ov._flag("on") and ov._flag("True") and not ov._flag("off") and not ov._flag(False)
