"""Writing an export: ``--export_dir`` (the SavedModel of the model's ``ExportModule``, with its
ONNX and INT8 files), ``--export_triton`` after it, all swapped into place whole
(``common.files.staged_dir``); and what is checked before training (``check_export_dir``)."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import tensorflow as tf

from common import files
from common.errors import DataError, one_line
from common.export import card as cards
from common.export import module as export_module
from common.export import onnx_convert, onnx_int8
from common.export.triton.repository import write_repository


def export(module, export_dir: str, with_onnx: bool, log: Callable[[str], None],
           int8: bool = False,
           triton_dir: str | None = None, triton_replace: bool = False,
           scored: dict | None = None) -> None:
    """The ``ExportModule``'s SavedModel in ``export_dir``, and its ONNX files beside it (rank
    0 only), with ``int8`` their INT8 forms too, swapped in only once all of them are written
    (``files.staged_dir``): a full disk or a failed conversion leaves no half-written export.
    With ``triton_dir``, a Triton model repository of what was written, after it (a new
    version of each model, or with ``triton_replace`` its only one). The model card
    (``common/export/card.py``; ``scored``: what the weights scored) goes beside the export and
    into each repository; ``log`` prints its lines."""
    with files.staged_dir(export_dir, "the export", replaces=export_names(module.spec),
                          log=log) as stage:
        export_module.save(module, stage, export_module.model_card(module, scored))
        onnx = onnx_convert.export_module(module, stage) if with_onnx else []
        if int8:
            onnx += onnx_int8.export_module(module, stage, log)
        export_module.record_served_files(stage, [os.path.basename(p) for p in onnx])
    log(f"exported a SavedModel to {export_dir} (signatures and client.json: "
        f"{os.path.join(export_dir, 'assets')})")
    for path in onnx:
        final = os.path.join(export_dir, os.path.basename(path))
        log(f"exported ONNX (opset {onnx_opset(final)}) to {final}")
    if triton_dir:
        for line in write_repository(module, export_dir, triton_dir, triton_replace, log):
            log(line)


def require_tools(spec, flags) -> None:
    """One line at start-up for a tool the flags' export needs and this environment lacks
    (tf2onnx, Model Optimizer's), not after a whole training run."""
    if writes_onnx(spec, flags.export_onnx, flags.export_onnx_int8, flags.export_triton):
        onnx_convert.require()
    if flags.export_onnx_int8:
        onnx_int8.require()


def writes_onnx(spec, onnx: bool, int8: bool = False, triton: str | None = None) -> bool:
    """Whether the export of a model of ``spec`` (an ``ExportSpec``) writes ``model.onnx``:
    --export_onnx (``onnx``), or what needs it (--export_onnx_int8; --export_triton for a
    model whose repositories run it)."""
    return bool(onnx or int8 or (triton and spec.onnx_for_triton))


def onnx_opset(path: str) -> int | str:
    """The ONNX file's own opset (the default domain's): Model Optimizer raises an INT8 file's
    above what tf2onnx wrote."""
    import onnx
    model = onnx.load(path, load_external_data=False)
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")


def check_export_dir(module, flags, log) -> None:
    """--export_dir (and --export_triton) that is a file, read-only or too small for the
    ``ExportModule``'s export (measured by a trial export) stops the run before training; so
    does a calibration record that cannot be read (``--export_onnx_int8``), not after the
    training. A mount point (which the swap cannot replace) stops it too, and what a stopped
    swap left aside is put back first (``files.recover``), before the check makes an empty
    directory there."""
    for path in (flags.export_dir, flags.export_triton):
        if path:
            files.recover(path, log)
    files.check_output_dir(flags.export_dir, "--export_dir", 1 << 20, "the export needs")
    for flag, path in (("--export_dir", flags.export_dir), ("--export_triton",
                                                            flags.export_triton)):
        if path:  # writable (a read-only mount says so above), but a swap cannot replace it
            try:
                files.swap_target(path, "the export" if flag == "--export_dir" else
                                  "the model repository")
            except DataError as e:
                raise DataError(f"{flag} {path}: {e}") from None
    for flag, path in (("--export_dir", flags.export_dir), ("--export_triton",
                                                            flags.export_triton)):
        path = path and os.path.realpath(path)
        parent = os.path.dirname(path) if path else None
        if parent and os.path.isdir(parent) and not os.access(parent, os.W_OK | os.X_OK):
            raise DataError(f"{flag} {path}: its folder {parent} is not writable; the export is "
                            "written beside it and then swapped in whole")
    with_onnx = writes_onnx(module.spec, flags.export_onnx, flags.export_onnx_int8,
                            flags.export_triton)
    need = export_bytes(module, flags.export_dir, with_onnx, flags.export_onnx_int8, log)
    files.check_output_dir(flags.export_dir, "--export_dir", need, "the export needs")
    if flags.export_triton:
        files.check_output_dir(flags.export_triton, "--export_triton", need,
                               "the model repository needs")
    if flags.export_onnx_int8 and module.calibration is not None:
        for _ in module.calibration(module.calibration_images):
            pass


def export_names(spec) -> set[str]:
    """Every entry an export of a model of ``spec`` (an ``ExportSpec``) may write in its
    directory: a new export replaces them all (an INT8 file left from an earlier export would
    be taken for this one's)."""
    names = spec.onnx_files
    onnx = set(names) | {onnx_int8.int8_name(n) for n in names}
    return {"saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra",
            export_module.PREPROCESS, cards.CARD_JSON, cards.CARD_README, *onnx}


def export_bytes(module, export_dir: str, with_onnx: bool, with_int8: bool = False,
                 log=None) -> int:
    """What the export will take in ``export_dir``, from a real SavedModel of ``module`` written
    there now and removed (before training: the same graph and weights' size), once more for
    each ONNX file (each holds the float32 weights and the graph, about a SavedModel's size),
    with a tenth to spare. A directory too small for even the trial stops the run with one
    line."""
    try:
        # Under the writers' lock: another run's trial or export into the same directory is
        # its own work in progress, not a stopped run's leftovers (the sweep outside the lock
        # removed a live trial export and called it stopped).
        with files.one_writer(export_dir, log=log):
            files.clear_stale(export_dir, log)
            with tempfile.TemporaryDirectory(prefix=files.PROBE, dir=export_dir) as tmp:
                export_module.save(module, tmp)
                size = files.tree_bytes(tmp)
    except (OSError, tf.errors.OpError) as e:
        why = one_line(getattr(e, "message", None) or e.strerror or str(e))
        raise DataError(f"--export_dir {export_dir} cannot hold the export: a trial export "
                        f"failed ({why})") from None
    copies = 1 + (len(module.spec.onnx_files) if with_onnx else 0) * (2 if with_int8 else 1)
    return int(1.1 * size * copies) + (1 << 20)
