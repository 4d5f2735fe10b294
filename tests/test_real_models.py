"""End to end on the catalog's real GGUF models, docs/models.md (fetched once, sha256-checked, cached outside the
clone)."""

import json
import logging
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from specframe.bench.workloads import workload
from specframe.cli import main
from specframe.config import load_config
from specframe.drafting.acceptance_memory import memory_folder
from specframe.drafting.pass_cost import PassCost
from specframe.engine import Engine
from specframe.errors import ModelError
from specframe.prefix import common_prefix
from specframe.testing.lossless import compare

pytestmark = pytest.mark.real_model
REPO = pathlib.Path(__file__).resolve().parent.parent

CODE_EDIT = '''Rename the function `area` to `rectangle_area` and add type hints. Reply with the whole code only.

```python
def area(width, height):
    """Area of a rectangle."""
    if width < 0 or height < 0:
        raise ValueError("negative size")
    return width * height


def total_area(shapes):
    return sum(area(w, h) for w, h in shapes)
```'''
CODE_GEN = "Write a Python function that checks whether a number is prime."


def with_fixed_lengths(config: pathlib.Path, folder: pathlib.Path) -> pathlib.Path:
    """A copy of a repository config with adaptive draft lengths off: these tests check what the drafts do
    (acceptance, rollback, losslessness), so every drafter must draft whenever it can."""
    text = config.read_text()
    assert "[speculative]\n" in text
    copy = folder / config.name
    copy.write_text(text.replace("[speculative]\n", "[speculative]\nadaptive = false\n", 1))
    return copy


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    config = with_fixed_lengths(REPO / "config.example.toml", tmp_path_factory.mktemp("qwen"))
    with Engine.from_config(config) as engine:
        yield engine


@pytest.mark.parametrize("prompt", [CODE_EDIT, CODE_GEN], ids=["code-editing", "code-generation"])
def test_qwen_pair_speculative_greedy_matches_plain_up_to_near_ties(qwen, prompt):
    plain = qwen.generate(prompt, speculative=False, max_tokens=96, track_margins=True)
    spec = qwen.generate(prompt, max_tokens=96, track_margins=True)
    verdict = compare(plain, spec, qwen)
    assert verdict.ok, str(verdict)
    assert spec.stats.n_accepted > 0 and spec.stats.tokens_per_pass > 1.5
    assert set(spec.stats.drafters) == {"copy-cursor", "ngram-simple", "ngram-mod", "grammar", "draft-model"}
    if prompt is CODE_EDIT:
        assert "def rectangle_area(" in (spec.text if verdict.identical else plain.text)


def test_a_qwen_draft_cut_to_the_vocabularys_first_tokens_drafts_and_the_output_is_plains(write_config):
    """head = 32768: the 0.5B drafts with its output layer cut, fed input embeddings; at fixed lengths most of its
    tokens on code generation are accepted, and the output is the target's."""
    config = write_config("""
        [target]
        model = "qwen2.5-coder-1.5b-instruct-q4_k_m"
        n_ctx = 1024
        [speculative]
        adaptive = false
        [[drafter]]
        type = "draft-model"
        model = "qwen2.5-coder-0.5b-instruct-q4_k_m"
        quantize = "q4_0"
        head = 32768
        """)
    with Engine.from_config(config) as engine:
        plain = engine.generate(CODE_GEN, speculative=False, max_tokens=96, track_margins=True)
        spec = engine.generate(CODE_GEN, max_tokens=96, track_margins=True)
        verdict = compare(plain, spec, engine)
        assert verdict.ok, str(verdict)
        stats = spec.stats.drafters["draft-model"]
        assert stats["note"] == "re-quantized to q4_0; output cut to the first 32768 tokens"
        assert spec.stats.acceptance_rate > 0.8 and spec.stats.tokens_per_pass > 3


def test_qwen_answers_the_example_prompt_from_the_cli():
    result = CliRunner().invoke(main, ["run", "--config", str(REPO / "config.example.toml"), "--prompt", CODE_GEN,
                                       "--max-tokens", "48", "--json"], catch_exceptions=False)
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert "def " in data["text"] and "prime" in data["text"].lower()
    drafters = data["stats"]["drafters"]
    assert set(drafters) == {"copy-cursor", "ngram-simple", "ngram-mod", "grammar", "draft-model"}
    assert drafters["draft-model"]["note"] == "re-quantized to q4_0" and drafters["draft-model"]["calls"] >= 1
    assert all(d["calls"] > 10 for name, d in drafters.items() if name != "draft-model")   # asked every step
    assert drafters["grammar"]["drafts"] == 0                  # no grammar: nothing forced


