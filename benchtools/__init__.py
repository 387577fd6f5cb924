"""What only the benchmark and learning scripts use: MFU, interleaved rounds, sweeps."""


def failure(proc) -> str:
    """Why a finished ``subprocess.run(..., stderr=PIPE, text=True)`` failed, in one line: the
    last non-empty line of its stderr (where main.py prints its one-line error), else its exit
    code."""
    lines = [ln for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit code {proc.returncode}"
