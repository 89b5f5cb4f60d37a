"""The ``sobolev-index`` command line (installed as ``sobolev_index.cli``).

Commands hold no logic of their own: they parse options, call the Python
API, and print. Data goes to stdout (a table, or JSON with ``--json``);
progress bars and notes go to stderr. A library error becomes one
``Error: ...`` line with a hint and exit code 1.

This module holds the group, ``main``, and registers every command here,
in one place. The commands live in modules by group: ``build``, ``query``,
``maintain``, ``shard``, ``export``, ``serve`` and ``vectors``; what they
share (options, opening an index, output, the error funnel) is
``_common``. The directory is the repository's top-level ``cli/``,
installed as the subpackage ``sobolev_index.cli`` (see pyproject.toml), so
``from .. import`` in it reaches the library.
"""
import click

from .. import __version__
from . import build, export, maintain, query, serve, shard, vectors
from ._common import _Group

__all__ = ["main"]


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sobolev-index")
@click.option("--check", is_flag=True,
              help="Hash every segment file of an index when a command opens it, and refuse a "
                   "damaged one (graph.h5 is always checked). Reads the whole index first.")
@click.pass_context
def main(ctx, check):
    """Exact nearest-neighbour search for bags of words and points under
    Sobolev transport.

    Start with `sobolev-index quickstart DIR`, which builds an index from
    Python's own documentation and shows every command at work.
    """
    ctx.obj = {"check": check}


for command in (
    build.build, build.add, build.quickstart,
    query.search, query.get, query.distance, query.gram, query.knn_graph, query.duplicates,
    query.sql, query.explain,
    maintain.info, maintain.delete, maintain.compact, maintain.upgrade, maintain.verify,
    maintain.recover,
    shard.shard,
    export.export,
    serve.serve,
    vectors.vectors,
):
    main.add_command(command)

if __name__ == "__main__":  # pragma: no cover
    main()
