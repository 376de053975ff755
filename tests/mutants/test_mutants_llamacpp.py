"""harness.mutants.llamacpp: the llama-cpp-python decoder's planted bug lives in the zoo's package, and every
planted bug does (the mechanism outside harness/mutants plants none). Its verdict on SmolLM2 (FAIL next to the
shipped decoder's PASS) is tests/adapters/test_adapter_llamacpp.py's slow test."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import torch

from harness.adapters import llamacpp
from harness.errors import MissingOptionalPackage
from harness.mutants.llamacpp import no_verify_generate

ROOT = Path(__file__).resolve().parents[2]


def test_without_llama_cpp_the_planted_bug_is_a_missing_package_not_a_traceback(monkeypatch, tmp_path):
    """The bug's own import of llama-cpp-python waits until the model is loaded: exit 2 with the install hint."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    monkeypatch.setenv(llamacpp.MODEL_ENV, str(model))
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_speculative", None)
    llamacpp._llama.cache_clear()
    try:
        with pytest.raises(MissingOptionalPackage, match="llama-cpp-python"):
            no_verify_generate(None, None, torch.tensor([[1, 2, 3]]), max_new_tokens=4, gamma=2, temperature=1.0,
                               top_k=None, top_p=None, seed=0)
    finally:
        llamacpp._llama.cache_clear()


def _planted_outside_mutants() -> list[str]:
    """Functions and classes of harness/ outside harness/mutants whose docstring says they are a planted bug."""
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if "mutants" in path.relative_to(ROOT / "harness").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                doc = (ast.get_docstring(node) or "").lower()
                if doc.startswith(("planted bug", "a planted bug", "mutant:", "a mutant")):
                    found.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno} {node.name}")
    return found


@pytest.mark.lint
def test_every_planted_bug_lives_in_harness_mutants():
    assert _planted_outside_mutants() == []


@pytest.mark.lint
def test_the_scan_finds_a_planted_bug_outside_the_mutants(tmp_path, monkeypatch):
    """The scan is not vacuous: a planted bug written into the mechanism is found."""
    fake = tmp_path / "harness" / "adapters"
    fake.mkdir(parents=True)
    (fake / "x.py").write_text('def broken():\n    """Planted bug: drafts kept unverified."""\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _planted_outside_mutants() == ["harness/adapters/x.py:1 broken"]
