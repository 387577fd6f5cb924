"""Measurement: ``--profile``'s trace and per-op table, model FLOP utilisation, and what the
benchmark scripts share (the precisions they name, side-by-side rounds)."""
