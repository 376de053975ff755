#!/bin/bash
# The tree measurements: the benchmark, then the tree campaign (mutants at the default plan over 20 seeds,
# controls over 200 seeds at 10,000 rows per case). Run from the repository root with specdec installed.
set -euo pipefail
export OMP_NUM_THREADS=1
python -m pytest benchmarks/test_tree_check_bench.py -q -p no:cacheprovider --benchmark-json=results/tree/bench.json
specdec campaign tree --mutant-seeds 20 --control-seeds 200 --control-rows 10000 --out results/tree
