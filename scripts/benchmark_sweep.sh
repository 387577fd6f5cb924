# The part ResNet-50's and SSD320's scripts/benchmark.sh share, sourced by them after they set
# their defaults (training_batches, inference_batches, num_iter, warmup_steps):
#   bash scripts/benchmark.sh training|inference [PRECISIONS] [GPUS] [xla|noxla|both] [flags]
# One main.py process per configuration (python -m benchtools.sweep), one table with speed-ups
# against FP32 measured in the same sweep; synthetic data unless DATA_DIR is set (then DALI).
here=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: benchmark.sh training|inference [amp,tf32,fp32] [GPUS] [xla|noxla|both] [flags]"
KIND=${1:?$usage}
case "$KIND" in
  training) batches=${BATCH_SIZES:-$training_batches} ;;
  inference) batches=${BATCH_SIZES:-$inference_batches} ;;
  *) echo "benchmark.sh: error: training or inference, not $KIND" >&2; exit 2 ;;
esac
case "${4:-noxla}" in xla) xla=on ;; noxla) xla=off ;; both) xla=both ;;
  *) echo "benchmark.sh: error: xla, noxla or both, not $4" >&2; exit 2 ;; esac
data=()
if [ -n "${DATA_DIR:-}" ]; then data=(--data_dir "$DATA_DIR" --dali); fi
exec "${PYTHON:-python}" -m benchtools.sweep "$here/main.py" --mode "${KIND}_benchmark" \
  --batch_sizes "$batches" --precisions "${2:-amp,tf32,fp32}" --gpus "${3:-1}" --xla "$xla" \
  --rounds "${ROUNDS:-1}" --results_dir "${RESULTS_DIR:-/results}/${KIND}_benchmark" -- \
  --iter_unit batch --num_iter "${NUM_ITER:-$num_iter}" \
  --warmup_steps "${WARMUP_STEPS:-$warmup_steps}" "${data[@]}" "${@:5}"
