#!/usr/bin/env bash
# The installed distribution on its own (issue 56, item 6): build the wheel from a copy of the sources, install it (not
# editable, with its dependencies) into a clean venv, and from a folder outside the repository run `specdec pairs`, a
# sampler-level check and the pytest plugin. Any step failing exits non-zero. Run by hand: `bash tools/ci_wheel.sh`
# (SPECDEC_WHEEL_KEEP=1 keeps the work folder). Called by .ci/run.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
work="$(mktemp -d /tmp/specdec-wheel.XXXXXX)"
[[ "${SPECDEC_WHEEL_KEEP:-}" == 1 ]] || trap 'rm -rf "$work"' EXIT
start=$SECONDS
step() { echo "ci_wheel [$((SECONDS - start)) s]: $*"; }

# 1. the wheel, built from a copy of exactly what the build reads, so a stale build/ folder or an untracked file in
#    the checkout cannot leak into it
step "build the wheel"
mkdir -p "$work/src" "$work/dist"
cp "$repo/pyproject.toml" "$repo/README.md" "$work/src/"
(cd "$repo" && tar --exclude=__pycache__ -cf - specdec specdec_ref harness suites) | tar -xf - -C "$work/src"
"$py" -m venv "$work/venv"
vpy="$work/venv/bin/python"
"$vpy" -m pip install -q --no-compile "setuptools>=68" wheel
"$vpy" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/specdec-*.whl)"
"$vpy" - "$wheel" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
top = {n.split("/")[0] for n in names if ".dist-info/" not in n}
tests = [n for n in names if n.rsplit("/", 1)[-1].startswith("test_") or n.endswith("conftest.py")]
assert top == {"specdec", "specdec_ref", "harness", "suites"}, f"top-level names {sorted(top)} (docs/DESIGN.md)"
assert not tests, f"test files in the wheel: {tests}"
print(f"ci_wheel: {len(names)} members, top-level {sorted(top)}, no test files")
EOF

# 2. install: torch's CPU build first (the pin of noxfile.py), then the wheel with its dependencies; not editable
step "install torch==2.13.0 and $(basename "$wheel") (with pytest) into a clean venv"
"$vpy" -m pip install -q --no-compile "torch==2.13.0"
"$vpy" -m pip install -q --no-compile "$wheel" "pytest>=8"
"$vpy" -m pip check

# 3. from outside the repository: nothing may come from the checkout
cd "$work"
mkdir -p user && cd user
where="$("$vpy" -c 'import harness, suites, specdec, specdec_ref; print(" ".join(m.__file__ for m in (harness, suites, specdec, specdec_ref)))')"
case "$where" in *"$repo"*) echo "ci_wheel: the packages were imported from the checkout: $where" >&2; exit 1 ;; esac
bin="$work/venv/bin"

step "specdec pairs"
"$bin/specdec" pairs

step "specdec verify (sampler level, reference adapter, anti-logits, 2000 samples)"
"$bin/specdec" verify --impl specdec_ref.adapters:verify --samples 2000 --cases anti-logits

step "the policy a bare harness entry gets: the object the wheel declares in the entry-point group specdec.policy"
"$vpy" -c 'from harness import policy
assert policy.installed() is None, "installed before any entry ran"
from harness.cli import campaign_names
assert "zoo" in campaign_names(), campaign_names()
from specdec import _policy
assert policy.installed() is _policy.POLICY, policy.installed()'

step "the prompt catalogues the real-model pairs and the HTTP bench read (package data)"
"$vpy" -c 'from harness.prompts import load_catalogue, load_prompts
assert load_prompts() and load_catalogue(), "empty prompt catalogue"'

step "the pytest plugin (assert_lossless fixture, --specdec-samples 2000)"
cat > test_user_wheel.py <<'EOF'
import pytest
from specdec_ref.adapters import verify


@pytest.mark.specdec
def test_reference_is_lossless(assert_lossless):
    assert assert_lossless(verify, cases=["anti-logits"]).verdict == "pass"
EOF
"$bin/python" -m pytest -q -p no:cacheprovider --strict-markers --specdec-seed 1 --specdec-samples 2000 test_user_wheel.py

step "passed"
