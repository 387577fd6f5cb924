"""The software stack these scripts run on: one table, checked once at start-up.

Every fact about which version of a dependency the code can use lives here, and nowhere else
tests ``hasattr`` or ``__version__`` to work around an old release. ``main.py`` and
``prepare_dataset.py`` call :func:`require` before they import any model code, so a stack the
project cannot use ends with one line (package, version found, version needed, the fix) and
exit code 2, not with an ``AttributeError`` from inside a layer. ``scripts/install_deps.sh`` runs
this module to read the pins it installs and to check the stack it leaves behind::

    python -m common.versions              # check; prints the stack, or the first problem (exit 2)
    python -m common.versions --pin keras  # the version install_deps.sh installs: 3.15.1
    python -m common.versions --satisfied keras  # exit 0 when the installed Keras is usable
    python -m common.versions --probe      # install_deps.sh's checks in one process (probe())

Only the standard library is imported at module level: this must work when the stack is broken.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import re
import signal
import sys

from common.errors import say

FIX = "run 'bash scripts/install_deps.sh' (it changes nothing that TensorFlow was built against)"


@dataclasses.dataclass(frozen=True)
class Requirement:
    package: str
    minimum: str
    pin: str  # what install_deps.sh installs when the found version is unusable; tested in CI
    why: str  # what an older release lacks, for the one line


# Tested in CI on two stacks: NGC 25.02's (Python 3.12, TF 2.17.0, numpy 1.26.4, Keras brought up
# to the pin) and pip's (Python 3.11, TF 2.21.0, numpy 2). See README "Where it runs".
REQUIREMENTS = (
    Requirement("numpy", "1.26", "1.26.4", "the oldest numpy tested"),
    Requirement("tensorflow", "2.17", "2.21.0", "the oldest TensorFlow tested (NGC 25.02's)"),
    # NGC 25.02 ships Keras 3.3.2. It lacks BatchNormalization.renorm (3.14),
    # Optimizer.add_optimizer_variables and _overwrite_variable_with_gradient (3.10) and
    # Model.export(verbose=) (3.6); 3.15.1 passes the suite over TF 2.17 and 2.21 alike.
    Requirement("keras", "3.15", "3.15.1",
                "older releases, NGC 25.02's Keras 3.3.2 among them, lack Optimizer and "
                "BatchNormalization APIs these scripts use"),
)
PYTHON_MINIMUM = (3, 11)
# TensorFlow releases before 2.18 are built against numpy 1.x and fail to import under numpy 2.
NUMPY2_FIRST_TF = "2.18"


def parse(version: str) -> tuple[int, ...]:
    """'2.17.0+nv25.02' -> (2, 17, 0); '3.15.1rc0' -> (3, 15, 1): the release numbers only."""
    release = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(p) for p in release.group(0).split(".")) if release else ()


def installed(package: str) -> str | None:
    """The version of the module Python actually imports (not only what pip recorded), or
    None when it is not importable. Import errors other than a missing module propagate."""
    try:
        module = importlib.import_module(package)
    except ModuleNotFoundError as e:
        if e.name != package and not package.startswith(f"{e.name}."):
            raise  # the package is there, but something it imports is not
        return None
    return str(getattr(module, "__version__", "0"))


def problems() -> list[str]:
    """What makes this stack unusable, as one-line messages (empty when it is fine)."""
    found = []
    if sys.version_info[:2] < PYTHON_MINIMUM:
        found.append(f"Python {sys.version.split()[0]} is running; these scripts need Python >= "
                     f"{'.'.join(map(str, PYTHON_MINIMUM))}")
    versions = {}
    for req in REQUIREMENTS:
        try:
            versions[req.package] = have = installed(req.package)
        except Exception as e:
            cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            found.append(f"{req.package} fails to import ({type(e).__name__}: {cause}); "
                         f"numpy {installed_quietly('numpy')} is installed: {FIX}")
            continue
        if have is None:
            found.append(f"{req.package} is not installed; these scripts need {req.package} >= "
                         f"{req.minimum}: {FIX}")
        elif parse(have) < parse(req.minimum):
            found.append(f"{req.package} {have} is installed; these scripts need {req.package} "
                         f">= {req.minimum} ({req.why}): {FIX}, or pip install "
                         f"'{req.package}=={req.pin}'")
    tf_version, np_version = versions.get("tensorflow"), versions.get("numpy")
    if (tf_version and np_version and parse(np_version) >= (2,)
            and parse(tf_version) < parse(NUMPY2_FIRST_TF)):
        found.append(f"numpy {np_version} is installed but tensorflow {tf_version} was built "
                     f"against numpy 1.x: pip install 'numpy<2' (install_deps.sh never upgrades "
                     f"numpy)")
    return found


def satisfied(package: str) -> bool:
    """Whether the ``package`` of ``REQUIREMENTS`` that Python imports meets its minimum."""
    req = {r.package: r for r in REQUIREMENTS}[package]
    return parse(installed_quietly(package)) >= parse(req.minimum)


def installed_quietly(package: str) -> str:
    try:
        return installed(package) or "none"
    except Exception:
        return "unimportable"


def quiet_interrupts(prog: str) -> None:
    """Ctrl-C outside training (while TensorFlow imports, or the data are checked) ends with one
    line instead of a traceback; the process still reports SIGINT to its parent. That holds
    also when the ``KeyboardInterrupt`` lands where Python ignores exceptions (a weakref
    callback or ``__del__`` during the imports: it printed "Exception ignored" and the run went
    on to train as if never interrupted, exit 0)."""
    previous = sys.excepthook
    previous_unraisable = sys.unraisablehook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            say(f"{prog}: interrupted")
        else:
            previous(kind, value, tb)

    def unraisable(info):
        from common.runtime.graceful_stop import Interrupted, phase
        if issubclass(info.exc_type, Interrupted):  # a stop signal where Python ignores it
            from common.runtime import quiet_start  # (TensorFlow's imports, a finalizer mid-export)
            where = phase()
            if where == "while starting (nothing written)":
                where = "while starting: stopped before anything was written"
            say(f"{prog}: {info.exc_value.signame} {where}")
            quiet_start.release_held()  # os._exit would leave the line in the held stderr
            os._exit(0)
        if not issubclass(info.exc_type, KeyboardInterrupt):
            return previous_unraisable(info)
        say(f"{prog}: interrupted")
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # ends as an uncaught Ctrl-C would
        os.kill(os.getpid(), signal.SIGINT)
    sys.excepthook = hook
    sys.unraisablehook = unraisable


def require(script: str) -> None:
    """Exits with status 2 and one line on stderr when the stack cannot run ``script`` (a
    ``main.py`` or ``prepare_dataset.py`` path), or when the installed repository is another
    checkout than the one ``script`` belongs to."""
    prog = os.path.basename(script)
    quiet_interrupts(prog)
    found = problems()
    if found:
        say(f"{prog}: error: {found[0]}")
        sys.exit(2)


def describe() -> str:
    """'python 3.12.1, numpy 1.26.4, ..., horovod 0.28.1, dali 1.53.0': required and optional."""
    parts = [f"python {sys.version.split()[0]}"]
    parts += [f"{r.package} {installed_quietly(r.package)}" for r in REQUIREMENTS]
    parts += [f"horovod {installed_quietly('horovod')}", f"dali {installed_quietly('nvidia.dali')}"]
    return ", ".join(parts)


def probe():
    """What ``scripts/install_deps.sh`` decides from, read in one process: (name, value) pairs,
    the value empty where the check fails. Each check alone would import TensorFlow again (seconds
    each, the most of a run that finds everything installed). A generator: where an import takes
    the process down, the lines before it are out, and the script checks the rest one by one.

    tensorflow: its version where it imports; keras: "ok" where the Keras Python imports meets
    ``REQUIREMENTS``' minimum; horovod: its version where ``horovod.tensorflow`` imports with MPI
    built; dali: ``nvidia.dali``'s version; dali_tf: "ok" where DALI's TensorFlow plugin imports;
    stack: ``describe()`` where ``problems()`` finds none."""
    def horovod():
        import horovod.tensorflow as hvd
        return installed("horovod") if hvd.mpi_built() else ""

    def dali_tf():
        import nvidia.dali.plugin.tf  # noqa: F401
        return "ok"

    checks = (("tensorflow", lambda: installed("tensorflow")),
              ("keras", lambda: "ok" if satisfied("keras") else ""),
              ("horovod", horovod), ("dali", lambda: installed("nvidia.dali")),
              ("dali_tf", dali_tf),
              ("stack", lambda: "" if problems() else describe()))
    for name, check in checks:
        try:
            value = check() or ""
        except (Exception, SystemExit):  # a failed import is an answer: not there
            value = ""
        yield name, value


def _name(requirement: str) -> str:
    """The normalised project name a requirement or constraint line starts with."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


