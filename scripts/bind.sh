#!/usr/bin/env bash
# Runs a command on the CPUs and memory of the NUMA node its rank's GPU hangs off, as NVIDIA's
# bind.sh does: on a two-socket DGX, local ranks 0-3 on socket 0 and 4-7 on socket 1, each
# next to its GPU, instead of wherever the launcher put them.
#   bash scripts/bind.sh COMMAND [ARGS...]
# The rank's GPU is the one main.py pins (common/runtime/devices.py): local rank modulo the GPUs the
# process sees, counted through CUDA_VISIBLE_DEVICES when set. Its NUMA node comes from the
# GPU's PCI address (nvidia-smi) in sysfs. Without a GPU, nvidia-smi, numactl, or a NUMA node
# for the GPU, the command runs unbound (a note on stderr says why, except with no GPU at all).
# Environment: BIND=none runs unbound; DRY_RUN=1 prints the command instead of running it;
# BIND_SYSFS (default /sys) for tests.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: bind.sh COMMAND [ARGS...]" >&2; exit 2; }
note() { echo "bind.sh: $*; running unbound" >&2; }
run() {
  if [ -n "${DRY_RUN:-}" ]; then printf '%q ' "$@" | sed 's/ $//'; echo; exit 0; fi
  exec "$@"
}

local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-${HOROVOD_LOCAL_RANK:-${LOCAL_RANK:-0}}}}
[[ "$local_rank" =~ ^[0-9]+$ ]] || { note "local rank '$local_rank' is not a number"; run "$@"; }
[ "${BIND:-numa}" != none ] || run "$@"
command -v nvidia-smi >/dev/null || run "$@"  # no GPU driver: a CPU machine, nothing to follow

# The GPUs this process sees, as nvidia-smi names them (indices or UUIDs), in CUDA's order.
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true)
fi
[ ${#gpus[@]} -gt 0 ] && [ -n "${gpus[0]}" ] || { note "no GPU visible"; run "$@"; }
gpu=${gpus[$(( local_rank % ${#gpus[@]} ))]}
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "$gpu" 2>/dev/null | head -n1 \
      | tr -d ' ' | tr '[:upper:]' '[:lower:]')
[ -n "$bus" ] || { note "nvidia-smi gives no PCI address for GPU $gpu"; run "$@"; }
# nvidia-smi prints an 8-digit PCI domain (00000000:07:00.0); sysfs names it with 4.
sysfs_bus=${bus#????}
[ ${#bus} -gt 12 ] || sysfs_bus=$bus
node_file="${BIND_SYSFS:-/sys}/bus/pci/devices/$sysfs_bus/numa_node"
node=$(cat "$node_file" 2>/dev/null || echo -1)
[[ "$node" =~ ^[0-9]+$ ]] || { note "GPU $gpu ($bus) has no NUMA node in $node_file"; run "$@"; }
command -v numactl >/dev/null || { note "numactl is not installed"; run "$@"; }
run numactl --cpunodebind="$node" --membind="$node" "$@"
