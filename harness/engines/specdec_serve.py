"""specdec's own server (`specdec serve`) as a served engine: a §1b generate() behind an OpenAI-compatible API,
started as a subprocess on 127.0.0.1. Method "draft": the reference (specdec_ref.adapters:generate), or any §1b
callable named by Setup.options["impl"] (a planted mutant, your own implementation); off: `--no-speculation`."""

from __future__ import annotations

import sys
from importlib import metadata

from harness.engines.base import Capabilities, Probe, register_engine
from harness.engines.process import ServerEngine


@register_engine("specdec-serve")
class SpecdecServe(ServerEngine):
    startup_timeout_s = 90.0
    capabilities = Capabilities(methods=("draft",), levels=("engine",), returns=("ids", "text", "logprobs", "scores"),
                                n=True, streams=True, notes="the project's own server; its logprobs are the "
                                "target's (raw, or processed with --logprobs-mode)")

    @classmethod
    def installed(cls) -> Probe:
        import importlib.util

        missing = [m for m in ("fastapi", "uvicorn", "httpx") if importlib.util.find_spec(m) is None]
        if missing:
            return Probe(False, f"needs {', '.join(missing)} (pip install 'specdec[serve]')")
        try:
            return Probe(True, "", metadata.version("specdec"))
        except metadata.PackageNotFoundError:
            return Probe(True, "running from a checkout", None)

    def command(self, port: int) -> list[str]:
        setup = self.setup
        impl = setup.options.get("impl", "specdec_ref.adapters:generate")
        cmd = [sys.executable, "-m", "harness", "serve", "--impl", impl, "--pair", setup.pair,
               "--port", str(port), "--gamma", str(setup.gamma)]
        return cmd + (["--no-speculation"] if setup.method is None else [])
