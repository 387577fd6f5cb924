#!/usr/bin/env bash
# The first thing to run on a new GPU allocation: every GPU path of the recipes, once, with the
# figures that tell whether it is right (about 45 GPU minutes on one 8-GPU node). Run it on the
# node (or inside `salloc --nodes=2`, where LAUNCHER=srun spreads the multi-GPU stages).
#   bash scripts/gpu_smoke.sh [--dry-run]
# Stages, each recorded pass/fail with its figures (skipped with its reason where a tool or a
# second GPU is missing), then one table, Markdown and JSON (benchtools/smoke.py):
#   ranks          python -m common.ranks on all GPUs: each rank's rank, local rank,
#                  CUDA_VISIBLE_DEVICES, the GPU it computes on and DALI's device_id
#   parity         each model: the same steps from the same checkpoint on the same batches on
#                  the GPU (FP32 with TF32 off, and AMP float16) and on the CPU (FP32); losses
#                  and weights compared within stated tolerances (benchtools/parity.py)
#   nchw           ResNet-50 --data_format NCHW (a GPU-only layout): the parity stage's check
#   dali-compare   each model's DALI pipeline on the GPU (nvJPEG) against the same pipeline on
#                  the CPU: labels, boxes and tokens identical, images within decoder rounding
#                  (benchtools/dali_compare.py)
#   dali           each model with --dali (Transformer-XL: DALI's numpy reader) under AMP for STEPS
#                  steps at the recipe's batch, on 1 GPU, then on all GPUs; its peak GPU memory
#   dali-cpu       each model with --dali --dali_cpu (decoding on the CPU) on 1 GPU
#   fp16-allreduce each model on all GPUs with --fp16_allreduce (gradients sent in float16)
#   static-loss-scale  each model under AMP with --static_loss_scale 128 on 1 GPU
#   resume-fp16    each model under AMP: STEPS/2 steps, then resumed from that checkpoint to STEPS
#                  (the float16 loss scale restored with the optimizer)
#   export         each model's SavedModel and ONNX file exported on the GPU from the dali stage's
#                  checkpoint (--mode evaluate --export_dir --export_onnx --export_triton; with
#                  INT8=1, the default, --export_onnx_int8 too: Model Optimizer's environment)
#   tensorrt       each image model's TensorRT engines, FP16 and INT8, built from this run's
#                  export by the repository's build_engines.sh (trtexec) and installed in it
#   tensorrt-compare  each image model's engines against ONNX Runtime on a batch of validation
#                  images prepared by the repository's own preprocessing (polygraphy run;
#                  SSD320 on its graph before NMS, which ONNX Runtime can run)
#   triton-perf    perf_analyzer against each image model's served ensemble (encoded JPEG in),
#                  where tritonserver and perf_analyzer are on PATH (serving/triton_perf.sh)
#   nccl           NCCL's allreduce bus bandwidth over all GPUs: nccl-tests' all_reduce_perf
#                  where it is installed (ALL_REDUCE_PERF or on PATH), else Horovod's own
#                  allreduce timed (benchtools/allreduce.py)
#   profile        each model --amp --profile on 1 GPU: the share of matmul/conv kernel time on
#                  tensor cores
#   ssd-eval       one SSD320 evaluation of the validation split, timed (COCO AP computed)
#   xla            each model --xla for STEPS steps on 1 GPU
#   memory         each model in FP32 (--no_tf32) and in TF32 for STEPS steps on 1 GPU at the AMP
#                  recipe's batch per GPU: its throughput and peak GPU memory (a batch that does
#                  not fit fails the stage, with TensorFlow's out-of-memory line)
#   infer          each model --mode inference_benchmark under AMP on 1 GPU: throughput, latency
#   tftrt          each model's inference benchmark through TF-TRT (FP16), where this TensorFlow
#                  has TensorRT (NGC's containers up to 25.02); recorded as skipped elsewhere
# The TensorRT and Triton stages are skipped with the reason where their tool is missing
# (TENSORRT, POLYGRAPHY, TRITON: 1 or 0 decides without looking on PATH).
# The multi-GPU stages (dali on all GPUs, fp16-allreduce, nccl) are skipped with the reason on a
# machine with one GPU; a dry run with GPUS=8 lists their commands.
# Data: DATA_ROOT with prepare_dataset.py outputs in imagenet/, coco/ and wt103/ when given;
# else small generated sets (digits, shapes, Shakespeare's plays) are prepared in
# SMOKE_DIR/data: enough to run every pipeline, not to measure a real dataset's input speed.
# Environment: GPUS (default: the GPUs nvidia-smi lists), LAUNCHER (srun inside a Slurm
# allocation, else mpirun), PYTHON, SMOKE_DIR (default results/gpu_smoke), DATA_ROOT, STEPS (20),
# ALL_REDUCE_PERF (nccl-tests' binary).
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
  if [ "$DRY" = 1 ]; then  # the command lines the stage would run, joined by &&
    printf '%s: %s\n' "$name" "$(DRY_RUN=1 "$@" | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/ \&\& /g')"
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

