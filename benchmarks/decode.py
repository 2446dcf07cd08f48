"""Engine vs transformers' generate, unconstrained and per constraint kind.

python -m benchmarks.decode [--runs 5] [--tokens 48] [--model embedded] [--threads 1] [--cpu-batch-weights auto]
    [--cpu-gguf-kernels auto] [--cpu-attention-kernel auto]
Prints a table, then one JSON line of figures last. Runs are interleaved in one process and timed in
process CPU seconds on CPU (other processes on a 2-core machine don't skew them); medians over runs.
`engine_vs_generate` races generate on the model loaded without the CPU kernels (no blocked copies, no
GGUF blocks: transformers' products, in MKL's one-row layout; generate never takes the attention kernel); `engine_vs_generate_same_model` races
generate on the engine's own model, so the kernels speed both and the ratio is the loop's alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from playground.decoding.engine import Engine
from playground.models import load_model, quant_weights
from playground.models.cpu_weights import MODES
from playground.types import ChatMessage, GenerateParameters

PROMPTS = [
    "Describe a person as JSON with a name and an age.",
    "Write a short paragraph about the sea.",
    "List three colours and explain why you like them.",
]
CONSTRAINTS = {
    "json_schema": {
        "type": "json",
        "value": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "bio": {"type": "string"}},
            "required": ["name", "age", "bio"],
        },
    },
    "regex": {"type": "regex", "value": r"[A-Z][a-z]+( [a-z]+){5,60}\."},
    "choice": {"type": "choice", "value": ["The sea is calm and blue today. " * 6, "The sea is rough and grey. " * 8]},
    "grammar": {"type": "grammar", "value": 'start: sentence+\nsentence: WORD (" " WORD)* ". "\nWORD: /[a-z]{1,12}/'},
}


def _messages(prompt: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=prompt)]


def _clock() -> float:
    """CPU seconds of this process on CPU (robust to other processes on a small machine), else wall."""
    return time.process_time() if not torch.cuda.is_available() else time.perf_counter()


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _hf_generate(engine: Engine, prompt: str, tokens: int, model: Any = None) -> float:
    """tokens/s of transformers' generate, greedy, from the same chat-templated prompt ids, on `model`
    (default: the engine's)."""
    _, ids = engine.encode_prompt(_messages(prompt))
    input_ids = torch.tensor([ids], device=engine.device)
    start = _clock()
    with torch.inference_mode():
        out = (model or engine.model).generate(
            input_ids, max_new_tokens=tokens, do_sample=False, pad_token_id=engine.tokenizer.eos_token_id
        )
    _sync()
    return (out.shape[1] - len(ids)) / (_clock() - start)


def _engine(engine: Engine, prompt: str, tokens: int, grammar: dict | None = None) -> tuple[float, float]:
    """(tokens/s with prefill, as for generate; decode-only tokens/s after the first token).

    Constrained answers end at other lengths than unconstrained ones, so constraint costs are compared
    on decode-only speed, where the prompt's prefill does not weigh on short answers.
    """
    params = GenerateParameters(max_new_tokens=tokens, grammar=grammar, top_n_tokens=1)
    start = _clock()
    first = None
    for event in engine.stream(_messages(prompt), params):  # noqa: B007 - the last event is the result
        if first is None:
            first = _clock()
    _sync()
    end = _clock()
    n = event.best.generated_tokens
    return n / (end - start), (n - 1) / (end - first) if n > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cpu-batch-weights", choices=MODES, default="auto")
    parser.add_argument("--cpu-gguf-kernels", choices=quant_weights.MODES, default="auto")
    parser.add_argument("--cpu-attention-kernel", choices=quant_weights.MODES, default="auto")
    args = parser.parse_args()
    loaded = load_model(
        args.model,
        threads=args.threads,
        batch_weights=args.cpu_batch_weights,
        gguf_kernels=args.cpu_gguf_kernels,
        attention_kernel=args.cpu_attention_kernel,
    )
    engine = Engine(loaded)
    plain = load_model(args.model, threads=args.threads, batch_weights="off", gguf_kernels="off").model
    for grammar in CONSTRAINTS.values():  # compile once, outside the timed runs (the cache is the point)
        engine.compile(GenerateParameters(grammar=grammar))
    _engine(engine, PROMPTS[0], 4)
    _hf_generate(engine, PROMPTS[0], 4, plain)
    _hf_generate(engine, PROMPTS[0], 4)

    hf, hf_same, ours, ours_decode = [], [], [], []
    kinds: dict[str, list[float]] = {k: [] for k in CONSTRAINTS}
    for _ in range(args.runs):
        for prompt in PROMPTS:
            hf.append(_hf_generate(engine, prompt, args.tokens, plain))
            hf_same.append(_hf_generate(engine, prompt, args.tokens))
            full, decode = _engine(engine, prompt, args.tokens)
            ours.append(full)
            ours_decode.append(decode)
            for kind, grammar in CONSTRAINTS.items():
                kinds[kind].append(_engine(engine, prompt, args.tokens, grammar)[1])
    med = statistics.median
    figures = {
        "model": engine.model_id,
        "device": str(engine.device),
        "threads": torch.get_num_threads(),
        "runs": args.runs * len(PROMPTS),
        "tokens": args.tokens,
        "hf_generate_tok_s": round(med(hf), 2),
        "engine_tok_s": round(med(ours), 2),
        "engine_vs_generate": round(med(ours) / med(hf), 3),
        "hf_generate_same_model_tok_s": round(med(hf_same), 2),
        "engine_vs_generate_same_model": round(med(ours) / med(hf_same), 3),
        "gguf_blocks_mb": loaded.gguf_blocks_mb,
        "clock": "process CPU time" if not torch.cuda.is_available() else "wall, synchronized",
        "engine_decode_tok_s": round(med(ours_decode), 2),
    }
    for kind, values in kinds.items():
        figures[f"{kind}_decode_tok_s"] = round(med(values), 2)
        figures[f"{kind}_vs_unconstrained"] = round(med(values) / med(ours_decode), 3)
    for key, value in figures.items():
        print(f"{key:>34}  {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
