"""How far copying can go: the speedup of perfect n-gram drafting on each workload, beside the oracle's.

    python benchmarks/copy_ceiling.py [--config config.example.toml] [--workload code-editing ...]

Each workload's plain greedy reply is generated once. Two drafters that know it are then priced, pass by pass, by
the stored pass-cost table (`specframe calibrate` shows it), each draft cut to the length with the most tokens per
second when every token is right:
- the oracle drafts the reply's next tokens;
- the copy ceiling drafts the longest stretch of the reply's next tokens found anywhere in the prompt or the reply
  so far: what an n-gram drafter that always chose the right place to copy from would bring.
What lies between the two is tokens only a model can predict (type hints added, a name changed, new words).
"""

import argparse

import numpy as np

from specframe.bench.workloads import BUILTIN, workloads
from specframe.drafting.gain import best_cut
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine


def longest_copy(tokens: np.ndarray, start: int, n_max: int) -> int:
    """The longest prefix (at most ``n_max``) of ``tokens[start:]`` that occurs in ``tokens[:start]``: a drafter
    can copy only what the history holds."""
    best = 0
    for source in np.flatnonzero(tokens[:start] == tokens[start]):
        n = 1
        while n < n_max and source + n < start and tokens[source + n] == tokens[start + n]:
            n += 1
        best = max(best, n)
    return best


def modeled_speedup(n_prompt: int, tokens: np.ndarray, cost: PassCost, n_max: int, copy_only: bool) -> float:
    """Plain decoding's seconds for the reply over those of the passes a knowing drafter needs."""
    seconds, at, end = 0.0, n_prompt, len(tokens)
    while at < end:
        room = min(n_max, end - at - 1)
        known = longest_copy(tokens, at, room) if copy_only else room
        k = best_cut(np.ones(known), cost)[0] if known else 0
        seconds += cost.seconds(1 + k)
        at += k + 1
    return (end - n_prompt) * cost.seconds(1) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config.example.toml")
    parser.add_argument("--workload", action="append", default=[], help=f"built-in ({', '.join(BUILTIN)}) or file")
    args = parser.parse_args()
    with Engine.from_config(args.config) as engine:
        cost = engine.pass_cost_store.load()
        if cost is None:
            raise SystemExit(f"no stored pass-cost table for {args.config}'s target: run `specframe calibrate` first")
        n_max = engine.config.speculative.n_max
        print(f"pass-cost table: single pass {1e3 * cost.seconds(1):.1f} ms; n_max {n_max}")
        print(f"{'workload':<18}{'tokens':>7}{'oracle':>9}{'copy ceiling':>14}{'copy/oracle':>13}")
        for workload in workloads(args.workload):
            prompt = engine.prompt_tokens(workload.prompt)
            reply = engine.generate(prompt, speculative=False, max_tokens=workload.max_tokens, temperature=0.0)
            tokens = np.concatenate([prompt, np.asarray(reply.tokens, dtype=prompt.dtype)])
            oracle = modeled_speedup(len(prompt), tokens, cost, n_max, copy_only=False)
            copy = modeled_speedup(len(prompt), tokens, cost, n_max, copy_only=True)
            print(f"{workload.name:<18}{len(reply.tokens):>7}{oracle:>8.2f}x{copy:>13.2f}x{copy / oracle:>12.0%}")


if __name__ == "__main__":
    main()
