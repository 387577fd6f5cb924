#!/usr/bin/env bash
# What the test suite needs beyond scripts/install_deps.sh: a real Slurm (Debian's slurm-wlm,
# with its PMIx plugin, and munge for its authentication) that tests/slurm_cluster.py starts as
# a one-node cluster around the suite. Idempotent: returns at once when both are there. Needs
# root or sudo only to install them. A machine without apt-get and without Slurm gets a note,
# and the Slurm tests are skipped there (they say so).
set -euo pipefail
log() { printf '[install_test_deps] %s\n' "$*"; }

missing=()
for cmd in slurmctld slurmd srun sbatch scancel; do
  command -v "$cmd" >/dev/null || { missing+=(slurm-wlm); break; }
done
{ command -v munged >/dev/null && command -v mungekey >/dev/null; } || missing+=(munge)
if [ ${#missing[@]} -eq 0 ]; then
  log "slurm present: $(slurmd -V)"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  log "no apt-get: install ${missing[*]} by hand to run the Slurm tests (skipped without them)"
  exit 0
fi
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
log "apt-get install ${missing[*]} (a real one-node Slurm for the tests)"
$sudo_cmd apt-get update -qq
# Debian's packages start their daemons when a service manager runs; tests/slurm_cluster.py
# starts its own, with its own configuration, so none is started here.
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
log "slurm installed: $(slurmd -V)"
