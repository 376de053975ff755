"""A pytest-benchmark JSON record (`pytest --benchmark-json FILE`) as a result envelope of kind "pytest_benchmark"
(docs/RESULTS-FORMAT.md): its benchmarks are the rows; its own commit_info / machine_info give the provenance
(a field it does not carry reads "not recorded"). `nox -s benchmarks` writes its record with it
through suites/bench/record.py (`python -m suites.bench.record RAW.json OUT.json`).
"""

from __future__ import annotations

from harness.envelope import NOT_RECORDED, Envelope


def envelope_of(data: dict, config: dict | None = None) -> Envelope:
    machine_info, commit = data.get("machine_info", {}), data.get("commit_info", {})
    cpu = machine_info.get("cpu", {})
    provenance = {
        "seed": NOT_RECORDED,
        "git_commit": commit.get("id", NOT_RECORDED) + ("+dirty" if commit.get("id") and commit.get("dirty") else ""),
        "machine": (f"{machine_info.get('node', 'unknown-host')} ({machine_info.get('machine', '?')}, "
                    f"{cpu.get('count', '?')} cores)") if machine_info else NOT_RECORDED,
        "versions": {"python": machine_info.get("python_version", NOT_RECORDED),
                     "pytest-benchmark": data.get("version", NOT_RECORDED)},
        "device": f"cpu ({cpu['brand_raw']})" if cpu.get("brand_raw") else NOT_RECORDED,
        "dtype": NOT_RECORDED, "utc_time": data.get("datetime", NOT_RECORDED)}
    summary = {"benchmarks": len(data.get("benchmarks", [])), "commit_info": commit, "machine_info": machine_info}
    return Envelope("pytest_benchmark", config if config is not None else {}, provenance, summary,
                    rows=data.get("benchmarks", []))

