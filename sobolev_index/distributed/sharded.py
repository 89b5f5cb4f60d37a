"""ShardedIndex: one exact k-NN index over S ordinary SobolevIndex shards.

The shards share one graph, roots and eta; a key always goes to the shard
its stable hash names (``manifest.route``), so each shard's own duplicate
check keeps keys unique across shards. Document ids are global: each
document takes the next id of one sequence, committed with it by its shard,
so ids order the documents as a single index given the same calls orders
them. A search sends the query batch to every shard (in this process, or as
tasks on the Dask workers that hold the shards, see ``shards.py`` and
``dask_shards.py``) and merges their top k on the client, by distance, ties
by id. A write sends each shard its part (``writes.py`` settles one that
failed in some shards); the manifest and its checks are in ``manifest.py``,
the Gram matrices in ``gram.py``.
"""
import math
import os
import time
import warnings

import numpy as np

from ..distances import check_p
from ..errors import (
    DuplicateKeyError,
    InvalidMeasureError,
    KeyNotFoundError,
    SobolevIndexError,
    add_note,
)
from ..graph import Graph
from ..index import SobolevIndex, storage
from ..index.arguments import (
    check_room,
    check_str_keys,
    check_where,
    checked_candidates,
    checked_column,
    checked_ids,
    checked_keys,
    checked_search_args,
    json_fields,
    keys_to_delete,
    radius_for_queries,
)
from ..index.base import IndexBase
from ..index.results import (
    SearchResult,
    admitted,
    merge_hits,
    own_key_first,
    padded,
    summed_stats,
)
from ..measures import MeasureBatch, as_measure_batch
from . import shards as tasks
from .dask_shards import DaskShards
from .errors import ShardError
from .manifest import (
    check_agrees,
    new_manifest,
    read_manifest,
    route,
    shard_name,
    sharded_invariants,
    write_manifest,
)
from .shards import checked_task_timeout
from .writes import rows_of, settle

__all__ = ["ShardedIndex"]

# Rows and columns of a block of distance_matrix: 4096^2 float64, 128 MiB.
GRAM_CHUNK = 4096
# Errors a shard raises for the search's arguments: the same on a rerun.
_INPUT_ERRORS = (ValueError, TypeError, KeyError)


