# Sourced, not run: side_env, which makes (once) a Python environment apart from TensorFlow's for
# packages that clash with it (PyTorch, Model Optimizer, PyTriton), kept in the cache between
# runs: scripts/modelopt_env.sh, scripts/triton_env.sh, tests/torch_env.sh.
#   side_env PY NAME ABOUT CHECK WHERE PACKAGE...
# PY makes it; NAME-pyX.Y under $TF_MODEL_SCRIPTS_CACHE/venvs (default
# ~/.cache/tf-model-scripts) is its folder; ABOUT says what it holds when it is made; CHECK is the
# Python line that must run in it; PACKAGEs are pip-installed into it. Prints its python as the
# last line: at once when CHECK already runs there; with WHERE=1 also when it does not (and
# returns 1) instead of making it. Lines go through the caller's log().
side_env() {
  local py=$1 name=$2 about=$3 check=$4 where=$5
  shift 5
  local cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
  local tag venv
  tag=$("$py" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
  venv="$cache/venvs/$name-$tag"
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "$venv/bin/python"
    return 0
  fi
  if [ "$where" = 1 ]; then
    echo "$venv/bin/python"
    return 1
  fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    # Made by an earlier version of the caller: what it lacks is installed into it.
    log "completing $venv: $about"
    if "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$@" >&2 &&
       "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
      log "ready: $venv"
      echo "$venv/bin/python"
      return 0
    fi
  fi
  log "making $venv: $about"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$@" >&2
  "$venv/bin/python" -c "$check" || { log "'$check' fails in $venv"; return 1; }
  log "ready: $venv"
  echo "$venv/bin/python"
}
