"""A request's statistics as text, as llama.cpp prints them for speculative decoding (run's stderr, the server's
log)."""

from __future__ import annotations

from specframe.results import GenerationResult

_SHOWN_FROM = 0.1  # seconds of setup worth a line

# llama.cpp's columns, and the chain's: "#won", its drafts verified (the chosen one of a step's drafts), and
# "#held back", steps it was not asked at because it would not pay
_DRAFTER_COLUMNS = ("#calls", "#gen drafts", "#won", "#acc drafts", "#gen tokens", "#acc tokens", "#held back",
                    "dur(b,g,a) ms")


def format_stats(result: GenerationResult, speculative: bool = True) -> str:
    s = result.stats
    lines = [
        "",
        f"prompt: {s.n_prompt_tokens} tokens" + (f" ({s.n_cached_tokens} kept from an earlier request)"
                                                  if s.n_cached_tokens else "")
        + f" in {s.prompt_seconds:.2f} s ({s.prompt_tokens_per_second:.1f} tokens/s)",
        f"generated: {s.n_generated} tokens in {s.generation_seconds:.2f} s ({s.tokens_per_second:.2f} tokens/s), "
        f"{s.n_target_passes} target passes ({s.tokens_per_pass:.2f} tokens/pass, {s.host_ms_per_pass:.3f} ms of "
        f"host time each), stop: {result.stop_reason}",
    ]
    setting_up = [f"{what} in {seconds:.2f} s" for what, seconds in
                  (("pass costs measured or checked", s.calibration_seconds),
                   ("drafters made ready", s.preparing_seconds)) if seconds >= _SHOWN_FROM]
    if setting_up:
        hint = (" (a first run on this machine measures the pass costs: `specframe calibrate` shows them)"
                if s.calibration_seconds >= _SHOWN_FROM else "")
        lines.append(f"setup: {', '.join(setting_up)}, counted in neither time above{hint}")
    if speculative:
        share = 100 * s.chain_seconds / s.generation_seconds if s.generation_seconds > 0 else 0.0
        lines.append(f"drafted: {s.n_drafted}, accepted: {s.n_accepted} ({100 * s.acceptance_rate:.1f} %), "
                     f"{s.n_drafts} drafts, mean accepted length {s.mean_accepted_length:.2f}; the drafter chain "
                     f"took {1e3 * s.chain_seconds:.1f} ms ({share:.1f} % of generation)")
    if s.drafters:
        width = max(8, *(len(name) for name in s.drafters))
        lines.append(f"{'drafter':<{width}}  " + "  ".join(f"{c:>11}" for c in _DRAFTER_COLUMNS))
        for name, d in s.drafters.items():
            durations = f"{d['begin_ms']:.1f},{d['draft_ms']:.1f},{d['accept_ms']:.1f}"
            cells = (d["calls"], d["drafts"], d["wins"], d["accepted_drafts"], d["drafted_tokens"],
                     d["accepted_tokens"], d["held_back"])
            lines.append(f"{name:<{width}}  " + "  ".join(f"{c:>11}" for c in cells) + f"  {durations:>13}"
                         + (f"  (prepared in {d['prepare_ms'] / 1e3:.2f} s)" if d["prepare_ms"] >= 1 else "")
                         + (f"  ({d['note']})" if "note" in d else "")
                         + (f"  DISABLED: {d['disabled']}" if "disabled" in d else ""))
    return "\n".join(lines)
