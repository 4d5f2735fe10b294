"""Errors that reach the user as one clear line, never as a traceback."""


def printable(text: str) -> str:
    """``text`` with its control characters escaped (a newline in a key becomes ``\\n``): keeps a message that
    quotes user input to one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class SpecframeError(Exception):
    """An error whose message alone tells the user what is wrong and what was expected."""


class ConfigError(SpecframeError):
    """A configuration file, key or value is wrong."""


class ModelError(SpecframeError):
    """A model cannot be found, fetched, loaded or used as asked."""


class ParamError(SpecframeError):
    """A setting cannot be honoured: a drafter's parameter, or a model setting (a GPU the build does not have);
    the config loader or the engine reports it as a ConfigError naming the file and the key."""

    def __init__(self, key: str, problem: str):
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem
