"""The command line's layout: ``cli/`` installed as ``sobolev_index.cli``,
every command defined in its group's module and registered on ``main``.

The console script is checked the way an installation runs it: the entry
point named in the package's metadata (or, in a tree without metadata,
pyproject.toml's ``[project.scripts]``), started in a child process, must
run ``sobolev_index.cli.main``. The modules read are those of the package
under test: ``cli/`` in a source tree, the installed ``sobolev_index/cli``
when CI runs a copy of tests/ against a wheel (no ``cli/`` beside it).
"""
import ast
import importlib
import importlib.metadata
import os
import pkgutil
import re
import subprocess
import sys

import click
from _support import REPO_DIR

import sobolev_index.cli
from sobolev_index.cli import main

# realpath: in a source tree, sobolev_index/cli may be a link to cli/
CLI_DIR = os.path.dirname(os.path.realpath(sobolev_index.cli.__file__))
MAX_LINES = 800


def _console_script():
    """The 'sobolev-index' entry point: 'module:function'."""
    try:
        found = [ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
                 if ep.name == "sobolev-index"]
    except Exception:  # no metadata for a plain source tree
        found = []
    if found:
        return found[0]
    with open(os.path.join(REPO_DIR, "pyproject.toml"), encoding="utf-8") as handle:
        text = handle.read()
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return re.search(r'^sobolev-index\s*=\s*"([^"]+)"', text, re.M).group(1)
    return tomllib.loads(text)["project"]["scripts"]["sobolev-index"]


def test_the_cli_is_the_package_sobolev_index_cli():
    library = os.path.dirname(os.path.realpath(sobolev_index.__file__))
    if library == os.path.realpath(os.path.join(REPO_DIR, "sobolev_index")):
        expected = os.path.join(REPO_DIR, "cli")  # a source tree: the top-level cli/
    else:
        expected = os.path.join(library, "cli")  # an installation: the subpackage
    assert CLI_DIR == os.path.realpath(expected)
    assert isinstance(main, click.Group)


def test_the_console_script_runs_cli_main(tmp_path):
    module, function = _console_script().split(":")
    assert callable(getattr(importlib.import_module(module), function))
    # In a child, as the installed script runs: sobolev_index.cli.main is
    # replaced by a stand-in, which the script must call.
    code = (f"import sobolev_index.cli as cli\n"
            f"called = []\n"
            f"cli.main = lambda **kw: called.append(kw)\n"
            f"import {module} as script\n"
            f"script.{function}()\n"
            f"assert called == [{{'prog_name': 'sobolev-index'}}], called\n"
            f"print('ran main')\n")
    # Run from a neutral folder: from the checkout's root, ``python -c``
    # would import the source tree, whose compiled modules an installation
    # does not build in place.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran main"


def _commands_defined():
    """{command name: module} of every click command defined in cli/ (by
    its decorator, read from the source)."""
    out = {}
    for name in sorted(os.listdir(CLI_DIR)):
        if not name.endswith(".py"):
            continue
        module = name[:-3]
        tree = ast.parse(open(os.path.join(CLI_DIR, name), encoding="utf-8").read())
        for node in tree.body:
            for deco in getattr(node, "decorator_list", []):
                call = deco if isinstance(deco, ast.Call) else None
                target = ast.unparse(call.func if call else deco)
                if target.endswith(".command") or target.endswith(".group"):
                    command = node.name.replace("_", "-")
                    if call and call.args and isinstance(call.args[0], ast.Constant):
                        command = call.args[0].value
                    out[command] = module
    return out


def test_every_command_defined_is_registered_on_main():
    defined = _commands_defined()
    defined.pop("main", None)  # the group itself (cli/__init__.py)
    assert defined, "no command found in cli/"
    assert set(main.commands) == set(defined), (
        sorted(set(defined) - set(main.commands)), sorted(set(main.commands) - set(defined)))
    for name, command in main.commands.items():
        where = command.callback.__module__
        assert where == f"sobolev_index.cli.{defined[name]}", (name, where)


def _command_objects():
    """{click command object: module name} of every command a module of the
    package defines (its callback is that module's), imported as users get it."""
    out = {}
    for found in pkgutil.iter_modules(sobolev_index.cli.__path__):
        module = importlib.import_module(f"sobolev_index.cli.{found.name}")
        for value in vars(module).values():
            if isinstance(value, click.Command) and value.callback is not None \
                    and value.callback.__module__ == module.__name__:
                out[value] = found.name
    return out


def test_every_command_object_is_the_one_registered():
    # The objects themselves: a command defined in a module but not added
    # to main, or a second copy registered in its place, fails here.
    defined = set(_command_objects())
    assert defined, "no command object found in sobolev_index.cli"
    registered = set(main.commands.values())
    assert defined == registered, (
        sorted(c.name for c in defined - registered), sorted(c.name for c in registered - defined))


def test_init_holds_main_only():
    defined = _commands_defined()
    assert [name for name, module in defined.items() if module == "__init__"] == ["main"]


def test_no_module_of_the_cli_is_too_long():
    for name in os.listdir(CLI_DIR):
        if name.endswith(".py"):
            with open(os.path.join(CLI_DIR, name), encoding="utf-8") as handle:
                n = sum(1 for _ in handle)
            assert n <= MAX_LINES, f"cli/{name} has {n} lines; keep modules under {MAX_LINES}"
