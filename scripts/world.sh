# Sourced by launch.sh and the models' train.sh: how many processes a launch starts.
#   world_size GPUS  ->  the slots of HOSTS=a:8,b:8 when set; GPUS x the allocation's nodes
#                        under LAUNCHER=srun (SLURM_JOB_NUM_NODES, or NODES); else GPUS
world_size() {
  local gpus=$1 n=0 h hs
  if [ -n "${HOSTS:-}" ]; then
    IFS=, read -ra hs <<< "$HOSTS"
    for h in "${hs[@]}"; do
      if ! [[ "$h" =~ ^[^:]+:[1-9][0-9]*$ ]]; then
        echo "${0##*/}: error: HOSTS entries are host:slots, not '$h'" >&2
        return 2
      fi
      n=$(( n + ${h##*:} ))
    done
    echo "$n"
  elif [ "${LAUNCHER:-mpirun}" = srun ]; then
    echo $(( gpus * ${SLURM_JOB_NUM_NODES:-${NODES:-1}} ))
  else
    echo "$gpus"
  fi
}