def median_ratio(table: PassCost, to: PassCost) -> float:
    """The median over multi-token sizes of what ``table`` says a pass costs in single passes against what ``to``
    says. In single passes: the gain rule weighs a draft's rate against plain decoding's, both priced by the table,
    so only its shape decides; and this CPU's speed drifts by a fifth within minutes (single passes of 69 and 85 ms
    in two calibrations back to back), which the seconds of two tables measured apart carry and their shapes do
    not."""
    return statistics.median((table.seconds(n) / table.seconds(1)) / (to.seconds(n) / to.seconds(1))
                             for n in range(2, 18))


def nearer_the_truth(table: PassCost, truths: tuple[PassCost, PassCost], poisoned: PassCost) -> bool:
    """Whether ``table`` is nearer one of ``truths`` (the tables measured before and after it) than ``poisoned`` is,
    on the median over sizes (halfway taken on a log scale: the poison is 2x where batches are cheap, but barely
    1.2x where a pass over k tokens costs nearly k single ones and the ceiling caps it). Both truths count: on the
    EPYC a 16-token pass has cost 7.2 single passes in one calibration and up to 9.6 single passes in the minutes
    after (docs/design.md, "The shape drifts too"), so a healed table can lie 1.4x from the one before it and match
    the one after."""
    return any(median_ratio(table, real) < median_ratio(poisoned, real) ** 0.5 for real in truths)


def test_a_poisoned_pass_cost_table_does_not_keep_speculation_off_on_qwen(write_config, caplog):
    """A stored table that says every pass costs twice what it does, up to 1.5 k single passes for k tokens
    (possible, so it loads, but no draft would pay): the next run verifies a likely draft anyway, sees the pass is
    far cheaper, measures the table again and speculates about as much as a run that had the healed table from its
    start. (Poisoned by a factor of the real costs, not as 1.5 k on every CPU: where a pass over k tokens really
    costs nearly k single ones, 1.5 k is hardly wrong. Compared with a run on the same healed table, not on the
    first measured one: where few drafts pay, as on a CPU whose batches cost nearly their tokens one by one, how many
    do swings with the noise of a measurement. Healing is judged on the median over sizes: one size measured again
    on a busy CPU can come out half again its quiet cost; and against how far the poison was from the first measured
    table, which the ceiling can bring near it. Both runs start from no acceptance memory, as the poisoned one does:
    the memory its run leaves made the clean run accept a tenth more on the EPYC.)"""
    config = write_config("""
        [target]
        model = "qwen2.5-coder-1.5b-instruct-q4_k_m"
        n_ctx = 2048
        [[drafter]]
        type = "prompt-lookup"
        [[drafter]]
        type = "ngram-simple"
        """)
    prompt = workload("code-editing").prompt
    with Engine.from_config(config) as engine:
        real = engine.calibrate()
        single = real.seconds(1)
        poisoned = PassCost({n: min(2 * real.seconds(n), 1.5 * n * single) if n > 1 else single
                             for n in range(1, 18)}, measured_at=time.time(), other_load=0.0)
        engine.pass_cost_store.path.write_text(poisoned.to_json())
    caplog.set_level(logging.INFO, logger="specframe")
    with Engine.from_config(config) as engine:
        result = engine.generate(prompt, max_tokens=200)
        healed = engine.pass_cost
        stored = engine.pass_cost_store.load()      # the healed table, or none where the CPU was too busy to store it
        # stored as measured without load, so that the next engine uses it whatever this CPU's load was
        engine.pass_cost_store.path.write_text(PassCost(healed.measured, measured_at=time.time(),
                                                        other_load=0.0).to_json())
    healing = [message for message in caplog.messages if "pass cost" in message]
    shutil.rmtree(memory_folder(), ignore_errors=True)
    with Engine.from_config(config) as engine:
        clean = engine.generate(prompt, max_tokens=200).stats      # how much pays with that table from the start
        truths = (real, engine.calibrate(reset=True))
    assert result.stats.calibration_seconds > 0 and nearer_the_truth(healed, truths, poisoned), \
        ([median_ratio(healed, t) for t in truths], median_ratio(poisoned, real), healed.measured)
    assert stored is None or nearer_the_truth(stored, truths, poisoned), \
        ([median_ratio(stored, t) for t in truths], median_ratio(poisoned, real), stored.measured)
    assert clean.n_accepted > 0 and result.stats.n_accepted >= 0.5 * clean.n_accepted, (
        f"accepted {result.stats.n_accepted} of {result.stats.n_drafted} in {result.stats.n_target_passes} passes "
        f"poisoned, {clean.n_accepted} of {clean.n_drafted} in {clean.n_target_passes} clean; healing: {healing}")


def test_a_repeated_request_is_drafted_from_what_ngram_mod_remembers_of_the_first(write_config):
    """ngram-mod keeps what earlier requests generated: asked the same again, the chain verifies its drafts of the
    first answer, long and right, where the first request found nothing to draft. (Before, the drafts it held back
    while its estimates grew were reported to ngram-mod as accepted only as far as the output went, which took five
    of them for poor ones and emptied the pool.)"""
    config = write_config("""
        [target]
        model = "qwen2.5-coder-1.5b-instruct-q4_k_m"
        n_ctx = 2048
        [[drafter]]
        type = "copy-cursor"
        [[drafter]]
        type = "ngram-mod"
        n_min = 8
        """)
    with Engine.from_config(config) as engine:
        # Framed by llama.cpp's built-in template, without Qwen's default system prompt: the Jinja template's prompt
        # meets a near-tie at the sixth token (num/number, a gap of 0.05), which batching breaks either way.
        prompt = engine.vocab.tokenize(engine.model.apply_chat_template([("user", workload("code-generation").prompt)]))
        first = engine.generate(prompt, max_tokens=128)
        again = engine.generate(prompt, max_tokens=128)
    # The second request's long verifications may break a near-tie the other way (lossless.py): ngram-mod knows the
    # first answer, so it is judged on the tokens both answers share.
    shared = common_prefix(np.asarray(first.tokens), np.asarray(again.tokens))
    remembered = again.stats.drafters["ngram-mod"]
    assert shared >= 32, (first.tokens, again.tokens)
    assert remembered["accepted_tokens"] >= 0.5 * shared, again.stats.as_dict()
    assert again.stats.n_target_passes <= first.stats.n_target_passes - 0.5 * shared, (first.stats.as_dict(),
                                                                                        again.stats.as_dict())


def test_a_draft_model_with_another_vocabulary_is_refused_without_token_mapping(write_config):
    config = write_config("""
        [target]
        model = "qwen2.5-coder-0.5b-instruct-q4_k_m"
        n_ctx = 512
        [[drafter]]
        type = "draft-model"
        model = "smollm2-135m-instruct-q4_1"
        token_mapping = "never"
        """)
    with Engine.from_config(config) as engine, pytest.raises(ModelError, match="vocabulary sizes differ"):
        engine.generate("hi", max_tokens=4)


@pytest.mark.parametrize("config", ["examples/token-mapping-smollm2.toml", "examples/token-mapping-gemma3.toml"],
                         ids=["smollm2-135m", "gemma3-270m"])
def test_a_draft_of_another_family_drafts_for_qwen_through_token_mapping(config, tmp_path):
    with Engine.from_config(with_fixed_lengths(REPO / config, tmp_path)) as engine:
        for prompt in (CODE_EDIT, CODE_GEN):
            plain = engine.generate(prompt, speculative=False, max_tokens=64, track_margins=True)
            spec = engine.generate(prompt, max_tokens=64, track_margins=True)
            verdict = compare(plain, spec, engine)
            assert verdict.ok, str(verdict)
            drafter = spec.stats.drafters["draft-model"]
            assert drafter["note"].startswith("token mapping:")
            assert spec.stats.acceptance_rate > 0.2 and spec.stats.tokens_per_pass > 1.3, spec.stats.as_dict()


def test_smollm_stops_at_end_of_generation_and_drafts_repetition(write_config):
    config = write_config("""
        [target]
        model = "smollm2-135m-instruct-q4_1"
        n_ctx = 1024
        [speculative]
        adaptive = false
        [[drafter]]
        type = "prompt-lookup"
        [[drafter]]
        type = "ngram-simple"
        n = 2
        m = 8
        """)
    with Engine.from_config(config) as engine:
        short = engine.generate("What is the capital of France? Answer in one word.", max_tokens=64)
        assert short.stop_reason == "eog" and "Paris" in short.text
        assert engine.vocab.eos not in short.tokens
        plain = engine.generate("Repeat exactly: alpha beta gamma delta", max_tokens=80, speculative=False,
                                track_margins=True)
        spec = engine.generate("Repeat exactly: alpha beta gamma delta", max_tokens=80, track_margins=True)
        assert compare(plain, spec, engine).ok
        assert spec.stats.n_accepted > 0 and spec.stats.tokens_per_pass > 1.5, spec.stats.as_dict()


