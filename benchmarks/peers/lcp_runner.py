"""One greedy generation with llama-cpp-python, run by run.py in the peers' venv (it cannot import specframe).

stdin: {"model", "tokens", "max_tokens", "threads", "n_ctx", "flash_attn", "prompt_lookup": null | {"max_ngram_size",
"num_pred_tokens"}}. stdout: one JSON object with the measurements, timed as specframe's engine times itself: the
prompt but its last token is evaluated first (prompt time); generation time runs from the pass over the last prompt
token to the last token kept, which ends at an end-of-generation token (not counted) or at max_tokens.
"""

import json
import sys
import time

import llama_cpp
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


class CountingPromptLookup(LlamaPromptLookupDecoding):
    """LlamaPromptLookupDecoding that records each draft and where it starts, to count accepted tokens afterwards."""

    def __init__(self, **params):
        super().__init__(**params)
        self.drafts: list[tuple[int, list[int]]] = []

    def __call__(self, input_ids, /, **kwargs):
        draft = super().__call__(input_ids, **kwargs)
        self.drafts.append((len(input_ids), draft.tolist()))
        return draft


def generate(llm: Llama, tokens: list[int], max_tokens: int) -> tuple[list[int], float, float]:
    """The generated tokens, prompt seconds and generation seconds."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens[:-1])
    prompt_seconds = time.perf_counter() - start
    generated: list[int] = []
    start = time.perf_counter()
    # generate() reuses the evaluated prefix and decodes only the last prompt token before the first sample
    for token in llm.generate(tokens, temp=0.0):
        if llama_cpp.llama_vocab_is_eog(vocab, token):
            break
        generated.append(token)
        if len(generated) >= max_tokens:
            break
    return generated, prompt_seconds, time.perf_counter() - start


def accepted_tokens(drafts: list[tuple[int, list[int]]], sequence: list[int]) -> tuple[int, int]:
    """(drafted, accepted): each draft's tokens, and how many of them match the sequence where the draft starts."""
    n_drafted = n_accepted = 0
    for start, draft in drafts:
        n_drafted += len(draft)
        for offset, token in enumerate(draft):
            if start + offset >= len(sequence) or sequence[start + offset] != token:
                break
            n_accepted += 1
    return n_drafted, n_accepted


def main() -> None:
    job = json.load(sys.stdin)
    drafter = CountingPromptLookup(**job["prompt_lookup"]) if job["prompt_lookup"] else None
    llm = Llama(model_path=job["model"], n_ctx=job["n_ctx"], n_threads=job["threads"],
                n_threads_batch=job["threads"], flash_attn=job["flash_attn"], draft_model=drafter, verbose=False,
                # with a draft model it keeps every logit anyway, but sizes its buffer by this flag (0.3.36 bug)
                logits_all=drafter is not None)
    tokens = job["tokens"]
    generate(llm, tokens[:16], 4)   # warm-up, as llama.cpp's tools and run.py's engines do
    if drafter is not None:
        drafter.drafts.clear()
    generated, prompt_seconds, seconds = generate(llm, tokens, job["max_tokens"])
    result = {"version": llama_cpp.__version__, "n_prompt": len(tokens), "n_generated": len(generated),
              "tokens_per_second": len(generated) / seconds,
              "prompt_tokens_per_second": (len(tokens) - 1) / prompt_seconds}
    if drafter is not None:
        result["n_drafted"], result["n_accepted"] = accepted_tokens(drafter.drafts, tokens + generated)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
