"""Score or continue a text with Transformer-XL served by Triton as a sequence (the
``transformerxl`` model of an ``--export_triton`` repository): the memory stays in the server,
each request carries one segment's tokens only.

    python -m serving.text_client --vocab /results/export/assets/vocab.txt \\
        --url localhost:8001 --protocol grpc score text.txt --segment 64
    python -m serving.text_client --vocab /results/export/assets/vocab.txt \\
        continue "The game began" --words 20

``score``: the text as the corpus was prepared (words split on whitespace, each line ending
with ``<eos>``, words the vocabulary lacks as ``<unk>``), sent ``--segment`` tokens a request in
one sequence, each request with the next tokens as its ``targets``; prints each segment's mean
negative log-likelihood and, at the end, the text's perplexity (one JSON line with
``--json``). ``continue``: the prompt (in segments of at most the model's ``max_segment``
tokens), then the most probable next word (or one drawn with ``--sample``), one word a
request, ``--words`` times. Each run is a sequence of its own (a correlation id of its own,
the start flag on its first request and the end flag on its last), so clients may share a
server. Before it sends anything, the served model's config must name the vocabulary given
(``vocab_sha256``) and take segments of ``--segment`` tokens (``max_segment``). Needs
``tritonclient[all]`` and numpy; exit status 2 with one line for an error in the command or a
refused request.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys

import numpy as np

from serving import text
from serving.connection import (
    CommandError,
    connect,
    error_line,
    infer_input,
    model_config,
    positive,
)
from serving.text import EOS

PROG = "text_client.py"


def read_vocab(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            words = [line.rstrip("\n") for line in fh]
    except OSError as e:
        raise CommandError(f"--vocab {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise CommandError(f"--vocab {path} is not text (the export's assets/vocab.txt)") from None
    if not words or words[0] != EOS:
        raise CommandError(f"--vocab {path}: not a Transformer-XL vocabulary (its first line is "
                           f"{EOS}: the export's assets/vocab.txt)")
    return words


def served_limits(server, model: str, protocol: str) -> dict:
    """The sequence model's parameters as the server serves them (``vocab_sha256``,
    ``vocab_size``, ``max_segment``: strings; absent from an export older than them)."""
    try:
        config = model_config(server, model, protocol)
    except Exception as e:  # tritonclient's errors, per protocol
        raise CommandError(f"{model}: {error_line(e)}") from None
    if "sequence_batching" not in config:
        raise CommandError(f"{model} is not a sequence model (Transformer-XL's): images go to "
                           "python -m serving.image_client")
    return {k: v.get("string_value") for k, v in config.get("parameters", {}).items()}


def check_served(limits: dict, model: str, vocab_path: str, vocab: list[str],
                 segment: int | None) -> int | None:
    """Refuses a vocabulary that is not the model's (its words' hash, else their count) and a
    segment longer than the model takes; returns the model's ``max_segment`` (None: not
    stated)."""
    sha = limits.get("vocab_sha256")
    size = limits.get("vocab_size")
    mine = hashlib.sha256("".join(w + "\n" for w in vocab).encode()).hexdigest()
    if (sha and sha != mine) or (size and int(size) != len(vocab)):
        raise CommandError(f"--vocab {vocab_path} ({len(vocab):,} words) is not the vocabulary of "
                           f"{model}" + (f" ({int(size):,} words)" if size else "") + ": give "
                           "the assets/vocab.txt of the export it serves")
    longest = int(limits["max_segment"]) if limits.get("max_segment") else None
    if segment is not None and longest is not None and segment > longest:
        raise CommandError(f"--segment {segment} is longer than {model} takes ({longest} tokens "
                           "a request, max_segment in its config)")
    return longest


class Sequence:
    """One sequence on the server: requests with one correlation id, the first flagged as
    its start; ``close`` sends nothing but marks the last request sent as the end."""

    def __init__(self, client, server, model: str, sequence_id: int):
        self.client, self.server, self.model, self.id = client, server, model, sequence_id
        self.started = False

    def send(self, tokens, targets=None, end=False) -> dict:
        inputs = [infer_input(self.client, name, np.asarray([values], np.int32), "INT32")
                  for name, values in (("tokens", tokens), ("targets", targets))
                  if values is not None]
        want = "nll" if targets is not None else "log_probs"
        try:
            result = self.server.infer(
                self.model, inputs, outputs=[self.client.InferRequestedOutput(want)],
                sequence_id=self.id, sequence_start=not self.started, sequence_end=end)
        except Exception as e:  # tritonclient's errors, per protocol
            raise CommandError(f"{self.model}: the server answered: {error_line(e)}") from None
        self.started = True
        return {want: result.as_numpy(want)[0]}


def score(seq: Sequence, ids: list[int], segment: int, as_json: bool) -> float:
    """Each segment's mean NLL and the whole text's perplexity (``serving.text.score``)."""
    def each(n, segments, start, end, mean):
        if not as_json:
            print(f"segment {n + 1}/{segments}: tokens {start}-{end - 1}, mean NLL "
                  f"{mean:.4f}", flush=True)
    got = text.score(seq, ids, segment, each)
    if as_json:
        print(json.dumps({k: got[k] for k in ("tokens", "nll", "perplexity")}))
    else:
        print(f"{got['tokens']} tokens scored: perplexity {got['perplexity']:.2f}")
    return got["perplexity"]


def continue_text(seq: Sequence, ids: list[int], vocab: list[str], words: int, sample: bool,
                  seed: int, as_json: bool, longest: int | None = None) -> list[int]:
    """The prompt in segments of at most ``longest`` tokens, then one word a request
    (``serving.text.continue_ids``)."""
    out = text.continue_ids(seq, ids, words, sample, seed, longest)
    continuation = " ".join(vocab[i] for i in out)
    print(json.dumps({"prompt_ids": ids, "ids": out, "continuation": continuation})
          if as_json else continuation)
    return out


def _correlation_id(text: str) -> int:
    """An argparse type: Triton's correlation ids are unsigned 64-bit; a larger one reached the
    server and came back as its JSON parser's error."""
    value = positive(text)
    if value >= 2 ** 64:
        raise argparse.ArgumentTypeError(f"at most 2**64 - 1 (Triton's unsigned 64-bit "
                                         f"correlation ids), not {value}")
    return value

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab", required=True, help="the export's assets/vocab.txt")
    p.add_argument("--model", default="transformerxl", help="the sequence model's name")
    p.add_argument("--url", default="localhost:8000", help="the server, host:port (HTTP 8000, "
                   "gRPC 8001)")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument("--sequence_id", type=_correlation_id, help="the sequence's correlation id "
                   "(1 to 2**64 - 1, Triton's unsigned 64 bits; default: a random one)")
    p.add_argument("--json", action="store_true", help="the result as one JSON line")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("score", help="a text file's perplexity, segment by segment")
    s.add_argument("file")
    s.add_argument("--segment", type=positive, help="tokens a request (default: 64, or the "
                   "model's max_segment where it takes fewer)")
    c = sub.add_parser("continue", help="the next words of a prompt")
    c.add_argument("prompt")
    c.add_argument("--words", type=positive, default=20)
    c.add_argument("--sample", action="store_true", help="draw each word from the model's "
                   "probabilities instead of the most probable")
    c.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    try:
        vocab = read_vocab(args.vocab)
        if args.command == "score":
            try:
                with open(args.file, encoding="utf-8") as fh:
                    words = fh.read()
            except (OSError, UnicodeDecodeError) as e:
                raise CommandError(f"{args.file}: {getattr(e, 'strerror', None) or e}") from None
            ids = text.encode(words, vocab, lines=True)
        else:
            ids = text.encode(args.prompt, vocab, lines=False)
        client, server = connect(args.url, args.protocol, "serving.text_client")
        longest = check_served(served_limits(server, args.model, args.protocol), args.model,
                               args.vocab, vocab,
                               args.segment if args.command == "score" else None)
        seq = Sequence(client, server, args.model,
                       args.sequence_id or random.SystemRandom().randrange(1, 2 ** 63))
        if args.command == "score":
            score(seq, ids, args.segment or min(text.SEGMENT, longest or text.SEGMENT), args.json)
        else:
            continue_text(seq, ids, vocab, args.words, args.sample, args.seed, args.json,
                          longest)
        return 0
    except CommandError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
