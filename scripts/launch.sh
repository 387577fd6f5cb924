#!/usr/bin/env bash
# Runs a model's main.py on GPUS GPUs of one machine with a precision preset: the part of every
# model's train.sh that is the same. mpirun by default, LAUNCHER=horovodrun for horovodrun.
#   bash scripts/launch.sh MAIN_PY PRECISION GPUS [xla|noxla] [main.py flags]
#   PRECISION: amp (float16 + dynamic loss scaling on a GPU), tf32, or fp32 (TF32 off)
set -euo pipefail
MAIN=${1:?usage: launch.sh MAIN_PY amp|tf32|fp32 GPUS [xla|noxla] [flags]}
PRECISION=${2:?usage: launch.sh MAIN_PY amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${3:?usage: launch.sh MAIN_PY amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${4:-noxla}
shift $(( $# < 4 ? $# : 4 ))

case "$PRECISION" in
  amp) flags=(--amp) ;;
  tf32) flags=(--tf32) ;;
  fp32) flags=(--no_tf32) ;;
  *) echo "launch.sh: error: precision must be amp, tf32 or fp32, not $PRECISION" >&2; exit 2 ;;
esac
case "$XLA" in
  xla) flags+=(--xla) ;;
  noxla) ;;
  *) echo "launch.sh: error: the xla argument must be xla or noxla, not $XLA" >&2; exit 2 ;;
esac
launch=()
if [ "$GPUS" -gt 1 ]; then
  if [ "${LAUNCHER:-mpirun}" = horovodrun ]; then
    launch=(horovodrun -np "$GPUS" -H "localhost:$GPUS")
  else
    launch=(mpirun --allow-run-as-root --bind-to socket -np "$GPUS")
  fi
fi
exec "${launch[@]}" python "$MAIN" "${flags[@]}" "$@"
