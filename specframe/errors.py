"""Errors that reach the user as one clear line, never as a traceback."""


class SpecframeError(Exception):
    """An error whose message alone tells the user what is wrong and what was expected."""


class ConfigError(SpecframeError):
    """A configuration file, key or value is wrong."""


class ModelError(SpecframeError):
    """A model cannot be found, fetched, loaded or used as asked."""
