"""The README and the reference page (docs/reference.md) say what the code does: the reference's command lines name
every option each command has, and neither names one a command lacks; the README's drafter table gives the
built-in drafters and their defaults; the reference's config tables every key and its default."""

import dataclasses
import pathlib
import re
import sys

import click
import pytest

from specframe.cli import main
from specframe.config import _SECTIONS
from specframe.model_settings import ModelSettings
from specframe.plugins import load_plugins

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = pathlib.Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
REFERENCE = (REPO / "docs" / "reference.md").read_text()
MODEL_SETTINGS = {field.name for field in dataclasses.fields(ModelSettings)}
OPTION = re.compile(r"(?<![\w-])--?[a-z][\w-]*")


def usage_entries(page: str) -> list[tuple[click.Command, str]]:
    """Each command line a page shows (``    specframe ...``, with its ``[...]`` continuation lines): the command
    it runs and its text."""
    entries, lines = [], page.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("    specframe"):
            continue
        text = line
        for more in lines[i + 1:]:
            if not (more.startswith("     ") and more.lstrip().startswith("[")):
                break
            text += " " + more.strip()
        command = main
        for word in text.split()[1:]:
            if isinstance(command, click.Group) and word in command.commands:
                command = command.commands[word]
            elif not word.startswith("-"):
                break
        entries.append((command, text))
    return entries


def commands(command: click.Command = main):
    yield command
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from commands(sub)


def options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden]


def options_named(page: str, where: str) -> dict[click.Command, set[str]]:
    """The options each command's lines on ``page`` name, each checked to be one the command has (with its
    choices, where the line lists them)."""
    said: dict[click.Command, set[str]] = {}
    for command, text in usage_entries(page):
        known = {opt: option for option in options(command) for opt in option.opts}
        for token in OPTION.findall(text):
            assert token in known, (f"{where}: {text.strip().split('  ')[0]!r} names {token}, which the command "
                                    "does not have")
            said.setdefault(command, set()).add(known[token].name)
            choices = re.search(re.escape(token) + r" \[?([\w.]+(?:\|[\w.]+)+)", text)
            if choices and isinstance(known[token].type, click.Choice):
                assert set(choices[1].split("|")) == set(known[token].type.choices), text
    return said


def test_the_readme_s_command_lines_name_only_options_the_commands_have():
    assert usage_entries(README)          # its examples are checked too
    options_named(README, "README")


def test_the_reference_s_usage_lines_name_every_option_of_every_command():
    said = options_named(REFERENCE, "docs/reference.md")
    for command in commands():
        if options(command) or not isinstance(command, click.Group):
            expected = {option.name for option in options(command)}
            named = said.get(command, set())
            assert named == expected, (f"docs/reference.md: the usage of '{command.name}' names {sorted(named)}, "
                                       f"the command has {sorted(expected)}")


def drafter_rows() -> dict[str, str]:
    """The drafter table's rows: type -> its defaults cell."""
    return {m[1]: m[2] for m in re.finditer(r"^\| `([\w-]+)` \| [^|]+ \| ([^|]+) \|$", README, re.M)}


def test_the_drafter_table_has_every_built_in_type_and_its_defaults():
    types = load_plugins().drafter_types()
    rows = drafter_rows()
    assert set(rows) == set(types)
    for name, cell in rows.items():
        defaults = {f.name: f.default for f in dataclasses.fields(types[name].cls.Params)}
        if cell.strip() == "none":
            assert not defaults, f"README: {name} has parameters"
            continue
        for pair in cell.strip().split(", "):
            key, value = pair.split(" ")
            assert key in defaults and tomllib.loads(f"v = {value}")["v"] == defaults[key], f"README: {name}: {pair}"


def config_tables() -> dict[str, str]:
    """The comments beside each ``[section]`` of the reference's TOML blocks: section -> their text."""
    tables: dict[str, str] = {}
    for block in re.findall(r"```toml\n(.*?)```", REFERENCE, re.S):
        section = None
        for line in block.splitlines():
            heading = re.match(r"\[(\w+)\]\s*#(.*)", line)
            if heading and heading[1] in _SECTIONS:
                section = heading[1]
                tables[section] = heading[2]
            elif section and line.lstrip().startswith("#") and line.startswith(" "):
                tables[section] += " " + line.lstrip()[1:]
            else:
                section = None
    return tables


@pytest.mark.parametrize("section", _SECTIONS)
def test_the_config_tables_give_every_key_and_its_default(section):
    text = config_tables().get(section)
    assert text is not None, f"docs/reference.md: no [{section}] in a TOML block"
    said = dict(re.findall(r"\b(\w+) = (\"[^\"]*\"|\[[^\]]*\]|\{[^}]*\}|[-\w.]+)", text))
    for field in dataclasses.fields(_SECTIONS[section]):
        if field.name in MODEL_SETTINGS:
            continue   # in the model settings' own table
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            assert f"{field.name} (required)" in text, f"docs/reference.md: [{section}] {field.name} is required"
            continue
        default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
        assert field.name in said, f"docs/reference.md: [{section}] does not give {field.name}"
        assert tomllib.loads(f"v = {said[field.name]}")["v"] == default, (
            f"docs/reference.md: [{section}] {field.name} = {said[field.name]}, the default is {default!r}")


def test_the_model_settings_table_gives_every_setting():
    table = REFERENCE[REFERENCE.index("**Model settings**"):]
    table = table[:table.index("\n\n", table.index("| key |"))]
    first_cells = re.findall(r"^\| ([^|]*)\|", table, re.M)
    assert {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)} == MODEL_SETTINGS
