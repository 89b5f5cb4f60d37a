"""``sobolev-index serve``: browse and search an index in a web browser."""
import click

from ._common import _note, _silent_option


@click.command()
@click.argument("index", type=click.Path())
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 serves other machines too.")
@click.option("--immutable", is_flag=True,
              help="Promise that nothing writes to INDEX while it is served (say, a copy on "
                   "read-only media): SQLite then takes no locks and never looks for changes. "
                   "A change made anyway reads as damage.")
@_silent_option
@click.option("--max-sql-work", type=click.IntRange(1), default=None, metavar="UNITS",
              help="Work the S_p functions of one SQL query may do (default 20,000,000).")
@click.option("--max-sql-value-bytes", type=click.IntRange(1, 1_000_000_000), default=None,
              metavar="BYTES", help="Largest string or blob a SQL query may read or make "
                                    "(default 1,048,576).")
def serve(index, port, host, immutable, silent, max_sql_work, max_sql_value_bytes):
    """Serve INDEX read-only with Datasette: a search page, document pages
    with neighbours and explanations, their JSON, and SQL with the S_p
    functions. Prints the search page's URL; Ctrl-C stops.

    Never writes to INDEX: other commands may add, delete or compact while
    it runs, and every page shows the latest commit when it was asked for.
    Needs the web extra:
    pip install "sobolev-index[web]".
    """
    from sobolev_index.web import serve as run

    def ready(url):
        click.echo(url)
        how = "immutable" if immutable else "read-only"
        _note(f"serving {how}; press Ctrl-C to stop", silent)

    run(index, host=host, port=port, on_ready=ready, immutable=immutable,
        max_sql_work=max_sql_work, max_sql_value_bytes=max_sql_value_bytes)
