"""ngram-cache: llama.cpp's common_ngram_cache_draft (common/ngram-cache.cpp at 0c1e570, as llama-lookup uses it).

Three caches count which token followed each n-gram: the context cache (this request's history, 1- to 4-grams),
the dynamic cache (merged from earlier requests and runs, from a file that can be updated after the run) and the
static cache (2-grams counted over a corpus, ``specframe ngram build``). Each drafted token comes from the first
cache that is confident: the context with lax thresholds (at least {2, 2, 1, 1} observations and a {66, 50, 50,
50} % share for 1- to 4-grams, longest n-gram first), then the dynamic cache with strict ones ({4, 3, 2, 2},
{75, 66, 66, 66} %), then the static cache alone (2 observations, 50 %). Candidates from the first two are
weighted by their static count (x 100, or x 1 when the static cache never saw them). Up to ``n_draft`` tokens are
drafted, each from the history extended by the draft so far.

The dynamic cache holds at most ``max_ngrams`` n-grams (llama.cpp's grows without bound in a long-lived
process): past it, the least observed are dropped. With ``save_dynamic``, what this process learned is added to
the file under its lock when the engine closes, so runs that share the file all count. A server's slots share the
static and dynamic caches; each has a context cache of its own.

Deliberate differences from llama.cpp:
- its speculative wrapper feeds only the tokens new since the last call to the context cache, as a sequence of
  their own, so n-grams that span two calls (most 3- and 4-grams during generation) are never counted; here
  every n-gram of the history is counted once;
- its context cache outlives the request; here it is folded into the dynamic cache when the next request begins;
- ties between candidates go to the first token seen, not to hash-table order.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

from specframe.drafting import NO_DRAFT, Draft, Drafter
from specframe.drafting.incremental import IncrementalDrafter
from specframe.errors import ParamError
from specframe.files import file_problem
from specframe.hookspecs import hookimpl
from specframe.ngram_counts import NGRAM_MAX, NgramCache
from specframe.params import MAX_DRAFT_TOKENS, param
from specframe.state_files import check_state_param

STATIC_SIZE = 2
LAX = ((2, 2, 1, 1), (66, 50, 50, 50))       # (min observations, min share %) for 1..4-grams
STRICT = ((4, 3, 2, 2), (75, 66, 66, 66))


@dataclass(frozen=True)
class NgramCacheParams:
    n_draft: int = param(8, min=1, max=MAX_DRAFT_TOKENS, help="longest draft")
    static: str = param("", help="static 2-gram cache file (specframe ngram build), relative to the config")
    dynamic: str = param("", help="dynamic cache file, relative to the config")
    save_dynamic: bool = param(False, help="add what this run saw to the dynamic file when it ends")
    max_ngrams: int = param(1 << 18, min=1024, max=1 << 25,
                            help="most n-grams the dynamic cache holds (about 330 bytes each, twice that with "
                                 "save_dynamic); past it, the least observed are dropped to 3/4 of it")


class _Caches:
    """The static cache, the dynamic one and what this process learned: what a server's slots share."""

    def __init__(self, static: str, dynamic: str, max_ngrams: int):
        self.static = NgramCache.load(static) if static else NgramCache()
        self.dynamic = NgramCache.load(dynamic) if dynamic and os.path.exists(dynamic) else NgramCache()
        self.dynamic.cap(max_ngrams)
        self.learned = NgramCache()   # added to the dynamic file by save()


