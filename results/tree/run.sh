#!/bin/bash
# Heavy measurements of the tree branch, run under flock /work/heavy.lock.
cd /work/wt/tree
export OMP_NUM_THREADS=1
date -u +"start %FT%TZ"
/work/venv/bin/python -m pytest benchmarks/test_tree_check_bench.py -q -p no:cacheprovider \
  --benchmark-json=/tmp/treecamp_log/bench.json 2>&1 | tail -15
BUDGET=$(( $(date -d "10:22" +%s) - $(date +%s) ))
echo "campaign budget ${BUDGET}s"
/work/venv/bin/python -c "
import torch, time; torch.set_num_threads(1)
from harness.mutants.tree import run_tree_campaign, write_tree_campaign
t = time.perf_counter()
r = run_tree_campaign(mutant_seeds=20, control_seeds=200, control_rows=10000, time_budget_s=max(60, $BUDGET))
r['wall_seconds'] = time.perf_counter() - t
write_tree_campaign(r, 'results/tree')
print('campaign done', r['wall_seconds'])
"
date -u +"end %FT%TZ"