# tool CMD...: a command of a stage that is not main.py (printed in a dry run).
tool() {
  if [ -n "${DRY_RUN:-}" ]; then printf '%q ' "$@" | sed 's/ $//'; echo; return 0; fi
  "$@"
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
prep imagenet "$DATA/imagenet/labels.txt" "$PY" "$root/resnet50v1.5/rn50/digits.py" "$DATA/digits" --records "$DATA/imagenet" --train_shards 8
prep coco "$DATA/coco/label_map.json" "$PY" "$root/ssd320/ssd/shapes.py" "$DATA/shapes" --records "$DATA/coco" --train_shards 8 --val_shards 2
prep wt103 "$DATA/wt103/vocab.txt" bash -c "'$PY' '$root/transformerxl/scripts/plays_corpus.py' '$DATA/plays' && '$PY' '$root/transformerxl/prepare_dataset.py' '$DATA/plays' '$DATA/wt103'"

# Each model at its recipe's batch per GPU (AMP), a short run: flags after the recipe's.
classes="--num_classes 10"  # the generated digits; a real ImageNet keeps the default 1000
if [ -n "${DATA_ROOT:-}" ]; then classes=""; fi
declare -A ARGS=(
  [resnet50v1.5]="--data_dir $DATA/imagenet --dali --batch_size 256 $classes"
  [ssd320]="--data_dir $DATA/coco --dali --batch_size 32"
  [transformerxl]="--data_dir $DATA/wt103 --dali --batch_size 32"
)
read -ra MODELS <<< "$(cd "$root" && "$PY" -m common.models)"  # common/models.py
short=(--iter_unit batch --num_iter "$STEPS" --display_every 5)

# TF-TRT's stage runs where TensorFlow has TensorRT (TFTRT=1 or 0 decides without asking it).
if [ -z "${TFTRT:-}" ]; then
  TFTRT=$(cd "$root" && "$PY" -c 'from common.runtime import quiet_start
with quiet_start.filtered_stderr():
    from common.core import tftrt
    print(int(tftrt.available()))' 2>/dev/null || echo 0)
fi

# The TensorRT and Triton tools, where this machine has them (1 or 0 decides without looking).
has() { command -v "$1" >/dev/null && echo 1 || echo 0; }
TENSORRT=${TENSORRT:-$(has trtexec)}
POLYGRAPHY=${POLYGRAPHY:-$(has polygraphy)}
TRITON=${TRITON:-$( [ "$(has tritonserver)$(has perf_analyzer)" = 11 ] && echo 1 || echo 0)}
INT8=${INT8:-1}
declare -A TRITON_NAME=([resnet50v1.5]=resnet50 [ssd320]=ssd320)

# tensorrt_compare MODEL: this run's engines (FP16; INT8) against ONNX Runtime on validation
# images the repository's preprocessing prepared.
tensorrt_compare() {
  local model=$1 run="$SMOKE_DIR/export-$1/run" dir="$SMOKE_DIR/tensorrt-compare-$1"
  local onnx=model.onnx loader="$root/benchtools/tensorrt_inputs.py:load_data"
  [ "$model" != ssd320 ] || onnx=model_before_nms.onnx  # EfficientNMS runs in TensorRT only
  tool "$PY" -m benchtools.tensorrt_inputs --data_dir "$DATA/${DATA_OF[$model]}" \
    --triton_dir "$run/triton" --out "$dir/inputs.npz" --request_dir "$dir/request"
  tool env "TENSORRT_INPUTS=$dir/inputs.npz" polygraphy run "$run/export/$onnx" --trt --fp16 \
    --onnxrt --data-loader-script "$loader" --check-error-stat median --atol 0.05 --rtol 0.05
  if [ "$INT8" = 1 ]; then
    tool env "TENSORRT_INPUTS=$dir/inputs.npz" polygraphy run "$run/export/${onnx%.onnx}_int8.onnx" \
      --trt --int8 --fp16 --onnxrt --data-loader-script "$loader" --check-error-stat median \
      --atol 0.3 --rtol 0.3
  fi
}

# --- stages ------------------------------------------------------------------------------------
multi_gpu() { [ "$GPUS" -gt 1 ] || [ "$LAUNCHER" = srun ]; }
one_gpu_why="one GPU here (GPUS=$GPUS): needs 2 or more"
# The parity stage's runs: a batch the CPU reference trains in seconds a step, tf.data input
# (the same records and augmentation on either device; DALI has its own comparison), and no
# learning-rate warm-up, so that the steps compared move the weights by their gradients.
declare -A PARITY_ARGS=(
  [resnet50v1.5]="--data_dir $DATA/imagenet --batch_size 16 --lr_warmup_epochs 0 $classes"
  [ssd320]="--data_dir $DATA/coco --batch_size 8 --lr_warmup_steps 0"
  [transformerxl]="--data_dir $DATA/wt103 --batch_size 4 --lr_warmup_steps 0"
)
declare -A DATA_OF=([resnet50v1.5]=imagenet [ssd320]=coco [transformerxl]=wt103)

# resume_fp16 MODEL: STEPS/2 steps under AMP, then the same run resumed to STEPS.
resume_fp16() {
  local model=$1 dir="$SMOKE_DIR/resume-fp16-$1/run"
  # shellcheck disable=SC2086
  launch "$model" 1 amp ${ARGS[$model]} --mode train --iter_unit batch \
    --num_iter $(( (STEPS + 1) / 2 )) --display_every 1 --results_dir "$dir"
  # shellcheck disable=SC2086
  launch "$model" 1 amp ${ARGS[$model]} --mode train --iter_unit batch --num_iter "$STEPS" \
    --display_every 1 --results_dir "$dir"
}

# nccl_stage: nccl-tests' all_reduce_perf over all GPUs where it is installed, else Horovod's.
ALL_REDUCE_PERF=${ALL_REDUCE_PERF:-$(command -v all_reduce_perf || true)}
nccl_stage() {
  if [ -n "$ALL_REDUCE_PERF" ]; then
    tool "$ALL_REDUCE_PERF" -b 8M -e 256M -f 2 -g "$GPUS"
  else
    bash "$root/scripts/launch.sh" "$root/benchtools/allreduce.py" fp32 "$GPUS" noxla \
      --json "$SMOKE_DIR/nccl/figures.json"
  fi
}

run ranks bash "$root/scripts/launch.sh" "$root/common/ranks.py" fp32 "$GPUS" noxla
if [ "$DRY" = 1 ]; then  # the one stage that needs no GPU: what this machine's ranks see
  (cd "$root" && "$PY" -m common.ranks)
fi
if multi_gpu; then run nccl nccl_stage; else skip nccl "$one_gpu_why"; fi
for model in "${MODELS[@]}"; do
  # shellcheck disable=SC2086
  run "parity-$model" tool "$PY" -m benchtools.parity "$model" \
    --out "$SMOKE_DIR/parity-$model/run" --json "$SMOKE_DIR/parity-$model/figures.json" \
    -- ${PARITY_ARGS[$model]}
  if [ "$model" = resnet50v1.5 ]; then
    # shellcheck disable=SC2086
    run "nchw-$model" tool "$PY" -m benchtools.parity "$model" --run_flags="--data_format NCHW" \
      --out "$SMOKE_DIR/nchw-$model/run" --json "$SMOKE_DIR/nchw-$model/figures.json" \
      -- ${PARITY_ARGS[$model]}
  fi
  run "dali-compare-$model" tool "$PY" -m benchtools.dali_compare "$model" \
    --data_dir "$DATA/${DATA_OF[$model]}" --json "$SMOKE_DIR/dali-compare-$model/figures.json"
  # shellcheck disable=SC2086
  run "dali-1gpu-$model" launch "$model" 1 amp ${ARGS[$model]} --mode train "${short[@]}" \
    --results_dir "$SMOKE_DIR/dali-1gpu-$model/run"
  if multi_gpu; then
    # shellcheck disable=SC2086
    run "dali-${GPUS}gpu-$model" launch "$model" "$GPUS" amp ${ARGS[$model]} --mode train \
      "${short[@]}" --results_dir "$SMOKE_DIR/dali-${GPUS}gpu-$model/run"
    # shellcheck disable=SC2086
    run "fp16-allreduce-$model" launch "$model" "$GPUS" amp ${ARGS[$model]} --mode train \
      "${short[@]}" --fp16_allreduce --results_dir "$SMOKE_DIR/fp16-allreduce-$model/run"
  else
    skip "dali-multigpu-$model" "$one_gpu_why"
    skip "fp16-allreduce-$model" "$one_gpu_why"
  fi
  if [ "$model" != transformerxl ]; then  # Transformer-XL's DALI reads tokens: no decoding
    # shellcheck disable=SC2086
    run "dali-cpu-$model" launch "$model" 1 amp ${ARGS[$model]} --dali_cpu --mode train \
      "${short[@]}" --results_dir "$SMOKE_DIR/dali-cpu-$model/run"
  fi
  # shellcheck disable=SC2086
  run "static-loss-scale-$model" launch "$model" 1 amp ${ARGS[$model]} --static_loss_scale 128 \
    --mode train "${short[@]}" --results_dir "$SMOKE_DIR/static-loss-scale-$model/run"
  run "resume-fp16-$model" resume_fp16 "$model"
  # shellcheck disable=SC2086
  int8=()
  if [ "$INT8" = 1 ] && [ "$model" != transformerxl ]; then
    int8=(--export_onnx_int8 --calibration_images 64)
  fi
  # shellcheck disable=SC2086
  run "export-$model" launch "$model" 1 amp ${ARGS[$model]} --mode evaluate \
    --model_dir "$SMOKE_DIR/dali-1gpu-$model/run/checkpoints" \
    --export_dir "$SMOKE_DIR/export-$model/run/export" --export_onnx "${int8[@]}" \
    --export_triton "$SMOKE_DIR/export-$model/run/triton" \
    --results_dir "$SMOKE_DIR/export-$model/run"
  if [ "$model" != transformerxl ]; then
    if [ "$TENSORRT" = 1 ]; then
      run "tensorrt-$model" tool bash "$SMOKE_DIR/export-$model/run/triton.tensorrt/build_engines.sh"
    else
      skip "tensorrt-$model" "trtexec is not on PATH (NVIDIA's TensorRT container has it)"
    fi
    if [ "$TENSORRT" = 1 ] && [ "$POLYGRAPHY" = 1 ]; then
      run "tensorrt-compare-$model" tensorrt_compare "$model"
    else
      skip "tensorrt-compare-$model" "needs trtexec's TensorRT and polygraphy on PATH"
    fi
    if [ "$TRITON" = 1 ]; then
      run "triton-perf-$model" tool bash "$root/serving/triton_perf.sh" \
        "$SMOKE_DIR/export-$model/run/triton/triton" "${TRITON_NAME[$model]}" \
        "$SMOKE_DIR/tensorrt-compare-$model/request" "$SMOKE_DIR/triton-perf-$model"
    else
      skip "triton-perf-$model" "tritonserver and perf_analyzer are not on PATH (Triton's containers)"
    fi
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