def lifted_constraints(lines: list[str], requirements_txt: str) -> tuple[list[str], list[str]]:
    """The lines of an inherited pip constraints file (NGC images set ``PIP_CONSTRAINT``) that
    install_deps.sh keeps, and a note for each it lifts: a pin that excludes what these scripts
    install (a Keras below ``REQUIREMENTS``' minimum, which install_deps.sh replaces by its pin;
    a version outside requirements.txt's range). Every other pin is kept, those of what
    TensorFlow was built against above all."""
    import importlib.metadata as md
    try:
        from packaging.requirements import InvalidRequirement
        from packaging.requirements import Requirement as Spec
        from packaging.version import Version
    except ModuleNotFoundError:  # a bare Python before TensorFlow: pip's own copy
        from pip._vendor.packaging.requirements import InvalidRequirement
        from pip._vendor.packaging.requirements import Requirement as Spec
        from pip._vendor.packaging.version import Version

    needs = {}  # name -> the version install_deps.sh installs, or a requirements.txt range
    for r in REQUIREMENTS:
        try:  # what pip recorded: no import of TensorFlow here
            below = parse(md.version(r.package)) < parse(r.minimum)
        except md.PackageNotFoundError:
            below = True
        if below:
            needs[_name(r.package)] = Version(r.pin)
    # requirements.txt and, beside it, the test extra's file: install_deps.sh installs both.
    test_txt = os.path.join(os.path.dirname(requirements_txt), "requirements-test.txt")
    for path in (requirements_txt, *([test_txt] if os.path.exists(test_txt) else [])):
        with open(path) as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    spec = Spec(line)
                    needs.setdefault(_name(spec.name), spec.specifier)
    kept, notes = [], []
    for line in lines:
        text = line.split("#")[0].strip()
        name = _name(text)
        need = needs.get(name)
        if not text or need is None or text.startswith("-"):
            kept.append(line.rstrip("\n"))
            continue
        try:
            pinned = Spec(text).specifier
        except InvalidRequirement:
            kept.append(line.rstrip("\n"))
            continue
        if isinstance(need, Version):
            clash = not pinned.contains(need, prereleases=True)
        else:  # a range: the pin's exact versions must fall inside it
            exact = [Version(s.version) for s in pinned if s.operator == "=="]
            clash = bool(exact) and not any(need.contains(v, prereleases=True) for v in exact)
        if clash:
            notes.append(f"{text} (these scripts install {need})")
        else:
            kept.append(line.rstrip("\n"))
    return kept, notes


