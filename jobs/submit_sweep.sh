#!/usr/bin/env bash
# Submit a distsim sweep to an existing Ray cluster through Ray's Jobs API (see jobs/README.md).
#
#   jobs/submit_sweep.sh DASHBOARD_ADDRESS SWEEP_DIR OVERRIDES...
#   jobs/submit_sweep.sh http://head:8265 /shared/sweeps/exp1 policy=round_robin,random 'seed=range(20)'
#
# The repository is shipped as the job's working directory (jobs/runtime_env.yaml); the driver joins the
# cluster it runs on (runner.address=auto) and writes the sweep to SWEEP_DIR, which should be an absolute
# path on storage every node can see (the job's working directory is temporary).
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,9p' "$0"
    exit 2
fi
cd "$(dirname "$0")/.."
address=$1
sweep_dir=$2
shift 2
exec ray job submit --address "$address" --runtime-env jobs/runtime_env.yaml --working-dir . -- \
    python -m distsim -m "$@" runner.address=auto runner.progress=false "hydra.sweep.dir=$sweep_dir"
