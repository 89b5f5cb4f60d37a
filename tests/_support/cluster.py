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
    import dask
    from distributed import Client, LocalCluster

    # A worker that a test kills is restarted by its nanny; LocalCluster
    # closes that nanny for good if no worker of its name has registered
    # within the lost-worker timeout (15 s), which a loaded 2-core machine
    # can exceed while the new process starts. The scheduler's HTTP server
    # (which runs without the dashboard too) takes a free port: two
    # clusters at once do not both ask for 8787.
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "120s"}), \
            LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                         dashboard_address=":0") as local, Client(local) as client:
        yield client
