#!/usr/bin/env bash
# perf_analyzer against a model of an --export_triton repository, served by a tritonserver
# started here for the measurement (Triton's container, or its binaries on PATH):
#   bash scripts/triton_perf.sh REPOSITORY MODEL INPUT_DIR OUT_DIR
# Loads MODEL alone (an ensemble brings its steps), waits until it is ready, measures batch 8 at
# concurrency 1 to 4 over gRPC with INPUT_DIR's request (a file named after each input: for the
# image ensembles, "images" holding one JPEG's bytes), writes OUT_DIR/perf.csv and the server's
# log, and stops the server. gpu_smoke.sh's triton-perf stage.
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: triton_perf.sh REPOSITORY MODEL INPUT_DIR OUT_DIR" >&2; exit 2; }
repo=$1 model=$2 inputs=$3 out=$4
mkdir -p "$out"
tritonserver --model-repository="$repo" --model-control-mode=explicit --load-model="$model" \
  >"$out/tritonserver.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  if curl -sf "localhost:8000/v2/models/$model/ready" >/dev/null; then break; fi
  kill -0 "$server" 2>/dev/null || { echo "triton_perf.sh: tritonserver stopped: see $out/tritonserver.log" >&2; exit 1; }
  sleep 1
done
curl -sf "localhost:8000/v2/models/$model/ready" >/dev/null ||
  { echo "triton_perf.sh: $model was not ready in 300 s: see $out/tritonserver.log" >&2; exit 1; }
perf_analyzer -m "$model" -u localhost:8001 -i grpc -b 8 --concurrency-range 1:4 \
  --input-data "$inputs" -f "$out/perf.csv"
