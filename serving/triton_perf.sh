#!/usr/bin/env bash
# perf_analyzer against a model an --export_triton repository serves (gpu_smoke.sh's
# triton-perf stage), over gRPC with INPUT_DIR's request (a file named after each input: for the
# image ensembles, "images" holding one JPEG's bytes), batch 8 at concurrency 1 to 4; writes
# OUT_DIR/perf.csv. Either against a server already running, as deployments run it (the
# image docker/Dockerfile.triton builds, on the repository's triton/; perf_analyzer from
# Triton's SDK container):
#   bash serving/triton_perf.sh --url HOST:GRPC_PORT MODEL INPUT_DIR OUT_DIR
# or starting one here on REPOSITORY (tritonserver and perf_analyzer both on PATH), with
# Triton's default flags on ports of its own (three free ones, not 8000-8002, where another
# server may already answer), until measured:
#   bash serving/triton_perf.sh REPOSITORY MODEL INPUT_DIR OUT_DIR
# Without perf_analyzer (or on a CPU host): python -m serving.load.
set -euo pipefail
usage="usage: triton_perf.sh (REPOSITORY | --url HOST:GRPC_PORT) MODEL INPUT_DIR OUT_DIR"
url=""
if [ "${1:-}" = --url ]; then url=${2:-}; shift 2 || true; fi
want=4; [ -z "$url" ] || want=3
[ $# -eq "$want" ] || { echo "$usage" >&2; exit 2; }
command -v perf_analyzer >/dev/null ||
  { echo "triton_perf.sh: perf_analyzer is not on PATH: run this in Triton's SDK container (nvcr.io/nvidia/tritonserver:<yy.mm>-py3-sdk), or measure with python -m serving.load" >&2; exit 2; }
if [ -z "$url" ]; then
  repo=$1; shift
  command -v tritonserver >/dev/null ||
    { echo "triton_perf.sh: tritonserver is not on PATH: start the server elsewhere (docker/Dockerfile.triton's image on $repo) and give --url HOST:GRPC_PORT" >&2; exit 2; }
fi
model=$1 inputs=$2 out=$3
mkdir -p "$out"
if [ -z "$url" ]; then
  # Three ports free now (bound, read, released): the server binds them next, and a port
  # taken in between stops it, which the wait below reports.
  # serving.connection.free_ports, from the checkout this script is in (standard library only).
  ports=$(PYTHONPATH="$(cd "$(dirname "$0")/.." && pwd)" python3 -c \
    'from serving.connection import free_ports; print(*free_ports(3))') ||
    { echo "triton_perf.sh: python3 is needed to find free ports" >&2; exit 2; }
  read -r http grpc metrics <<<"$ports"
  tritonserver --model-repository="$repo" --http-port="$http" --grpc-port="$grpc" \
    --metrics-port="$metrics" >"$out/tritonserver.log" 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
  ready() { kill -0 "$server" 2>/dev/null && curl -sf "localhost:$http/v2/health/ready" >/dev/null; }
  for _ in $(seq 300); do
    if ready; then break; fi
    kill -0 "$server" 2>/dev/null || { echo "triton_perf.sh: tritonserver stopped (ports $http, $grpc, $metrics): see $out/tritonserver.log" >&2; exit 1; }
    sleep 1
  done
  ready || { echo "triton_perf.sh: the server was not ready in 300 s: see $out/tritonserver.log" >&2; exit 1; }
  url=localhost:$grpc
fi
perf_analyzer -m "$model" -u "$url" -i grpc -b 8 --concurrency-range 1:4 \
  --input-data "$inputs" -f "$out/perf.csv"
