"""SobolevIndex: a persistent, incrementally updatable, exact k-NN index under S_p.

The class is a facade over the index's components, each in its own module:

- ``snapshot.py``: what a reader sees, one committed state (loaded at open
  and by ``refresh``), and the look-ups on it (``get``, ``features``, ...);
- ``writer.py``: adds, upserts, deletes and merges, for an index open for
  writing; ``merge_policy.py`` chooses what a merge takes;
- ``query.py``: searches (planned, executed, assembled) and the distances
  between stored documents; ``explain.py``: which edges carry a distance;
- ``verify.py`` and ``recover.py``: checking the files against the
  catalog, and adding back documents the catalog lost.

The files are ``storage.py``'s and the commit point ``catalog.py``'s, where
the on-disk protocol is described. What every kind of index (this one and
the sharded one) keeps in common is ``base.IndexBase``.
"""
import math
import os

import numpy as np

from ..distances import check_p
from ..errors import ADVICE, CorruptIndexError, NotAnIndexError, OlderFormatError
from ..graph import Graph
from . import storage
from .arguments import check_sample_size
from .base import IndexBase
from .catalog import Catalog
from .explain import Explain
from .query import Query
from .recover import recover_lost
from .results import SearchResult
from .snapshot import Snapshot
from .verify import VERIFY_SAMPLE, verify_index, verify_path
from .writer import Writer

__all__ = ["SobolevIndex", "SearchResult"]


