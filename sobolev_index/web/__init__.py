"""A web view of an index: a Datasette plugin (``plugin.py``) with search
and document pages and the S_p SQL functions, and :func:`serve`, which runs
Datasette on one index (``sobolev-index serve``).

Needs the ``[web]`` extra (``pip install "sobolev-index[web]"``): importing
this package loads nothing of Datasette; :func:`serve` and
:func:`make_datasette` import it when called. This layer sits above
``index`` and ``ingest``; nothing below imports it.
"""

__all__ = ["serve", "make_datasette", "WEB_INSTALL"]

WEB_INSTALL = 'pip install "sobolev-index[web]"'


def make_datasette(index_path, name=None, settings=None, immutable=False, max_sql_work=None,
                   max_sql_value_bytes=None):
    """A Datasette instance serving the catalog of the index at
    ``index_path`` read-only, with the plugin registered; see
    :func:`sobolev_index.web.server.make_datasette`."""
    from .server import make_datasette as make

    return make(index_path, name=name, settings=settings, immutable=immutable,
                max_sql_work=max_sql_work, max_sql_value_bytes=max_sql_value_bytes)


def serve(index_path, host="127.0.0.1", port=8001, on_ready=None, settings=None,
          immutable=False, max_sql_work=None, max_sql_value_bytes=None):
    """Serve the index at ``index_path`` until interrupted; see
    :func:`sobolev_index.web.server.serve`."""
    from .server import serve as run

    return run(index_path, host=host, port=port, on_ready=on_ready, settings=settings,
               immutable=immutable, max_sql_work=max_sql_work,
               max_sql_value_bytes=max_sql_value_bytes)