# What scripts/install_deps.sh never changes (it constrains every pip call to the installed
# versions): a pin of PIP_CONSTRAINT that excludes one cannot be met.
KEPT_INSTALLED = ("tensorflow", "tensorflow-cpu", "tf-keras", "numpy", "protobuf", "ml-dtypes",
                  "h5py", "horovod", "nvidia-dali-cuda120", "nvidia-dali-cuda110", "tensorrt")


def kept_clashes(lines: list[str]) -> list[str]:
    """The pins among ``lines`` that exclude the installed version of a package install_deps.sh
    keeps as it is, each as a sentence."""
    import importlib.metadata as md
    try:
        from packaging.requirements import InvalidRequirement
        from packaging.requirements import Requirement as Spec
    except ModuleNotFoundError:
        from pip._vendor.packaging.requirements import InvalidRequirement
        from pip._vendor.packaging.requirements import Requirement as Spec
    out = []
    for line in lines:
        text = line.split("#")[0].strip()
        if not text or text.startswith("-") or _name(text) not in KEPT_INSTALLED:
            continue
        try:
            spec = Spec(text)
            have = md.version(spec.name)
        except (InvalidRequirement, md.PackageNotFoundError):
            continue
        if not spec.specifier.contains(have, prereleases=True):
            out.append(f"{text} excludes the installed {spec.name} {have}, which these "
                       "scripts keep (TensorFlow, Horovod and DALI were built against it)")
    return out


