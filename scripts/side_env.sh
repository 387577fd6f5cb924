# Sourced, not run: side_env, which makes (once) a Python environment apart from TensorFlow's for
# packages that clash with it (PyTorch, Model Optimizer, PyTriton), kept in the cache between
# runs: scripts/modelopt_env.sh, scripts/triton_env.sh, tests/torch_env.sh.
#   side_env PY NAME ABOUT CHECK WHERE PACKAGE...
# PY makes it; NAME-pyX.Y under $TF_MODEL_SCRIPTS_CACHE/venvs (default
# ~/.cache/tf-model-scripts) is its folder; ABOUT says what it holds when it is made; CHECK is the
# Python line that must run in it; PACKAGEs are pip-installed into it. Prints its python as the
# last line: at once when CHECK already runs there; with WHERE=1 also when it does not (and
# returns 1) instead of making it. Lines go through the caller's log(). Jobs making the same
# environment at once take turns (flock on NAME-pyX.Y.lock beside it).
# Once CHECK has run there, a marker in the environment (.side-env-HASH of CHECK and PACKAGEs)
# answers the next calls without running it again: CHECK imports PyTorch or TensorFlow (seconds
# each), and `make test` asks every time. The marker holds a fingerprint of the environment's
# files (each file's path, size and time, bytecode caches aside: about half a second to read
# for PyTorch's), and answers only while they are as they were when CHECK passed: a package
# removed, replaced or cut since then has CHECK run again (and the environment completed where
# it fails). An install into the environment removes its markers.
side_env() {
  local py=$1 name=$2 about=$3 check=$4 where=$5
  shift 5
  local cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
  local tag venv marker
  tag=$("$py" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
  venv="$cache/venvs/$name-$tag"
  marker="$venv/.side-env-$(printf '%s\n' "$check" "$@" | sha256sum | cut -c1-16)"
  if [ -x "$venv/bin/python" ] && [ -f "$marker" ] &&
     [ "$(cat "$marker")" = "$(_side_env_files "$venv")" ]; then
    echo "$venv/bin/python"
    return 0
  fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    _side_env_files "$venv" >"$marker"
    echo "$venv/bin/python"
    return 0
  fi
  if [ "$where" = 1 ]; then
    echo "$venv/bin/python"
    return 1
  fi
  # One maker at a time: a second job asking for the same environment waits for the first,
  # then finds it made (two pip runs into one environment at once break it).
  mkdir -p "$cache/venvs"
  local lock status=0
  exec {lock}>"$venv.lock"
  if ! flock -n "$lock"; then
    log "waiting for another job making $venv"
    flock "$lock"
  fi
  _side_env_make "$venv" "$py" "$about" "$check" "$@" || status=$?
  if [ "$status" = 0 ]; then _side_env_files "$venv" >"$marker"; fi
  exec {lock}>&-
  return "$status"
}

# A fingerprint of what is installed in VENV: every file's (and link's) path, size and
# modification time under bin/ and lib/, Python's bytecode caches aside (imports write them).
_side_env_files() {
  find "$1/bin" "$1/lib" -xdev \( -type f -o -type l \) -not -path '*/__pycache__/*' \
    -printf '%P %s %T@\n' 2>/dev/null | LC_ALL=C sort | sha256sum | cut -c1-32
}

# side_env's work once it holds the environment's lock: VENV PY ABOUT CHECK PACKAGE...
_side_env_make() {
  local venv=$1 py=$2 about=$3 check=$4
  shift 4
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    echo "$venv/bin/python"  # made by the job that held the lock before
    return 0
  fi
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    # Made by an earlier version of the caller: what it lacks is installed into it.
    log "completing $venv: $about"
    rm -f "$venv"/.side-env-*
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

# The first Python X.Y that runs and has venv: pythonX.Y on PATH, else pyenv's newest X.Y.*
# (a pyenv shim on PATH may name a Python that is not selected). Prints it; nothing and
# status 1 where there is none.
#   find_python 3.12
find_python() {
  local series=$1 candidate
  for candidate in $(command -v "python$series" || true) \
      $( (command -v pyenv >/dev/null && ls -d "$(pyenv root)"/versions/"$series".*/bin/python"$series" \
          | sort -rV) 2>/dev/null || true); do
    if "$candidate" -c 'import venv' >/dev/null 2>&1; then echo "$candidate"; return 0; fi
  done
  return 1
}