class NgramCacheDrafter(IncrementalDrafter):
    name = "ngram-cache"
    Params = NgramCacheParams

    def __init__(self, params: NgramCacheParams, env, caches: _Caches | None = None):
        """``caches``: those shared with the other slots' drafters (by default its own)."""
        super().__init__(params, env)
        self._caches = caches or self._load(params, env)
        self.context = NgramCache()

    @classmethod
    def for_slots(cls, params: NgramCacheParams, env, n_slots: int) -> list[Drafter]:
        """One static and one dynamic cache for every slot."""
        caches = cls._load(params, env)
        return [cls(params, env, caches) for _ in range(n_slots)]

    @staticmethod
    def _load(params: NgramCacheParams, env) -> _Caches:
        return _Caches(_located(params.static, env), _located(params.dynamic, env), params.max_ngrams)

    @property
    def static(self) -> NgramCache:
        return self._caches.static

    @property
    def dynamic(self) -> NgramCache:
        return self._caches.dynamic

    @property
    def learned(self) -> NgramCache:
        return self._caches.learned

    @classmethod
    def check_params(cls, params: NgramCacheParams, config_dir: pathlib.Path) -> None:
        def located(value: str) -> pathlib.Path:
            return config_dir / os.path.expanduser(value)

        if params.static and (problem := file_problem(located(params.static))):
            raise ParamError("static", f"{params.static!r}: {problem}")
        check_state_param(config_dir, params.dynamic, params.save_dynamic, "dynamic", "save_dynamic")

    def _fold_context(self) -> None:
        """What the last request saw joins the dynamic cache (and what is to be saved)."""
        for cache in (self.dynamic, self.learned) if self.params.save_dynamic else (self.dynamic,):
            cache.merge(self.context)
            cache.cap(self.params.max_ngrams)
        self.context = NgramCache()

    def restart(self) -> None:
        self._fold_context()

    def index(self, tokens: list[int], start: int, stop: int) -> None:
        self.context.update(tokens, start)   # stop is the history's end: the whole new tail is counted

    def propose(self, tokens: list[int], n_max: int) -> Draft:
        if len(tokens) < STATIC_SIZE:
            return NO_DRAFT
        sequence = list(tokens[-NGRAM_MAX:])
        drafted: list[int] = []
        for _ in range(min(self.params.n_draft, n_max)):
            token = self._next(sequence)
            if token is None:
                break
            drafted.append(token)
            sequence.append(token)
        return Draft.of(drafted) if drafted else NO_DRAFT

    def _next(self, sequence: list[int]) -> int | None:
        static_key = tuple(sequence[-STATIC_SIZE:])
        static_part = self.static.get(static_key) or {}
        ngrams = [tuple(sequence[-size:]) for size in range(1, NGRAM_MAX + 1) if size <= len(sequence)]
        for cache, thresholds in ((self.context, LAX), (self.dynamic, STRICT)):
            token = _confident(cache, ngrams, static_part, thresholds)
            if token is not None:
                return token
        return _confident(self.static, [static_key], {}, LAX)   # the static cache alone, unweighted

    def save(self) -> None:
        if self.params.save_dynamic and self.params.dynamic:
            self._fold_context()
            self.learned.add_to_file(_located(self.params.dynamic, self.env), self.params.max_ngrams)
            self._caches.learned = NgramCache()


def _located(value: str, env) -> str:
    """A file named in the params, relative to the config (as given when there is no environment); "" for none."""
    return os.fspath(env.path(value)) if value and env is not None else value


def _confident(cache: NgramCache, ngrams: list[tuple], static_part: dict, thresholds) -> int | None:
    """The most frequent follower of the longest n-gram whose counts pass the thresholds, weighted by static."""
    min_samples, min_percent = thresholds
    for ngram in reversed(ngrams):
        part = cache.get(ngram)
        if part is None:
            continue
        best, best_count, best_weight, total = None, 0, 0, 0
        for token, count in part.items():
            weight = 100 * static_part[token] if token in static_part else 1
            if count * weight > best_count * best_weight:
                best, best_count, best_weight = token, count, weight
            total += count
        size = len(ngram)
        if total >= min_samples[size - 1] and 100 * best_count >= min_percent[size - 1] * total:
            return best
    return None


@hookimpl
def register_drafters(register):
    register(NgramCacheDrafter)