class ShardedIndex(IndexBase):
    """An exact k-NN index of measures under S_p split over S shards.

    Create one with :meth:`create`, open one with :meth:`open`. Each shard
    is an ordinary :class:`SobolevIndex` directory (open it, verify it,
    search it on its own); the sharded index adds a manifest (shard
    directories, routing rule, graph checksum, roots, eta) and numbers the
    documents of all shards with one sequence of ids (each shard commits a
    document's id with it). Reads and writes have the signatures and
    results of :class:`SobolevIndex`, and searches return what a single
    index holding the same documents returns: the same keys, distances and
    labels, ties in the same order.

    Writes that span shards are **not atomic across shards**: each shard
    commits its part of a batch on its own. When some parts fail, the others
    stay committed and :class:`ShardedWriteError` lists exactly which keys
    were committed (``committed``) and why the others were not (``failed``).

    With ``client=None`` the shards are opened in this process and searched
    on threads; with a ``dask.distributed.Client`` each shard is opened on a
    worker and stays there, and the work goes to it as tasks. On Dask every
    operation waits at most ``task_timeout`` seconds (see :meth:`open`) and
    then raises :class:`ShardError`: it never hangs when workers die.
    """

    kind = "sharded index"
    _mismatch = (SobolevIndexError, "a writer changed the index meanwhile, or run verify()")

    def __init__(self, path, mode, manifest, placement, lock, client, next_id, task_timeout):
        self.path = path
        self.mode = mode
        self.client = client
        self.task_timeout = task_timeout
        self._manifest = manifest
        self._placement = placement
        self._lock = lock
        # The id the next document gets.
        self._next_id = next_id
        self.p = check_p(math.inf if manifest["p"] == "inf" else manifest["p"])
        self.roots = np.asarray(manifest["roots"], dtype=np.int64)
        self.eta = np.asarray(manifest["eta"], dtype=np.float64)
        self.n_nodes = int(manifest["n_nodes"])
        self.shard_paths = [os.path.join(path, name) for name in manifest["shards"]]
        # Last: until here, close() (and __del__) leaves the resources to
        # the caller that releases them (open's except).
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    @classmethod
    def create(cls, path, graph, roots=None, eta=None, p=1, shards=2, on_violation="raise",
               seed=0, client=None, task_timeout=tasks.TASK_SECONDS):
        """Create a sharded index of ``shards`` shards at ``path`` (a new or
        empty directory) and open it for writing.

        ``roots``, ``eta``, ``p``, ``on_violation`` and ``seed`` are those of
        :meth:`SobolevIndex.create`, for the first shard, which chooses the
        roots and builds the shortest-path trees; the others are made with
        :meth:`SobolevIndex.create_like` from it, so every shard holds the
        same graph file to the byte (trees copied, not rebuilt: where
        shortest paths tie, every shard breaks the ties as the first did,
        whatever the seed). ``client`` and ``task_timeout``: see :meth:`open`.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"graph is {type(graph).__name__}; expected a sobolev_index.Graph")
        p = check_p(p)

        def first(shard_path):
            return SobolevIndex.create(shard_path, graph, roots=roots, eta=eta, p=p,
                                       on_violation=on_violation, seed=seed)

        return cls._create(path, shards, first, client, task_timeout)

    @classmethod
    def create_like(cls, path, source, shards=2, client=None,
                    task_timeout=tasks.TASK_SECONDS):
        """Create an empty sharded index of ``shards`` shards at ``path`` with
        the graph, shortest-path trees, roots, eta and p of ``source`` (an
        open :class:`SobolevIndex`, or the path of one), and open it for
        writing. Every shard is made with :meth:`SobolevIndex.create_like`:
        its graph file is the source's, to the byte, so searches give the
        source's distances exactly. The catalog's other meta values (text
        settings, recipe) are not copied; :func:`shard_index` copies them
        with the documents."""
        if isinstance(source, SobolevIndex):
            return cls._create(path, shards, lambda p: SobolevIndex.create_like(p, source),
                               client, task_timeout)
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"source is {type(source).__name__}; expected an open SobolevIndex "
                            "or the path of one")
        with SobolevIndex.open(source, mode="r") as opened:
            return cls._create(path, shards, lambda p: SobolevIndex.create_like(p, opened),
                               client, task_timeout)

    @classmethod
    def _create(cls, path, shards, make_first, client, task_timeout):
        """The sharded index at ``path``: shard 0 from ``make_first(its
        path)`` (an open SobolevIndex), shards 1..S-1 like it."""
        if isinstance(shards, bool) or not isinstance(shards, (int, np.integer)) or shards < 1:
            raise ValueError(f"shards is {shards!r}; expected a number of shards >= 1")
        task_timeout = checked_task_timeout(task_timeout)
        shards = int(shards)
        path = os.fspath(path)
        storage.require_new_directory(path)
        # Built beside path and renamed into place, as a single index is.
        with storage.staged_directory(path, ".sobolev-sharded-") as staging:
            with make_first(os.path.join(staging, shard_name(0))) as first:
                made = tasks.describe_index(first)
                n_nodes, p = int(first.graph.n_nodes), first.p
                for i in range(1, shards):
                    # create_like writes the first shard's graph and trees
                    # (the same file, both in this format); the checksum,
                    # roots and eta are checked here.
                    with SobolevIndex.create_like(os.path.join(staging, shard_name(i)),
                                                  first) as shard:
                        check_agrees(i, os.path.join(path, shard_name(i)),
                                     tasks.describe_index(shard), made, "shard 0")
            manifest = new_manifest(shards, made["graph_checksum"], made["roots"],
                                    made["eta"], p)
            manifest["n_nodes"] = n_nodes
            write_manifest(staging, manifest)
        return cls.open(path, mode="a", client=client, task_timeout=task_timeout)

    @classmethod
    def open(cls, path, mode="r", client=None, timeout=None, task_timeout=tasks.TASK_SECONDS):
        """Open a sharded index for reading (``"r"``) or writing (``"a"``).

        ``client``: None opens the shards in this process; a
        ``dask.distributed.Client`` opens each shard inside a task on one of
        its workers (``shard-{i}-{version}``, movable to another worker if
        that one dies), and runs searches and writes as tasks there. A
        writer holds ``write.lock`` of the sharded index (waiting up to
        ``timeout`` seconds) and, on the workers, each shard's.

        ``task_timeout`` (seconds, default 600; only on Dask): how long one
        operation (opening, a search, a write, ``len``, ...) waits for the
        shards' tasks. Workers that die are replaced by Dask (a nanny
        restarts them, or new ones join): the shards are opened again on
        them and the tasks run again, so a search still returns the exact
        answer if that happens in time. Past the bound, the tasks not
        answered are cancelled and the call raises :class:`ShardError`
        naming the shards (``shards``) and why: no workers left, workers
        that died and were not replaced in time, or tasks still running. A
        write that got no answer from some shards then asks them what they
        committed, within another ``task_timeout``, and raises
        :class:`ShardedWriteError` (see :meth:`add`). The default is far
        above the time of any batch on a working cluster, and finite.

        Raises :class:`ShardError` naming the first shard that cannot be
        opened (or did not open in time), or whose graph, roots or eta
        differ from the manifest's.
        """
        if mode not in ("r", "a"):
            raise ValueError(f"mode is {mode!r}; expected 'r' (read) or 'a' (append/write)")
        task_timeout = checked_task_timeout(task_timeout)
        path = os.fspath(path)
        manifest = read_manifest(path)
        lock = storage.WriterLock(path, timeout) if mode == "a" else None
        placement = None
        try:
            paths = [os.path.join(path, name) for name in manifest["shards"]]
            if client is None:
                placement = tasks.LocalShards(paths, mode)
            else:
                placement = DaskShards(client, paths, mode, task_timeout)
            with placement.bounded():
                failed = placement.open()
                described = {}
                if not failed:
                    described = placement.map(tasks.describe,
                                              {i: () for i in range(len(paths))})
                    failed = {i: exc for i, exc in described.items()
                              if isinstance(exc, Exception)}
            if failed:
                i = min(failed)
                exc = failed[i]
                if isinstance(exc, ShardError):  # no answer in time: names every such shard
                    add_note(exc, f"(opening the sharded index {path})")
                    raise exc
                others = f" (and {len(failed) - 1} other shard(s))" if len(failed) > 1 else ""
                raise ShardError(f"shard {i} of {path} ({paths[i]}) cannot be opened{others}: "
                                 f"{exc}", i, paths[i], exc) from exc
            for i in range(len(paths)):
                check_agrees(i, paths[i], described[i], manifest, "the manifest")
            # One above the largest id any shard has given.
            next_id = max(described[i]["next_id"] for i in range(len(paths)))
            # Inside the try: a failure here releases the shards and the
            # lock too.
            opened = cls(path, mode, manifest, placement, lock, client, next_id, task_timeout)
        except BaseException:
            if placement is not None:
                placement.close()
            if lock is not None:
                lock.release()
            raise
        return opened

    def _release(self):
        try:
            self._placement.close()
        finally:
            if self._lock is not None:
                self._lock.release()

    def __repr__(self):
        state = "closed" if self._closed else self.mode
        where = "local" if self.client is None else "dask"
        return f"ShardedIndex({self.path!r}, {state}, shards={self.shards}, {where})"

    @property
    def shards(self):
        """The number of shards."""
        return len(self.shard_paths)

    def shard_of(self, key):
        """The shard number that holds (or would hold) ``key``."""
        check_str_keys([key])
        return route(key, self.shards)

    def refresh(self):
        """Move every shard to its latest commit (readers)."""
        self._check_open()
        with self._placement.bounded():
            self._raise_failed(self._placement.map(tasks.refresh, self._every_shard()),
                               "refresh")
            described = self._raise_failed(
                self._placement.map(tasks.describe, self._every_shard()), "refresh")
        self._next_id = max(d["next_id"] for d in described.values())

    # ---------------------------------------------------------------- checks
    def _every_shard(self, *args):
        return {i: args for i in range(self.shards)}

    def _raise_failed(self, results, what):
        """The results by shard, or the first shard's error (a note names the
        shard): bad input raises the same error in every shard."""
        for i in sorted(results):
            exc = results[i]
            if isinstance(exc, Exception):
                add_note(exc, f"({what} in shard {i}, {self.shard_paths[i]})")
                raise exc
        return results

    def _by_shard(self, keys):
        """{shard: [positions in keys]} of str keys."""
        parts = {}
        for j, key in enumerate(keys):
            parts.setdefault(route(key, self.shards), []).append(j)
        return parts

    # ------------------------------------------------------------ inspection
    def __len__(self):
        self._check_open()
        return sum(self._raise_failed(
            self._placement.map(tasks.size, self._every_shard()), "len").values())

    def __contains__(self, key):
        self._check_open()
        return isinstance(key, str) and bool(
            self._placement.run(route(key, self.shards), tasks.contains, key))

    def existing_keys(self, keys):
        """The set of those of ``keys`` that are live documents."""
        self._check_open()
        if isinstance(keys, str) or not hasattr(keys, "__iter__"):
            raise TypeError(f"keys is {keys!r:.60}; expected a list of keys")
        keys = [k for k in keys if isinstance(k, str)]
        parts = self._by_shard(keys)
        found = self._raise_failed(self._placement.map(
            tasks.call, {i: ("existing_keys", [keys[j] for j in js]) for i, js in parts.items()}),
            "existing_keys")
        return set().union(*found.values()) if found else set()

    def ids_and_keys(self):
        """(ids, keys) of the live documents of every shard in id order (see
        :meth:`SobolevIndex.ids_and_keys`)."""
        self._check_open()
        per_shard = self._raise_failed(
            self._placement.map(tasks.call, self._every_shard("ids_and_keys")), "keys")
        ids = np.concatenate([per_shard[i][0] for i in range(self.shards)])
        keys = [key for i in range(self.shards) for key in per_shard[i][1]]
        order = np.argsort(ids, kind="stable")
        return ids[order], [keys[j] for j in order.tolist()]

    @property
    def next_id(self):
        """The id the next document added gets: one above the largest id
        any shard has given (as it was when a reader opened)."""
        self._check_open()
        return self._next_id

    def reserve_ids(self, next_id):
        """Make :attr:`next_id` at least ``next_id``, committed in every
        shard (see :meth:`SobolevIndex.reserve_ids`)."""
        self._check_writable()
        results = self._placement.map(
            tasks.call, self._every_shard("reserve_ids", next_id), pinned=True)
        if not all(isinstance(r, Exception) for r in results.values()):
            # Some shard took it: no id below it may be given now.
            self._next_id = max(self._next_id, int(next_id))
        self._raise_failed(results, "reserve_ids")

    def get(self, key):
        """The stored measure and metadata of ``key`` (see
        :meth:`SobolevIndex.get`), with ``shard``, the shard that holds it
        (``id`` is the document's global id)."""
        self._check_open()
        i = self.shard_of(key)
        doc = self._placement.run(i, tasks.call, "get", key)
        doc["shard"] = i
        return doc

    def info(self):
        """Counts and sizes summed over the shards (documents, deleted,
        segments, bytes), the shared graph, roots, eta and p, and
        ``shards``: each shard's path, documents, deleted, segments and
        bytes."""
        self._check_open()
        infos = self._raise_failed(
            self._placement.map(tasks.call, self._every_shard("info")), "info")
        infos = [infos[i] for i in range(self.shards)]
        first = infos[0]
        own = sum(os.path.getsize(os.path.join(self.path, name))
                  for name in os.listdir(self.path)
                  if os.path.isfile(os.path.join(self.path, name)))
        return {
            "path": os.path.abspath(self.path),
            "documents": sum(info["documents"] for info in infos),
            "deleted": sum(info["deleted"] for info in infos),
            "segments": sum(info["segments"] for info in infos),
            "nodes": first["nodes"], "edges": first["edges"], "roots": first["roots"],
            "eta": first["eta"], "p": first["p"],
            "bytes": own + sum(info["bytes"] for info in infos),
            "graph": first["graph"],
            "format_version": self._manifest["format_version"],
            "created_at": self._manifest.get("created_at"),
            "routing": dict(self._manifest["routing"]),
            "shards": [{"shard": i, "path": info["path"], "documents": info["documents"],
                        "deleted": info["deleted"], "segments": info["segments"],
                        "bytes": info["bytes"]} for i, info in enumerate(infos)],
        }

    # --------------------------------------------------------------- writing
    def add(self, measures, keys=None, labels=None, fields=None, ids=None):
        """Add a batch of measures; returns their keys.

        The batch is validated in full first (measures, keys, labels,
        fields, ids, keys already in the index): bad input raises before
        any shard writes. Each document takes the next global id (or its
        one of ``ids``, as for :meth:`SobolevIndex.add`), and each shard
        commits its part, ids included, in one transaction, durably, as
        :meth:`SobolevIndex.add` does. **The batch is not atomic across
        shards**: if some parts fail, the others stay committed and
        :class:`ShardedWriteError` lists the committed keys (the ids of the
        others are not used again). Without ``keys``, keys are ``doc-N``
        with N the document's id, as a single index names them.
        """
        return self._write(measures, keys, labels, fields, upsert=False, ids=ids)

    def upsert(self, measures, keys, labels=None, fields=None, ids=None):
        """Add measures, replacing live documents with the same keys (in the
        shard that holds each key). Not atomic across shards: see :meth:`add`."""
        if keys is None:
            raise ValueError("upsert needs keys: the documents to replace are found by key")
        return self._write(measures, keys, labels, fields, upsert=True, ids=ids)

    def _write(self, measures, keys, labels, fields, upsert, ids):
        self._check_writable()
        # The checks against the shards and the write share one bound; the
        # question of what a failed part committed has its own (settle).
        with self._placement.bounded():
            keys, batch, labels, ids, parts, results = self._write_parts(
                measures, keys, labels, fields, upsert, ids)
        if not parts:
            return keys
        # A failed shard, at its latest commit, says which of its part's keys
        # are live with this batch's ids and measures.
        settle(self._placement, "upsert" if upsert else "add", results, parts, keys,
               tasks.committed_part, lambda i: (
                   rows_of(batch, parts[i]), [keys[j] for j in parts[i]],
                   [labels[j] for j in parts[i]], ids[parts[i]]), self.shard_paths)
        return keys

    def _write_parts(self, measures, keys, labels, fields, upsert, ids):
        """The checks of a write and the write of each shard's part: (keys,
        batch, labels, ids, parts, {shard: its result or error}); parts is
        empty for an empty batch."""
        batch = measures if isinstance(measures, MeasureBatch) else as_measure_batch(
            measures, n_nodes=self.n_nodes)
        n = len(batch)
        if ids is None:
            check_room(self._next_id, n)
            ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        else:
            ids = checked_ids(ids, n, self._next_id)
        generated = keys is None
        keys = checked_keys(keys, ids, self.existing_keys)
        # The checks a single index makes, here before any shard writes.
        labels = checked_column("labels", labels, n, str)
        fields = checked_column("fields", fields, n, dict)
        for i, value in enumerate(fields):
            if value is not None:
                json_fields(value, i)
        if not upsert and not generated:  # generated keys avoid the taken ones
            existing = self.existing_keys(keys)
            for key in keys:
                if key in existing:
                    raise DuplicateKeyError(
                        f"key {key!r} is already in the index; use upsert() to replace it")
        if n == 0:
            return [], batch, labels, ids, {}, {}
        parts = self._by_shard(keys)
        # Taken whatever happens next: a part that fails leaves its ids
        # unused, and no id is given twice.
        self._next_id = int(ids[-1]) + 1
        results = self._placement.map(tasks.write, {
            i: (rows_of(batch, js), [keys[j] for j in js], [labels[j] for j in js],
                [fields[j] for j in js], upsert, ids[js])
            for i, js in parts.items()}, pinned=True)
        return keys, batch, labels, ids, parts, results

    def delete(self, keys):
        """Delete documents by key; returns the count. Every key is looked up
        first (one missing: nothing is deleted); then each shard deletes its
        keys in its own transaction, so, as for :meth:`add`, a failure in
        some shards raises :class:`ShardedWriteError` listing the keys that
        were deleted."""
        self._check_writable()
        keys = keys_to_delete(keys)
        live = self.existing_keys(keys)
        missing = [k for k in keys if k not in live]
        if missing:
            raise KeyNotFoundError(
                f"{len(missing)} key(s) are not in the index, e.g. {missing[0]!r}; nothing was "
                "deleted")
        keys = list(dict.fromkeys(keys))
        parts = self._by_shard(keys)
        with self._placement.bounded():
            results = self._placement.map(tasks.delete, {
                i: ([keys[j] for j in js],) for i, js in parts.items()}, pinned=True)
        count = sum(result[0] for result in results.values()
                    if not isinstance(result, Exception))
        # Keys a failed shard no longer has were deleted.
        count += len(settle(self._placement, "delete", results, parts, keys, tasks.deleted_part,
                            lambda i: ([keys[j] for j in parts[i]],), self.shard_paths))
        return count

    @classmethod
    def upgrade(cls, path, timeout=None):
        """Rewrite every shard that an older release wrote in this release's
        format (:meth:`SobolevIndex.upgrade` on each, in this process, one
        after the other), holding the sharded index's writer lock (waiting
        up to ``timeout`` seconds, and as long for each shard's). Keys, ids
        and the manifest are unchanged. Interrupted, it leaves every shard
        readable and the ones already rewritten writable; running it again
        finishes the job. Returns ``{"path", "from_version" (the oldest
        shard's), "to_version", "segments_rewritten", "documents" (over all
        shards), "shards"}``.
        """
        path = os.fspath(path)
        manifest = read_manifest(path)
        lock = storage.WriterLock(path, timeout)
        try:
            reports = [SobolevIndex.upgrade(os.path.join(path, name), timeout=timeout)
                       for name in manifest["shards"]]
        finally:
            lock.release()
        return {"path": os.path.abspath(path),
                "from_version": min(r["from_version"] for r in reports),
                "to_version": storage.FORMAT_VERSION,
                "segments_rewritten": sum(r["segments_rewritten"] for r in reports),
                "documents": sum(r["documents"] for r in reports), "shards": len(reports)}

    def compact(self):
        """Compact every shard (see :meth:`SobolevIndex.compact`)."""
        self._check_writable()
        self._raise_failed(self._placement.map(tasks.call, self._every_shard("compact"),
                                               pinned=True), "compact")

    def verify(self, repair=False, sample=None, seed=0):
        """Verify every shard (see :meth:`SobolevIndex.verify`), their
        agreement with the manifest, and the sharded index's own
        invariants: every live key is in the shard its hash routes it to,
        and no document id is in two shards (both break only when a shard
        is written to directly, or a shard directory is replaced by a copy
        of another). Returns ``{"ok", "problems", "documents",
        "deleted", "segments", "shards"}``: the problems of all shards,
        each prefixed with its shard, and each shard's own report."""
        self._check_open()
        kwargs = {"repair": repair, "seed": seed}
        if sample is not None:
            kwargs["sample"] = sample
        reports = self._placement.map(tasks.verify, self._every_shard(kwargs),
                                      pinned=bool(repair))
        problems, out = [], []
        for i in range(self.shards):
            report = reports[i]
            if isinstance(report, Exception):
                report = {"ok": False, "problems": [f"verify raised {report!r}"],
                          "documents": None, "deleted": None, "segments": None}
            else:
                try:
                    check_agrees(i, self.shard_paths[i], report.pop("describe"),
                                  self._manifest, "the manifest")
                except ShardError as exc:
                    report["problems"].append(str(exc))
                    report["ok"] = False
            problems += [f"shard {i} ({self.shard_paths[i]}): {p}" for p in report["problems"]]
            out.append(report)
        listed = self._placement.map(tasks.call, self._every_shard("ids_and_keys"))
        listed = {i: found for i, found in listed.items()
                  if not isinstance(found, Exception)}  # else reported above: verify raised
        for i, problem in sharded_invariants(listed, self.shards):
            problems.append(f"shard {i} ({self.shard_paths[i]}): {problem}")
            out[i]["problems"].append(problem)
            out[i]["ok"] = False

        def total(name):
            values = [r.get(name) for r in out]
            return None if any(v is None for v in values) else sum(values)

        return {"ok": not problems, "problems": problems, "documents": total("documents"),
                "deleted": total("deleted"), "segments": total("segments"), "shards": out}

    # ---------------------------------------------------------------- search
    def search(self, queries, k=None, p=None, roots=None, where=None, n_threads=None,
               radius=None, limit=None, stats=False, candidates=None, candidate_roots=None):
        """Exact k nearest neighbours under S_p over every shard, or every
        document within a radius: the arguments and the
        :class:`SearchResult` of :meth:`SobolevIndex.search`, and the same
        answer as a single index holding the same documents.

        Each shard finds its own top ``k`` (or its documents within
        ``radius``, up to ``limit``), and the client merges them: by
        distance, ties by document id (ids are global and rise in the order
        the documents were added, the order a single index given the same
        calls keeps), so a shard's top k always holds every document of the
        merged top k. For the k nearest, the shards in one place (this
        process, or one Dask worker) are searched one after another, each
        within the k-th distance the ones before it found, which prunes as
        one index of their documents would (the answer is the same). A
        stored key used as a query is searched as its stored measure,
        exactly (the key's own shard sends it), and comes first among the
        documents at distance 0 from it, as in a single index.
        ``n_threads`` is per shard. ``stats`` sums the shards' counts; with
        ``stats=True`` ``seconds`` holds the wall-clock time of the fan-out
        (``search``), the ``merge`` and the ``total``.

        With ``candidates`` (an approximate search, see
        :meth:`SobolevIndex.search`) each shard takes its own
        ``candidates`` and returns the k nearest of them: up to ``shards``
        times as many candidates are ranked as in a single index, among
        them the ``candidates`` nearest of all, so no answer is farther
        than a single index's. A query's answer is ``certified`` when every
        shard's is.
        """
        self._check_open()
        with self._placement.bounded():
            return self._search(queries, k, p, roots, where, n_threads, radius, limit, stats,
                                candidates, candidate_roots)

    def _search(self, queries, k, p, roots, where, n_threads, radius, limit, stats,
                candidates=None, candidate_roots=None):
        started = time.perf_counter()
        p = self.p if p is None else check_p(p)
        # Checked here, before any shard is asked, as a single index checks
        # them: a shard with nothing in scope would not check them at all.
        k, radius = checked_search_args(k, radius, limit)
        query_keys = None
        if isinstance(queries, str) or (isinstance(queries, (list, tuple)) and queries
                                        and all(isinstance(q, str) for q in queries)):
            query_keys = [queries] if isinstance(queries, str) else list(queries)
            stored = self._stored_measures(query_keys)
            queries = [(nodes, masses) for nodes, masses, _, _ in stored]
        # Checked here, once, so that bad queries raise one clear error.
        checked = as_measure_batch(queries, n_nodes=self.n_nodes)
        n_queries = len(checked)
        if n_queries == 0:
            raise InvalidMeasureError("no queries were given")
        if radius is not None:
            radius = radius_for_queries(radius, n_queries)
        check_where(where)
        approximate = checked_candidates(candidates, candidate_roots, k, radius,
                                         len(self._root_positions(roots)))
        # Candidates from every root searched: the exact search, certified.
        ranked = approximate is not None and approximate[1] < len(self._root_positions(roots))
        kwargs = {"k": k, "p": p, "roots": roots, "n_threads": n_threads, "radius": radius,
                  "limit": limit, "stats": stats}
        if ranked:
            kwargs.update(candidates=candidates, candidate_roots=candidate_roots)
        shared = self._placement.scatter(queries, checked.indptr.nbytes + checked.nodes.nbytes
                                         + checked.masses.nbytes)
        args_of = {i: (shared, dict(kwargs, where=self._shard_where(where, i)), n_queries)
                   for i in range(self.shards)}
        if radius is None and not ranked:
            found = self._placement.map_in_turn(tasks.search_in_turn, args_of, int(k))
            # A shard whose group's task failed for want of a worker, or
            # went where a writer's shard is not, is asked again on its own,
            # where the scheduler says it is now; bad input is not, nor a
            # shard that did not answer in time (the time is up).
            again = {i: args_of[i] for i, f in found.items()
                     if isinstance(f, Exception) and not isinstance(f, _INPUT_ERRORS)
                     and not isinstance(f, ShardError)}
            if again:
                found.update(self._placement.map(tasks.search, again, pinned=True))
        else:
            found = self._placement.map(tasks.search, args_of)
        found = self._raise_failed(found, "search")
        searched = time.perf_counter()
        found = [found[i] for i in range(self.shards)]

        absent = set.intersection(*[f.absent for f in found])
        if absent:
            warnings.warn(f"no live document has the label {', '.join(sorted(map(repr, absent)))}",
                          UserWarning, stacklevel=3)
        if radius is None:
            # As a single index: min(k, live documents) columns whatever
            # ``where`` admits, padded with inf (each shard reports its own
            # live count, also when nothing in it is in scope).
            width = min(int(k), sum(f.live for f in found))
        else:
            width = limit
        keys, distances, labels, ids, scores, truncated = merge_hits(found, n_queries, width)
        if query_keys is not None:
            self._own_key_first(query_keys, stored, where, keys, distances, labels, ids,
                                width)
        if radius is None:
            # Padded with inf, as a single index's.
            distances, scores = (padded(rows, width) for rows in (distances, scores))
        else:
            truncated = [bool(t or any(f.truncated[q] for f in found))
                         for q, t in enumerate(truncated)]
        totals = summed_stats(found, n_queries, stats)
        certified = None
        if approximate is not None:
            certified = [all(f.certified is None or f.certified[q] for f in found)
                         for q in range(n_queries)]
        if stats:
            totals["seconds"] = {"search": searched - started,
                                 "merge": time.perf_counter() - searched,
                                 "total": time.perf_counter() - started}
        return SearchResult(keys, distances, labels, p, totals,
                            radius=radius,
                            truncated=None if radius is None else truncated, ids=ids,
                            scores=scores, certified=certified)

    def _stored_measures(self, keys):
        """(nodes, masses, label, id) of each stored key, from its shard."""
        check_str_keys(keys)
        parts = self._by_shard(keys)
        got = self._raise_failed(self._placement.map(
            tasks.stored_measures, {i: ([keys[j] for j in js],) for i, js in parts.items()}),
            "search")
        out = [None] * len(keys)
        for i, js in parts.items():
            for j, measure in zip(js, got[i]):
                out[j] = measure
        return out

    def _shard_where(self, where, i):
        """``where`` for shard i: its ``keys`` only those routed to it."""
        if not isinstance(where, dict) or not isinstance(where.get("keys"), (list, tuple)):
            return where
        mine = [key for key in where["keys"]
                if isinstance(key, str) and route(key, self.shards) == i]
        return dict(where, keys=mine)

    def _own_key_first(self, query_keys, stored, where, keys, distances, labels, ids, width):
        """results.own_key_first, with the stored keys' labels and ids
        (``stored``, from their shards) and ``where`` deciding whether a
        stored key may be returned."""
        def stored_of(q, key):
            label, doc_id = stored[q][2], stored[q][3]
            return (label, doc_id) if admitted(key, label, where) else None

        own_key_first(query_keys, keys, distances, labels, ids, width, stored_of)

    # ------------------------------------------------------- Gram matrices
    def distance_matrix(self, keys=None, p=None, roots=None, t=None, power=False,
                        chunk=GRAM_CHUNK):
        """The matrix of S_p between stored documents (or the kernel
        exp(-t d) with ``t``; ``power=True`` uses d = sum_r eta_r S_p^p), as
        a lazy ``dask.array`` of ``chunk`` x ``chunk`` blocks, for a matrix
        larger than memory: write it with ``to_zarr`` (or
        :meth:`write_distance_matrix`). ``keys``: the documents, in order
        (default every live document in insertion order). Returns (array,
        keys). The same values as :func:`pairwise_sobolev` of the
        documents' features, exactly symmetric with a zero diagonal."""
        from .gram import distance_matrix

        self._check_open()
        return distance_matrix(self, keys, p, roots, t, power, chunk)

    def write_distance_matrix(self, path, keys=None, p=None, roots=None, t=None, power=False,
                              chunk=GRAM_CHUNK):
        """Compute :meth:`distance_matrix` (on the Dask client if the index
        has one, else on local threads) into a new Zarr array at ``path``;
        its attributes hold ``keys`` (the row and column order), ``p``,
        ``roots``, ``t`` and ``power``. Returns ``{"path", "shape",
        "chunks"}``."""
        from .gram import write_distance_matrix

        return write_distance_matrix(self, path, keys, p, roots, t, power, chunk)