NGRAM_FAMILY = ["ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def test_every_ngram_drafter_is_accepted_on_a_code_editing_prompt(tmp_path):
    """The draftless drafters at their defaults, from a config, on the real Qwen 1.5B target."""
    prompt = workload("code-editing").prompt
    with Engine.from_config(with_fixed_lengths(REPO / "examples/all-draftless.toml", tmp_path)) as engine:
        plain = engine.generate(prompt, speculative=False, max_tokens=160, track_margins=True)
        for name in NGRAM_FAMILY:
            result = engine.generate(prompt, max_tokens=160, drafters=[name], track_margins=True)
            stats = result.stats
            assert stats.n_drafts >= 2 and stats.acceptance_rate >= 0.5, (name, stats.as_dict())
            assert stats.drafters[name]["accepted_tokens"] == stats.n_accepted
            verdict = compare(plain, result, engine)
            assert verdict.ok, f"{name}: {verdict}"
        copying = {name: engine.generate(prompt, max_tokens=160, drafters=[name], track_margins=True)
                   for name in ("copy-cursor", "prompt-lookup")}
        for name, result in copying.items():
            assert result.stats.n_accepted > 0 and compare(plain, result, engine).ok, name
        # following its copy, copy-cursor resumes it after an edit where prompt lookup re-matches elsewhere
        assert copying["copy-cursor"].stats.tokens_per_pass >= copying["prompt-lookup"].stats.tokens_per_pass
        chain = engine.generate(prompt, max_tokens=160, track_margins=True)
        assert set(chain.stats.drafters) == set(NGRAM_FAMILY) | {"prompt-lookup", "copy-cursor"}
        assert compare(plain, chain, engine).ok


def test_qwen_pair_beside_three_other_requests_keeps_the_targets_greedy_output(tmp_path, together):
    """Four workloads decoded together in one context (a server's slots), each against its plain greedy answer:
    any divergence is at a near-tie, or the arithmetic of the passes the request shared (replayed)."""
    prompts = [workload(name).prompt for name in ("code-editing", "quoting", "code-generation", "open-prose")]
    with Engine(load_config(with_fixed_lengths(REPO / "config.example.toml", tmp_path)), slots=4) as engine:
        prompts = [engine.prompt_tokens(p) for p in prompts]
        plain = [engine.generate(p, speculative=False, max_tokens=64, track_margins=True) for p in prompts]
        batched = together(engine, prompts, max_tokens=64, traced=True)
        verdicts = [compare(alone, beside, engine) for alone, beside in zip(plain, batched)]
    assert all(verdict.ok for verdict in verdicts), [str(verdict) for verdict in verdicts]
    assert sum(r.stats.n_accepted for r in batched) > 0


LOGITS_OF_A_16_TOKEN_PASS = """
import hashlib, sys
import numpy as np
from specframe.engine import Engine
with Engine.from_config(sys.argv[1]) as engine:
    engine.context.choose_on_host(0, False)      # rows of logits, not greedy choices
    logits = engine.context.decode(np.arange(100, 116, dtype=np.int32), 0, all_logits=True)   # a view: read here
    print(hashlib.sha256(np.ascontiguousarray(logits).tobytes()).hexdigest())
"""


def test_cpu_tiled_matmul_reaches_ggml_in_the_engines_process(write_config):
    """The setting decides which kernels multiply Qwen's Q6_K weights over 16 rows: their rounding differs, while
    either is the same from run to run (the switch is read once per process, hence a process each)."""
    def digest(setting: str) -> str:
        config = write_config(f"""
            [target]
            model = "qwen2.5-coder-1.5b-instruct-q4_k_m"
            n_ctx = 256
            cpu_tiled_matmul = "{setting}"
            [speculative]
            enabled = false
            """, name=f"{setting}.toml")
        run = subprocess.run([sys.executable, "-c", LOGITS_OF_A_16_TOKEN_PASS, str(config)], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    off = digest("off")
    assert digest("on") != off == digest("off")
