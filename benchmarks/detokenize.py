"""A row's text at every token: its whole ids decoded again against the text held and the new ids decoded.

python -m benchmarks.detokenize [--runs 5] [--tokens 200] [--model embedded]
This README's text through the model's tokenizer, as a row's answer: for each length, the `--tokens` tokens that
take the row up to it, decoded the way the engine decodes a row's text (runner.RowText) with `whole` (the text
of all the row's ids, as every tokenizer whose text does not join still decodes) and with `grown` (only the ids
since the last whole character; what a byte-level tokenizer gets), µs a token in process CPU time, medians over
runs; both give the same text at every token (checked). One JSON line of figures last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from playground.decoding.runner import ModelRunner, RowText
from playground.models import load_model

LENGTHS = (500, 1000, 2000, 4000, 8000)
TEXT = Path(__file__).resolve().parent.parent / "README.md"


def _us_per_token(text: RowText, ids: list[int], end: int, tokens: int, check: RowText | None = None) -> float:
    """Feed the row up to `end - tokens` ids, then time one call per token up to `end`."""
    text(ids[: end - tokens])
    start = time.process_time()
    for n in range(end - tokens + 1, end + 1):
        got = text(ids[:n])
        if check is not None and got != check(ids[:n]):
            raise SystemExit(f"the texts differ at token {n}")
    return (time.process_time() - start) * 1e6 / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--model", default="embedded")
    args = parser.parse_args()
    runner = ModelRunner(load_model(args.model, threads=1))
    if not runner.text_joins:
        raise SystemExit(f"{args.model}'s tokenizer decodes whole rows (its text does not join): nothing to compare")
    ids = runner.tokenizer(TEXT.read_text(), add_special_tokens=False)["input_ids"]
    figures: dict[str, object] = {"model": args.model, "runs": args.runs, "tokens": args.tokens}
    for end in (n for n in LENGTHS if args.tokens < n <= len(ids)):
        _us_per_token(RowText(runner.text, True), ids, end, args.tokens, check=RowText(runner.text, False))
        whole, grown = [], []
        for _ in range(args.runs):  # interleaved
            whole.append(_us_per_token(RowText(runner.text, False), ids, end, args.tokens))
            grown.append(_us_per_token(RowText(runner.text, True), ids, end, args.tokens))
        figures[f"len{end}_whole_us"] = round(statistics.median(whole), 1)
        figures[f"len{end}_grown_us"] = round(statistics.median(grown), 1)
        figures[f"len{end}_whole_vs_grown"] = round(statistics.median(whole) / statistics.median(grown), 1)
        print(
            f"{end} tokens: whole {figures[f'len{end}_whole_us']} µs, grown {figures[f'len{end}_grown_us']} µs a token"
        )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