def _absolute_includes(line: str, base: str) -> str:
    """A ``-c``/``-r`` line of a constraints file with its relative path made absolute (pip
    reads it relative to the file, which install_deps.sh copies elsewhere)."""
    m = re.match(r"^(\s*(?:-c|--constraint|-r|--requirement)(?:\s+|=))(\S+)(.*)$", line, re.S)
    if not m or os.path.isabs(m.group(2)) or re.match(r"^[a-z][a-z0-9+.-]*://", m.group(2)):
        return line
    return f"{m.group(1)}{os.path.join(base, m.group(2))}{m.group(3)}"


def _main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--pin":
        pins = {r.package: r.pin for r in REQUIREMENTS}
        if argv[2] not in pins:
            print(f"versions.py: error: no pin for {argv[2]}; known: {', '.join(pins)}",
                  file=sys.stderr)
            return 2
        print(pins[argv[2]])
        return 0
    if len(argv) == 3 and argv[1] == "--satisfied":
        return 0 if satisfied(argv[2]) else 1
    if len(argv) == 2 and argv[1] == "--probe":
        for name, value in probe():
            print(f"{name}={value}", flush=True)
        return 0
    if len(argv) >= 3 and argv[1] == "--lift-pins":
        # --lift-pins REQUIREMENTS_TXT CONSTRAINTS...: the kept lines on stdout, a note for
        # each change on stderr; exit 3 when a pin excludes what must stay installed.
        lines, notes = [], []
        for path in argv[3:]:
            if re.match(r"^[a-z][a-z0-9+.-]*://", path):  # pip reads URLs; we cannot here
                lines.append(f"-c {path}")
                notes.append(f"{path} kept as it is (a URL: its pins are not checked here)")
                continue
            with open(path) as f:
                lines += [_absolute_includes(line, os.path.dirname(os.path.abspath(path)))
                          for line in f]
        kept, lifted = lifted_constraints(lines, argv[2])
        clashes = kept_clashes(kept)
        print("\n".join(kept))
        for note in notes + [f"lifted {n} for this install; its other pins are kept"
                             for n in lifted]:
            print(note, file=sys.stderr)
        for clash in clashes:
            print(f"clash: {clash}", file=sys.stderr)
        return 3 if clashes else 0
    if len(argv) != 1:
        print("usage: python -m common.versions [--pin PACKAGE | --satisfied PACKAGE | --probe | "
              "--lift-pins REQUIREMENTS_TXT CONSTRAINTS...]", file=sys.stderr)
        return 2
    require(__file__)
    print(describe())
    return 0


if __name__ == "__main__":
    from common.runtime import quiet_start  # standard library only, as this module
    with quiet_start.filtered_stderr():  # TensorFlow's start-up lines, when it is imported
        code = _main(sys.argv)
    sys.exit(code)
