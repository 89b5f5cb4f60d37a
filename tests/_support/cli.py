"""The ``sobolev-index`` command line, run in-process through click's CliRunner."""


def run(*args, input=None, ok=True):
    """Invoke the CLI with ``args`` (turned into strings); with ``ok``, assert
    that it exited 0 (the output and exception are in the message)."""
    from click.testing import CliRunner

    from sobolev_index.cli import main

    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    if ok:
        assert result.exit_code == 0, result.output + repr(result.exception)
    return result
