# The part every model's scripts/train.sh shares, sourced by it (not run on its own):
#   . "$(dirname "$0")/../../scripts/train_prelude.sh" DEFAULT_DATA_DIR "$@"
# reads PRECISION GPUS [xla|noxla] from the arguments (the rest are main.py flags), starts the
# main.py flags with --data_dir $DATA_DIR (DATA_DIR set but empty: synthetic data, for
# benchmarks), and gives the model's script `env_flag VAR FLAG...` (a variable the user set
# becomes FLAG... $VAR) and `launch` (main.py through scripts/launch.sh, which says how).
here=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]"
DATA_DIR=${DATA_DIR-$1}
shift
if [ $# -lt 2 ]; then echo "$usage" >&2; exit 2; fi
PRECISION=$1
GPUS=$2
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
flags=("$@")  # the user's main.py flags, last: they override the script's
extra=()
if [ -n "$DATA_DIR" ]; then extra+=(--data_dir "$DATA_DIR"); fi

env_flag() {  # env_flag VAR FLAG...: FLAG... "$VAR" when the user set VAR
  if [ -n "${!1:-}" ]; then extra+=("${@:2}" "${!1}"); fi
}

launch() {
  exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
    --results_dir "${RESULTS_DIR:-/results}" "${extra[@]}" "${flags[@]}"
}
