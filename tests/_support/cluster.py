"""A Dask LocalCluster for the tests of sharded indexes: two worker processes
of one thread each (the issue's test cluster, about 0.6 s to start).

A test module that uses it makes it a module-scoped fixture, so that it
starts once per module (and imports Dask only where the module has not
skipped for want of it)::

    @pytest.fixture(scope="module")
    def cluster():
        with local_cluster() as client:
            yield client

The client's scheduler address (``client.scheduler.address``) is what
``--scheduler`` takes.
"""
import contextlib


@contextlib.contextmanager
def local_cluster(n_workers=2):
    """A ``distributed.Client`` of a new LocalCluster of ``n_workers``
    processes with one thread each, closed on exit."""
    from distributed import Client, LocalCluster

    # A free port for the scheduler's HTTP server (which runs without the
    # dashboard too): two clusters at once do not both ask for 8787.
    with LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                      dashboard_address=":0") as local, Client(local) as client:
        yield client