class SobolevIndex(IndexBase):
    """A persistent exact k-nearest-neighbour index of measures under S_p.

    Create one with :meth:`create`, open one with :meth:`open`. A writer
    (mode "a") holds the directory's writer lock until :meth:`close`; readers
    (mode "r") work from the snapshot committed when they opened (see
    :meth:`refresh`); the writer does not wait for them, except briefly to
    delete merged-away files while a reader loads a snapshot.
    """

    _mismatch = (CorruptIndexError, "run verify()")

    def __init__(self, path, mode, catalog, lock, check=False):
        self.path = path
        self.mode = mode
        self._lock = lock
        self._closed = False
        # check=True: every segment is hashed when first loaded (see open).
        self._snap = Snapshot(path, mode, catalog, check)
        self._writer = Writer(self._snap) if mode == "a" else None
        self._query = Query(self._snap)
        self._explain = Explain(self._snap, self._query)
        try:
            self._load()
        except BaseException:
            self.close()
            raise

    def _load(self):
        # The unlisted-segments warning of a first load names the caller of
        # open(): Snapshot._warn_unlisted's stacklevel counts open, _opened,
        # __init__, this method and Snapshot.load between them.
        if self._writer is not None:
            self._writer.prepare()
        self._snap.load()

    # -------------------------------------------- the snapshot, as attributes
    p = property(lambda self: self._snap.p, doc="The default order p of searches.")
    roots = property(lambda self: self._snap.roots, doc="The root nodes of the trees.")
    eta = property(lambda self: self._snap.eta, doc="The roots' weights (summing to 1).")
    graph = property(lambda self: self._snap.graph, doc="The :class:`Graph`.")
    trees = property(lambda self: self._snap.trees, doc="One shortest-path tree per root.")
    generation = property(lambda self: self._snap.generation,
                          doc="A number that grows whenever the contents change.")
    # For the code that looks inside the snapshot (recover.py, the
    # reliability bench and tests): the catalog, the segments, and the edge
    # weights their inverted files take.
    _catalog = property(lambda self: self._snap.catalog)
    _segments = property(lambda self: self._snap.segments)
    _edge_weight = property(lambda self: self._snap.edge_weight)

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, on_violation="raise", seed=0):
        """Create an index at ``path`` (a new or empty directory) and open it for writing.

        ``roots``: None picks one central root; an int n picks n random roots;
        a list gives the root nodes. ``eta`` weighs the roots (equal by
        default). ``p`` is the default p of :meth:`search`.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"graph is {type(graph).__name__}; expected a sobolev_index.Graph")
        path = os.fspath(path)
        storage.require_new_directory(path)
        p = check_p(p)
        if roots is None:
            root_nodes, eta = graph.roots(1, strategy="center", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif isinstance(roots, (int, np.integer)) and not isinstance(roots, bool):
            if roots < 1:
                raise ValueError(f"roots is {roots}; give a number of roots >= 1 or a list of nodes")
            root_nodes, eta = graph.roots(int(roots), strategy="random", seed=seed, eta=eta,
                                          on_violation=on_violation)
        elif not isinstance(roots, (list, tuple, np.ndarray)):
            raise ValueError(f"roots is {roots!r}; expected None, a number of roots or a list of nodes")
        else:
            root_nodes, eta = graph.roots(None, strategy=list(roots), seed=seed, eta=eta,
                                          on_violation=on_violation)
        trees = graph.trees(root_nodes, on_violation=on_violation, seed=seed)
        return cls._create_with(path, graph, trees, root_nodes, eta, p)

    @classmethod
    def create_like(cls, path, source):
        """Create an empty index at ``path`` with the graph, shortest-path
        trees, roots, eta and p of ``source`` (an open index), and open it
        for writing.

        The trees are copied, not rebuilt: where shortest paths tie, the
        source broke the ties with lengths perturbed from the seed it was
        created with, which the index does not keep. The new graph file
        holds the source's arrays, written in this release's format (for a
        source in this format, the same file to the byte); so features, and
        therefore distances and search results, agree to the bit. The
        catalog's other meta values (what a build recorded) are not copied.
        """
        if not isinstance(source, SobolevIndex):
            raise TypeError(f"source is {type(source).__name__}; expected an open SobolevIndex")
        source._check_open()
        path = os.fspath(path)
        storage.require_new_directory(path)
        return cls._create_with(path, source.graph, source.trees, source.roots, source.eta,
                                source.p)

    @classmethod
    def _create_with(cls, path, graph, trees, root_nodes, eta, p):
        with storage.staged_directory(path, ".sobolev-index-") as staging:
            os.mkdir(os.path.join(staging, storage.SEGMENT_DIR))
            graph_checksum = storage.write_graph(staging, graph, trees)
            meta = {
                "format": storage.FORMAT_NAME,
                "format_version": storage.FORMAT_VERSION,
                "created_at": storage.utc_now(),
                "p": p if not math.isinf(p) else "inf",
                "n_nodes": graph.n_nodes,
                "n_edges": graph.n_edges,
                "dim": None if graph.coords is None else int(graph.coords.shape[1]),
                "graph": graph.params,
                "graph_checksum": graph_checksum,
                "next_doc_id": 1,
                "next_segment_id": 1,
            }
            Catalog.create(staging, meta, root_nodes, eta)
        return cls.open(path, mode="a")

    @classmethod
    def open(cls, path, mode="r", timeout=None, check=False):
        """Open an index for reading (``"r"``) or writing (``"a"``).

        A second writer raises :class:`IndexLockedError`, at once or after
        ``timeout`` seconds.

        Opening checks the graph file against its checksum (it reads the
        whole file anyway), and the segment files against the catalog's
        list: files no commit lists get a warning. ``check=True`` also
        hashes every segment file, as :meth:`verify` does (which checks
        much more besides), and a reader's :meth:`refresh` then hashes the
        segments it has not seen: this reads the whole index, so it costs
        about as much as reading it from disk. A damaged file is a
        :class:`CorruptIndexError` naming it.
        """
        if mode not in ("r", "a"):
            raise ValueError(f"mode is {mode!r}; expected 'r' (read) or 'a' (append/write)")
        if not isinstance(check, bool):
            raise ValueError(f"check is {check!r}; expected True or False")
        path = _index_directory(path)
        if mode == "a":
            _check_writable_format(path)
        return cls._opened(path, mode, timeout, check)

    @classmethod
    def _opened(cls, path, mode, timeout, check=False):
        lock = storage.WriterLock(path, timeout) if mode == "a" else None
        try:
            catalog = Catalog(path, readonly=(mode == "r"))
        except BaseException:
            if lock is not None:
                lock.release()
            raise
        return cls(path, mode, catalog, lock, check)

    @classmethod
    def upgrade(cls, path, timeout=None):
        """Rewrite an index written in an older format in this release's
        format, in place; a no-op on an index already in it.

        The catalog's format version is raised first (releases that cannot
        read the new format then refuse the index rather than misread it),
        then every segment of an older format is rewritten on its own, one
        commit each, without its deleted documents. Interrupted, it leaves a
        readable and writable index, and running it again finishes the job.
        Takes the writer lock (waiting up to ``timeout`` seconds). Returns
        ``{"path", "from_version", "to_version", "segments_rewritten",
        "documents"}``.
        """
        path = _index_directory(path)
        index = cls._opened(path, "a", timeout)
        with index:
            before = int(index._snap.meta["format_version"])
            if before != storage.FORMAT_VERSION:
                index._snap.catalog.set_meta({"format_version": storage.FORMAT_VERSION})
                index._snap.meta["format_version"] = storage.FORMAT_VERSION
            old = [s for s in index._snap.segments if s.data.version != storage.FORMAT_VERSION]
            for segment in old:
                index._writer.merge([segment])
            return {"path": os.path.abspath(path), "from_version": before,
                    "to_version": storage.FORMAT_VERSION, "segments_rewritten": len(old),
                    "documents": len(index)}

    def _release(self):
        if self._snap.catalog is not None:
            self._snap.catalog.close()
        if self._lock is not None:
            self._lock.release()

    def __repr__(self):
        state = "closed" if self._closed else self.mode
        return f"SobolevIndex({self.path!r}, {state}, documents={self._snap.n_live})"

    def refresh(self):
        """Reload the latest committed snapshot (readers; writers are always current)."""
        self._check_open()
        self._load()

    # ------------------------------------------------------------ inspection
    def __len__(self):
        return self._snap.n_live

    def __iter__(self):
        """The live keys, in insertion order."""
        self._check_open()
        return iter(self._snap.catalog.live_keys())

    def __contains__(self, key):
        self._check_open()
        return key in self._snap

    def existing_keys(self, keys):
        """The set of those of ``keys`` that are live documents: one look-up
        for many keys, where ``key in index`` is one each."""
        self._check_open()
        return self._snap.existing_keys(keys)

    @property
    def segments(self):
        """(id, rows, live rows) of each segment."""
        return [(s.id, s.rows, int(s.live.sum())) for s in self._snap.segments]

    def get(self, key):
        """The stored measure and metadata of ``key``.

        Returns a dict with ``key``, ``nodes``, ``masses`` (normalised to sum
        1, duplicates as given), ``label``, ``fields`` and ``added_at``.
        """
        self._check_open()
        return self._snap.get(key)

    def stored_measures(self, keys):
        """The measures of ``keys`` exactly as stored: a list of dicts with
        ``key``, ``id``, ``nodes`` (int64), ``masses`` (float64, the stored
        values, not divided by their sum again as :meth:`get`'s are) and
        ``label`` (copies: they outlive a merge of the segment). A query
        built from them has the very features the index holds for the key,
        to the last bit. KeyNotFoundError names the first key that is not
        live."""
        self._check_open()
        return self._snap.stored_measures(keys)

    def ids_and_keys(self):
        """(ids, keys) of the live documents in id order (insertion order,
        unless ids were given): an int64 array and a list of str."""
        self._check_open()
        return self._snap.ids_and_keys()

    def features(self, keys, root=0):
        """Stored features (CSR, one row per key) for root position ``root``."""
        self._check_open()
        return self._snap.features(keys, root)

    def info(self):
        """Counts and sizes: documents (live), deleted, segments, nodes,
        edges, roots, p, bytes on disk, and the graph's parameters; the
        format version, and how many segments are still in an older one
        (an index of an older release, or an interrupted upgrade)."""
        self._check_open()
        return self._snap.info()

    @property
    def catalog(self):
        """The SQLite catalog (``catalog.Catalog``): its ``db`` is a
        sqlite-utils Database on the index's connection."""
        self._check_open()
        return self._snap.catalog

    # --------------------------------------------------------------- writing
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add a batch of measures; all or nothing. Returns their keys.

        Once this returns, the batch is durable: a crash cannot lose it.

        ``ids``: the document ids to give the batch, for an index whose
        documents are numbered together with other indexes' (the shards of a
        sharded index share one insertion order this way): strictly
        increasing integers, the first at least :attr:`next_id`. By default
        the documents take the next ids in turn. Ids order the documents:
        ties in a search go to the lower id.
        """
        self._check_writable()
        return self._writer.write(measures, keys, labels, fields, upsert=False, ids=ids)

    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add measures, replacing live documents with the same keys (the new
        documents take new ids; ``ids`` as for :meth:`add`)."""
        if keys is None:
            raise ValueError("upsert needs keys: the documents to replace are found by key")
        self._check_writable()
        return self._writer.write(measures, keys, labels, fields, upsert=True, ids=ids)

    @property
    def next_id(self):
        """The id the next document added gets, unless told otherwise: above
        every id this index has given, deleted documents' included."""
        self._check_open()
        return int(self._snap.meta["next_doc_id"])

    def reserve_ids(self, next_id):
        """Make :attr:`next_id` at least ``next_id`` (committed): no id below
        it is given afterwards. A copy of an index (its documents added with
        their ids) takes the source's next id this way, so documents added
        to the copy without ids are numbered as the source would number
        them."""
        self._check_writable()
        self._writer.reserve_ids(next_id)

    def delete(self, keys):
        """Delete documents by key (tombstones, one transaction). Returns the count."""
        self._check_writable()
        return self._writer.delete(keys)

    def compact(self):
        """Drop deleted documents and merge the segments into one; past
        ``merge_policy.MAX_SEGMENT_NNZ`` nonzero features, merge runs of consecutive
        segments up to that cap instead (one commit per run)."""
        self._check_writable()
        self._writer.compact()

    def recover(self, dry_run=False, replace_newer=False):
        """Add again the documents of segment files no commit lists
        (writers only).

        A catalog that lost commits (its ``catalog.sqlite-wal`` deleted, or
        a copy made without it) no longer lists their segment files, and
        their documents drop out of the index. This moves such files from
        ``INDEX/segments/`` to ``INDEX/lost+found/`` (as
        ``verify(repair=True)`` does), then adds each document of the
        segment files in ``lost+found/`` under its key, label and fields,
        as a new document with a new id, except:

        - a document the catalog still has (its id with its key, live or
          deleted since) is left out;
        - a key that is live is left out, unless the lost version was added
          later than the live one and ``replace_newer`` is true (it then
          replaces it, as :meth:`upsert` does);
        - where a key is in several lost files, the version added last
          wins;
        - a document of a segment written before segments kept keys has no
          key to restore it under: it is reported by id.

        A writer killed between writing a segment and committing it leaves
        such a file too: its documents, never acknowledged, are restored as
        well. Files that cannot be read are reported. The files read then
        move to ``lost+found/recovered/``, so that a later recovery does not
        bring back documents deleted in between; nothing is removed.

        With ``dry_run``, nothing is moved or added: the report says what
        would be.

        Returns a dict: ``restored`` (``key``, ``id`` (the document's id in
        its file), ``file``, ``replaced``), ``skipped`` (``key``, ``id``,
        ``file``, ``reason``), ``unreadable`` (``file``, ``reason``),
        ``files`` (read), ``moved`` (from segments/) and ``dry_run``.
        """
        self._check_writable()
        return recover_lost(self, dry_run=bool(dry_run), replace_newer=bool(replace_newer))

    # ------------------------------------------------------------- searching
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        """Exact k nearest neighbours under S_p (sliced over the index's roots),
        or every document within a radius.

        ``queries``: (nodes, masses) pairs, a sparse matrix of node masses, a
        stored key, or a list of stored keys. ``k``: neighbours per query
        (default 10). ``roots``: positions into ``self.roots`` to use
        (default all), their eta renormalised. ``where``:
        ``{"label": value_or_list}`` and/or ``{"keys": [...]}`` restricts the
        candidates. ``k`` larger than the number of live documents returns
        them all. Returns a :class:`SearchResult`. Ties go to the lower
        document id (the earlier document), except that a stored key used
        as a query comes first among the documents at distance 0 from it.

        ``radius``: instead of k neighbours, every live document (under
        ``where``) at distance at most ``radius`` from each query, nearest
        first; ``inf`` returns them all. A document at the very distance a
        search reported is within that radius, and ``radius=0`` finds the
        copies of the query: documents with its masses on its nodes, given
        in the same order (as the text and point pipelines give them). The
        same measure given with its nodes in another order may differ in the
        last bits of its normalised masses: ``radius=1e-12`` finds it too.
        The search prunes with the
        radius from the start, as it would with a k-th distance. ``limit``
        caps the results per query, and with them the memory a search
        holds: when more documents lie within the radius, the ``limit``
        nearest are kept and ``truncated[i]`` says so. ``k`` and ``radius``
        cannot be given together (``limit`` is a radius search's k).

        ``radius`` may also be a 1-D list or array of one radius per query
        (each >= 0, inf allowed): query i then finds what a search of it
        alone with ``radius[i]`` finds. With a ``limit`` of k this is the k
        nearest within a bound per query: the first entries of the k-NN
        result whose distance is at most the query's bound (for instance
        the k-th distance another index already found for it).
        ``SearchResult.radius`` is then a float64 array of the radii. A
        radius of the wrong shape or length, or a value that is NaN or
        negative, raises a ValueError before the search runs.

        ``SearchResult.ids`` holds the document ids of the results,
        mirroring ``keys``. ``stats=True`` adds per-query statistics and
        phase times to ``SearchResult.stats``.

        ``candidates``: an approximate k-NN search, for indexes with several
        roots. The ``candidates`` nearest documents on the first
        ``candidate_roots`` searched roots (default 2) are found exactly,
        then ranked by S_p over all searched roots, and the k nearest of
        them returned with their exact distances. It costs about what a
        search of ``candidate_roots`` roots costs, plus the ranking; a true
        neighbour is missed when it is not among the candidates.
        ``SearchResult.certified[i]`` says when query i's answer is
        provably exact. docs/benchmarks.md gives recall against time.
        """
        self._check_open()
        return self._query.search(queries, k, p, roots, where, n_threads, radius, limit, stats,
                                  candidates, candidate_roots)

    def distance(self, a, b, p=None, roots=None):
        """S_p (sliced over ``roots``, default all) between two stored keys or
        (nodes, masses) measures, from a direct sparse difference: exact even
        for nearly equal measures."""
        self._check_open()
        return self._query.distance(a, b, p, roots)

    def pairwise(self, keys, other_keys=None, p=None, roots=None, n_threads=None):
        """Matrix of S_p between stored documents: ``keys`` x ``other_keys``
        (``keys`` with themselves by default; then exactly symmetric with a
        zero diagonal)."""
        self._check_open()
        return self._query.pairwise(keys, other_keys, p, roots, n_threads)

    def keys_with_labels(self, labels):
        """Live keys whose label is one of ``labels``, in insertion order."""
        self._check_open()
        return self._snap.keys_with_labels(labels)

    def gram(self, keys=None, labels=None, p=None, roots=None, t=None, power=False,
             n_threads=None):
        """Distance matrix (or kernel exp(-t d) with ``t``) of stored documents.

        The documents are ``keys`` plus every live document with one of
        ``labels``. ``power=True`` uses d = sum_r eta_r S_p^p, which keeps
        exp(-t d) positive definite for p <= 2. Returns (matrix, keys, labels).
        """
        self._check_open()
        return self._query.gram(keys, labels, p, roots, t, power, n_threads)

    def explain(self, a, b, p=None, top=10, roots=None, n_words=5):
        """The subtrees (edges of the shortest-path trees) that carry most of S_p(a, b).

        ``a`` and ``b``: stored keys or (nodes, masses) measures, as for
        :meth:`distance`. ``top``: how many groups, and how many (root,
        edge) pairs, to list, by decreasing share (None lists every one
        with a nonzero difference). ``roots``: positions into
        ``self.roots`` (default all), their eta renormalised. ``n_words``:
        how many nodes, and words, to list per measure and row.

        Each edge's share is its part of the distance: with one root, its
        term of S_p^p over S_p^p; over several roots, each root's part
        eta_r S_p^(r) is split among its edges in proportion to their terms,
        so that the shares of all edges sum to 1 and
        sum_r eta_r (sum of root r's terms)^(1/p) is the distance. At
        p = inf the edge with a root's largest difference carries that
        root's whole part (split equally among ties) and the other edges a
        share of 0.

        The same node v names an edge in every root's tree, so the pairs
        are grouped by v (``Explanation.groups``: one row per node,
        its share the sum of its pairs' shares, listed by decreasing share);
        ``Explanation.edges`` keeps the top pairs one by one. See
        :class:`Explanation` for the fields.

        For a text index, each row lists the words of each measure's nodes
        in its subtree, the node with the most mass first (from the
        catalog's words table; a node that stands for several words, in a
        clustered graph, lists them all, most frequent first, since a
        measure keeps its mass per node, not per word). For a point index
        (node coordinates, no words) it gives the coordinates of the edge's
        two nodes. Returns an :class:`Explanation`.
        """
        self._check_open()
        return self._explain.explain(a, b, p, top, roots, n_words)

    # ---------------------------------------------------------------- verify
    @classmethod
    def verify_path(cls, path, repair=False, sample=VERIFY_SAMPLE, seed=0, timeout=None):
        """:meth:`verify` for the index at ``path``, without opening it:
        reads the catalog and the graph but loads no segment, so an index
        that cannot be opened (a segment missing or damaged, a damaged graph
        or catalog) gets a report rather than an exception. ``repair=True``
        takes the writer lock (waiting up to ``timeout`` seconds)."""
        path = _index_directory(path)
        sample = check_sample_size(sample)
        return verify_path(path, repair=bool(repair), sample=sample, seed=seed, timeout=timeout)

    def verify(self, repair=False, sample=VERIFY_SAMPLE, seed=0):
        """Check files against the catalog; report problems instead of raising.

        Checks the catalog (SQLite's integrity check, text that does not
        decode, agreement between its tables and with the segments), the
        graph file and every segment's checksum, that each document points
        at its own row and each segment row is a listed document; every
        row's stored normalising factor (against its masses) and row norms
        (against the stored values), and each root's count of postings
        (against the rows' features); and that the inverted file holds the
        features of up to ``sample`` rows per segment, rebuilt from their
        measures (format 2: also the stored features, bit for bit).

        Temporary files and the files of segments a merge replaced are
        listed as ``orphans``. Other segment files no commit lists are
        problems, listed under ``unlisted`` with their document counts: a
        writer killed before its commit leaves one, and so does a catalog
        that lost commits (a deleted ``catalog.sqlite-wal``), in which case
        they hold acknowledged documents. ``repair=True`` (writers only)
        removes the orphans and moves the unlisted files to
        ``INDEX/lost+found/`` (``moved``); nothing is deleted that might
        hold data. A reader verifies the latest commit, through a
        connection of its own, and keeps its snapshot.
        """
        self._check_open()
        sample = check_sample_size(sample)
        if repair:
            self._check_writable()
        if self.writable:
            return verify_index(self.path, self._snap.catalog, self.trees, self.graph.n_nodes,
                                sample=sample, seed=seed, repair=repair)
        latest = Catalog(self.path, readonly=True)
        try:
            # Pinned like a snapshot load: a merge meanwhile leaves the files
            # this commit names in place (the writer defers their deletion).
            with storage.files_pinned(self.path):
                return verify_index(self.path, latest, self.trees, self.graph.n_nodes,
                                    sample=sample, seed=seed, repair=False)
        finally:
            latest.close()


def _index_directory(path):
    """``path`` as a str, or NotAnIndexError unless it is an index directory
    (checked before a writer takes the lock, which would create a file)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        if os.path.exists(path):
            raise NotAnIndexError(f"{path} is a file, not a sobolev-index directory")
        raise NotAnIndexError(f"{path} does not exist; create an index there first")
    if not os.path.isfile(os.path.join(path, storage.CATALOG)):
        raise NotAnIndexError(
            f"{path} is not a sobolev-index directory: it has no {storage.CATALOG}"
        )
    return path


def _check_writable_format(path):
    """OlderFormatError unless the index at ``path`` is in the format this
    release writes (checked before the writer lock is taken)."""
    probe = Catalog(path, readonly=True)
    version = probe.format_version
    probe.close()
    if version != storage.FORMAT_VERSION:
        raise OlderFormatError(
            f"{path} is in format version {version}, which an older release wrote; this "
            f"release reads it but writes format {storage.FORMAT_VERSION} only. Rewrite it "
            f"{ADVICE['upgrade']}, {ADVICE['read_as_is']}")
