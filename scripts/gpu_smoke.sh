#!/usr/bin/env bash
# The first thing to run on a new GPU allocation: every GPU path of the recipes, once, with the
# figures that tell whether it is right (about 20 GPU minutes on one 8-GPU node). Run it on the
# node (or inside `salloc --nodes=2`, where LAUNCHER=srun spreads the multi-GPU stages).
#   bash scripts/gpu_smoke.sh [--dry-run]
# Stages, each recorded pass/fail with its figures, then one table (benchtools/smoke.py):
#   ranks     python -m common.ranks on all GPUs: each rank's rank, local rank,
#             CUDA_VISIBLE_DEVICES, the GPU it computes on and DALI's device_id
#   dali      each model with --dali (Transformer-XL: DALI's numpy reader) under AMP for STEPS
#             steps at the recipe's batch, on 1 GPU, then on all GPUs; its peak GPU memory
#   profile   each model --amp --profile on 1 GPU: the share of matmul/conv kernel time on
#             tensor cores
#   ssd-eval  one SSD320 evaluation of the validation split, timed (COCO AP computed)
#   xla       each model --xla for STEPS steps on 1 GPU
#   memory    each model in FP32 (--no_tf32) and in TF32 for STEPS steps on 1 GPU at the AMP
#             recipe's batch per GPU: its throughput and peak GPU memory (a batch that does
#             not fit fails the stage, with TensorFlow's out-of-memory line)
#   infer     each model --mode inference_benchmark under AMP on 1 GPU: throughput, latency
#   tftrt     each model's inference benchmark through TF-TRT (FP16), where this TensorFlow
#             has TensorRT (NGC's containers up to 25.02); recorded as skipped elsewhere
# Data: DATA_ROOT with prepare_dataset.py outputs in imagenet/, coco/ and wt103/ when given;
# else small generated sets (digits, shapes, Shakespeare's plays) are prepared in
# SMOKE_DIR/data: enough to run every pipeline, not to measure a real dataset's input speed.
# Environment: GPUS (default: the GPUs nvidia-smi lists), LAUNCHER (srun inside a Slurm
# allocation, else mpirun), PYTHON, SMOKE_DIR (default results/gpu_smoke), DATA_ROOT, STEPS (20).
# --dry-run: prints every command instead of running it and writes nothing; only the rank
# report runs (it needs no GPU). The tests run this mode.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: gpu_smoke.sh [--dry-run]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
SMOKE_DIR=${SMOKE_DIR:-$root/results/gpu_smoke}
STEPS=${STEPS:-20}
[[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_smoke.sh: error: STEPS must be a positive number, not $STEPS" >&2; exit 2; }
if [ -z "${GPUS:-}" ]; then
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
[[ "$GPUS" =~ ^[0-9]+$ ]] || { echo "gpu_smoke.sh: error: GPUS must be a number, not $GPUS" >&2; exit 2; }
if [ "$GPUS" -eq 0 ] && [ "$DRY" = 0 ]; then
  echo "gpu_smoke.sh: error: no GPU (nvidia-smi lists none): this checks GPU paths; --dry-run shows them" >&2
  exit 2
fi
GPUS=$(( GPUS > 0 ? GPUS : 1 ))
if [ -z "${LAUNCHER:-}" ]; then
  if [ -n "${SLURM_JOB_ID:-}" ]; then LAUNCHER=srun; else LAUNCHER=mpirun; fi
fi
export LAUNCHER PYTHON=$PY
if [ "$DRY" = 0 ]; then mkdir -p "$SMOKE_DIR"; fi

# run NAME CMD...: a stage's command, its output in SMOKE_DIR/NAME/, its exit code recorded.
run() {
  local name=$1; shift
  local dir="$SMOKE_DIR/$name"
  if [ "$DRY" = 1 ]; then  # the command line the launcher would run
    printf '%s: ' "$name"; DRY_RUN=1 "$@"
    return 0
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  echo "[gpu_smoke] $name"
  local code=0
  "$@" >"$dir/stdout" 2>"$dir/stderr" || code=$?
  echo "$code" >"$dir/exit_code"
  if [ "$code" != 0 ]; then echo "[gpu_smoke] $name failed ($code): $(tail -n1 "$dir/stderr")"; fi
}

# skip NAME WHY: a stage that cannot run on this machine, recorded as skipped with the reason.
skip() {
  local name=$1 why=$2
  if [ "$DRY" = 1 ]; then echo "$name: skipped ($why)"; return 0; fi
  rm -rf "${SMOKE_DIR:?}/$name" && mkdir -p "$SMOKE_DIR/$name"
  echo "$why" >"$SMOKE_DIR/$name/skipped"
  echo "[gpu_smoke] $name skipped: $why"
}

# main.py on G GPUs through the project's launcher (one GPU: a plain process).
launch() {
  local model=$1 gpus=$2 precision=$3; shift 3
  bash "$root/scripts/launch.sh" "$root/$model/main.py" "$precision" "$gpus" noxla "$@"
}

# --- data --------------------------------------------------------------------------------------
DATA=${DATA_ROOT:-$SMOKE_DIR/data}
prep() {  # prep NAME CHECK_FILE CMD...: prepares a generated set unless it is there
  local name=$1 check=$2; shift 2
  if [ -n "${DATA_ROOT:-}" ] || [ -e "$check" ]; then return 0; fi
  if [ "$DRY" = 1 ]; then printf 'data-%s: ' "$name"; printf '%q ' "$@" | sed 's/ $//'; echo; return 0; fi
  echo "[gpu_smoke] preparing a generated $name set in $DATA"
  "$@" >/dev/null
}
prep imagenet "$DATA/imagenet/labels.txt" bash -c "'$PY' '$root/resnet50v1.5/rn50/digits.py' '$DATA/digits' && '$PY' '$root/resnet50v1.5/prepare_dataset.py' '$DATA/digits' '$DATA/imagenet' --train_shards 8 --val_shards 2"
prep coco "$DATA/coco/label_map.json" bash -c "'$PY' '$root/ssd320/ssd/shapes.py' '$DATA/shapes' && '$PY' '$root/ssd320/prepare_dataset.py' '$DATA/shapes' '$DATA/coco' --train_shards 8 --val_shards 2"
prep wt103 "$DATA/wt103/vocab.txt" bash -c "'$PY' '$root/transformerxl/scripts/plays_corpus.py' '$DATA/plays' && '$PY' '$root/transformerxl/prepare_dataset.py' '$DATA/plays' '$DATA/wt103'"

# Each model at its recipe's batch per GPU (AMP), a short run: flags after the recipe's.
classes="--num_classes 10"  # the generated digits; a real ImageNet keeps the default 1000
if [ -n "${DATA_ROOT:-}" ]; then classes=""; fi
declare -A ARGS=(
  [resnet50v1.5]="--data_dir $DATA/imagenet --dali --batch_size 256 $classes"
  [ssd320]="--data_dir $DATA/coco --dali --batch_size 32"
  [transformerxl]="--data_dir $DATA/wt103 --dali --batch_size 32"
)
read -ra MODELS <<< "$(cd "$root" && "$PY" -m common.presets --models)"  # common/presets.py
short=(--iter_unit batch --num_iter "$STEPS" --display_every 5)

# TF-TRT's stage runs where TensorFlow has TensorRT (TFTRT=1 or 0 decides without asking it).
if [ -z "${TFTRT:-}" ]; then
  TFTRT=$(cd "$root" && "$PY" -c 'from common import quiet_start
with quiet_start.filtered_stderr():
    from common.export import tftrt
    print(int(tftrt.available()))' 2>/dev/null || echo 0)
fi

# --- stages ------------------------------------------------------------------------------------
run ranks bash "$root/scripts/launch.sh" "$root/common/ranks.py" fp32 "$GPUS" noxla
if [ "$DRY" = 1 ]; then  # the one stage that needs no GPU: what this machine's ranks see
  (cd "$root" && "$PY" -m common.ranks)
fi
for model in "${MODELS[@]}"; do
  # shellcheck disable=SC2086  # ARGS holds flags split on spaces (paths without spaces)
  run "dali-1gpu-$model" launch "$model" 1 amp ${ARGS[$model]} --mode train "${short[@]}" \
    --results_dir "$SMOKE_DIR/dali-1gpu-$model/run"
  if [ "$GPUS" -gt 1 ] || [ "$LAUNCHER" = srun ]; then
    # shellcheck disable=SC2086
    run "dali-${GPUS}gpu-$model" launch "$model" "$GPUS" amp ${ARGS[$model]} --mode train \
      "${short[@]}" --results_dir "$SMOKE_DIR/dali-${GPUS}gpu-$model/run"
  fi
  # shellcheck disable=SC2086
  run "profile-$model" launch "$model" 1 amp ${ARGS[$model]} --mode training_benchmark \
    "${short[@]}" --warmup_steps 5 --profile 12:14 --results_dir "$SMOKE_DIR/profile-$model/run"
  # shellcheck disable=SC2086
  run "xla-$model" bash "$root/scripts/launch.sh" "$root/$model/main.py" amp 1 xla \
    ${ARGS[$model]} --mode training_benchmark "${short[@]}" --warmup_steps 5 \
    --results_dir "$SMOKE_DIR/xla-$model/run"
  for precision in fp32 tf32; do
    # shellcheck disable=SC2086
    run "memory-$precision-$model" launch "$model" 1 "$precision" ${ARGS[$model]} \
      --mode training_benchmark "${short[@]}" --warmup_steps 5 \
      --results_dir "$SMOKE_DIR/memory-$precision-$model/run"
  done
  # shellcheck disable=SC2086
  run "infer-$model" launch "$model" 1 amp ${ARGS[$model]} --mode inference_benchmark \
    "${short[@]}" --warmup_steps 5 --results_dir "$SMOKE_DIR/infer-$model/run"
  if [ "$TFTRT" = 1 ]; then
    # shellcheck disable=SC2086
    run "tftrt-$model" launch "$model" 1 amp ${ARGS[$model]} --mode inference_benchmark \
      "${short[@]}" --warmup_steps 5 --use_tftrt FP16 --results_dir "$SMOKE_DIR/tftrt-$model/run"
  else
    skip "tftrt-$model" "this TensorFlow has no TensorRT (TF-TRT: NGC's containers up to 25.02)"
  fi
done
# One SSD evaluation of the model trained by the dali-1gpu stage, timed (COCO AP computed).
# shellcheck disable=SC2086
run ssd-eval launch ssd320 1 amp ${ARGS[ssd320]} --mode evaluate \
  --model_dir "$SMOKE_DIR/dali-1gpu-ssd320/run/checkpoints" --results_dir "$SMOKE_DIR/ssd-eval/run"

if [ "$DRY" = 0 ]; then
  (cd "$root" && "$PY" -m benchtools.smoke "$SMOKE_DIR")
fi
