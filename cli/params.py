"""The command line's own parameter types and shared corpus options: values
checked while the command line is parsed, so that a bad one is a usage error
(exit 2, with the usage hint) like every other bad option."""
import math

import click

__all__ = ["P_ORDER", "ROOT_POSITIONS", "SECONDS", "columns_options", "columns",
           "refuse_columns", "parse_p", "parse_roots"]


class _POrder(click.ParamType):
    """-p: a number >= 1 or 'inf', checked while the command line is
    parsed, so that a bad value is a usage error (exit 2, with the usage
    hint) like every other bad option."""

    name = "P"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        if text.lower() in ("inf", "infinity"):
            return math.inf
        try:
            number = float(text)
        except ValueError:
            self.fail(f"{value!r} is not a number; expected p >= 1 or 'inf'", param, ctx)
        if not number >= 1:  # NaN too
            self.fail(f"{value!r}; expected p >= 1 (S_p is a metric for p >= 1) or 'inf'",
                      param, ctx)
        return number


class _RootPositions(click.ParamType):
    """--roots 0,2,3: positions into the index's roots."""

    name = "0,1,.."

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            # Every part a number: "1,,2" or "1," is a typo, not roots 1 and 2.
            positions = [int(v) for v in str(value).split(",")]
        except ValueError:
            self.fail(f"{value!r}; expected root positions like 0,2,3", param, ctx)
        return positions


P_ORDER = _POrder()
ROOT_POSITIONS = _RootPositions()


def parse_p(value):
    """-p as the library takes it (None: the index's own)."""
    return None if value is None else P_ORDER.convert(value, None, None)


def parse_roots(value):
    """--roots as the library takes it (None: all)."""
    return None if value is None else ROOT_POSITIONS.convert(value, None, None)


class _Seconds(click.ParamType):
    """A number of seconds >= 0 (NaN and infinity refused)."""

    name = "SECONDS"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not 0 <= seconds < math.inf:
            self.fail(f"{value!r}; expected a number of seconds >= 0", param, ctx)
        return seconds


SECONDS = _Seconds()


class _ColumnName(click.ParamType):
    """A column name (not blank); for the key, 'none' means no key column."""

    name = "NAME"

    def __init__(self, key=False):
        self.key = key

    def convert(self, value, param, ctx):
        if self.key and value == "none":
            return False
        if not isinstance(value, str) or not value.strip():
            self.fail(f"{value!r}; expected a column name", param, ctx)
        return value


def columns_options(command):
    """--key-column, --text-column and --label-column: which columns of a
    CSV or TSV file (or names of a JSON lines record) hold what."""
    for name, default in (("label", "label"), ("text", "text"),
                          ("key", "key, else id; none: the index names documents")):
        command = click.option(
            f"--{name}-column", f"{name}_column", default=None, metavar="NAME",
            type=_ColumnName(key=name == "key"),
            help=f"Column (CSV, TSV) or name (JSON lines) of each document's {name} "
                 f"[default: {default}].")(command)
    return command


def columns(key_column, text_column, label_column):
    """The columns options as the ingest layer takes them (None: defaults)."""
    given = {"key": key_column, "text": text_column, "label": label_column}
    return {part: name for part, name in given.items() if name is not None} or None


def refuse_columns(key_column, text_column, label_column, what):
    given = [f"--{part}-column" for part, name in
             (("key", key_column), ("text", text_column), ("label", label_column))
             if name is not None]
    if given:
        raise click.UsageError(f"{', '.join(given)} name columns of a corpus file; {what} "
                               "has none: leave them out")
