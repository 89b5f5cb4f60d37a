"""The files of a sharded index other than its shards: the manifest (which
shards there are, how keys are routed to them, what they share).

::

    ROOT/manifest.json      format, version, shard directories, routing rule,
                            graph checksum, roots, eta and p, and a checksum
                            of all that; written once, atomically (temporary
                            name, fsync, rename, fsync of the directory)
    ROOT/write.lock         held by the one writer of the sharded index
    ROOT/shard-NNN/         S ordinary SobolevIndex directories

The routing rule is ``int.from_bytes(blake2b(key.encode("utf-8"),
digest_size=8).digest(), "big") % S``: the same on every machine and in every
Python process (Python's own ``hash()`` of a str changes with each process).

The documents of all shards are numbered together: the sharded index gives
each document the next id of one sequence (``SobolevIndex.add(ids=...)``),
and the shard commits the id with the document, so the global insertion
order (ties in a search) lives in the shards themselves and no crash can
separate it from them. The next id is one above the largest any shard has
given (each shard's ``next_id``).

The manifest's ``checksum`` is the SHA-256 of its other fields as canonical
JSON (sorted keys, no spaces, ASCII): a value changed after the file was
written (a flipped digit in a root or a weight) is found when it is read,
where the fields' own checks would pass it. Manifests written before it
existed have none, and are read as before.
"""
import hashlib
import json
import math
import os
import tempfile

import numpy as np

from ..errors import CorruptIndexError, NotAnIndexError, UnsupportedFormatError
from ..index import storage
from .errors import KEYS_SHOWN, ShardError, listed_keys
from .opening import MANIFEST

FORMAT_NAME = "sobolev-index-sharded"
# 2: document ids are global (version 1 kept the order in sequence.sqlite).
FORMAT_VERSION = 2
ROUTING = {"hash": "blake2b", "digest_size": 8, "encoding": "utf-8", "byteorder": "big"}


def shard_name(i):
    """The directory of shard ``i`` inside the sharded index."""
    return f"shard-{i:03d}"


def route(key, shards):
    """The shard (0 .. shards - 1) that holds ``key``: blake2b of its UTF-8
    bytes, 8 bytes read big-endian, modulo the number of shards."""
    digest = hashlib.blake2b(key.encode(ROUTING["encoding"]),
                             digest_size=ROUTING["digest_size"]).digest()
    return int.from_bytes(digest, ROUTING["byteorder"]) % shards


def new_manifest(shards, graph_checksum, roots, eta, p):
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_at": storage.utc_now(),
        "shards": [shard_name(i) for i in range(shards)],
        "routing": dict(ROUTING, modulo=shards),
        "graph_checksum": graph_checksum,
        "roots": [int(r) for r in roots],
        "eta": [float(e) for e in eta],
        "p": "inf" if math.isinf(p) else p,
    }


def content_checksum(manifest):
    """The SHA-256 (hex) of the manifest's fields other than ``checksum``,
    as canonical JSON."""
    fields = {name: value for name, value in manifest.items() if name != "checksum"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_manifest(root, manifest):
    """Write ``ROOT/manifest.json`` with its content checksum, atomically:
    a temporary file in the same directory, flushed to disk, renamed over
    the final name, then the directory entry flushed, so a crash leaves the
    old file or the new one."""
    manifest = dict(manifest, checksum=content_checksum(manifest))
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.rename(tmp, os.path.join(root, MANIFEST))
        storage.fsync_path(root, directory=True)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_manifest(root):
    """The manifest of the sharded index at ``root``, checked: NotAnIndexError
    when there is none, CorruptIndexError when it cannot be read, lacks a
    field or fails its checksum, UnsupportedFormatError for a newer format."""
    root = os.fspath(root)
    path = os.path.join(root, MANIFEST)
    if not os.path.isdir(root):
        raise NotAnIndexError(f"{root} does not exist or is not a directory; create a sharded "
                              "index there first (ShardedIndex.create)")
    if not os.path.exists(path):
        raise NotAnIndexError(f"{root} has no {MANIFEST}: it is not a sharded sobolev-index")
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptIndexError(f"{path} cannot be read as JSON ({exc}); restore it from a "
                                "backup") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise NotAnIndexError(f"{path} is not the manifest of a sharded sobolev-index "
                              f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r}, "
                              f"expected {FORMAT_NAME!r})")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        hint = ""
        if version == 1:
            hint = ("; version 1 came from a development build: split the source index "
                    "again with `sobolev-index shard`")
        raise UnsupportedFormatError(
            f"{path} has format version {version!r}; this release reads version "
            f"{FORMAT_VERSION}{hint}")
    shards = manifest.get("shards")
    routing = manifest.get("routing")
    if (not isinstance(shards, list) or not shards
            or not all(isinstance(s, str) and s and os.sep not in s for s in shards)
            or not isinstance(routing, dict)
            or {k: routing.get(k) for k in ROUTING} != ROUTING
            or routing.get("modulo") != len(shards)
            or not isinstance(manifest.get("graph_checksum"), str)
            or not isinstance(manifest.get("roots"), list)
            or not isinstance(manifest.get("eta"), list)):
        raise CorruptIndexError(
            f"{path} lacks a valid shard list, routing rule ({ROUTING} modulo the number of "
            "shards), graph checksum, roots or eta; restore it from a backup")
    n_nodes, p = manifest.get("n_nodes"), manifest.get("p")
    roots, eta = manifest["roots"], manifest["eta"]
    problem = None
    if not _is_int(n_nodes) or n_nodes < 1:
        problem = f"n_nodes is {n_nodes!r}; expected the graph's number of nodes (>= 1)"
    elif p != "inf" and (not _is_number(p) or not 1 <= p < math.inf):
        problem = f"p is {p!r}; expected a number >= 1 or \"inf\""
    elif not roots or not all(_is_int(r) and 0 <= r < n_nodes for r in roots):
        problem = f"roots is {roots!r}; expected node ids in 0..{n_nodes - 1}"
    elif len(eta) != len(roots) or not all(_is_number(e) and 0 <= e < math.inf for e in eta):
        problem = f"eta is {eta!r}; expected {len(roots)} finite weights >= 0, one per root"
    if problem is not None:
        raise CorruptIndexError(f"{path}: {problem}; restore it from a backup")
    if "checksum" in manifest:
        recorded, found = manifest["checksum"], content_checksum(manifest)
        if recorded != found:
            shown = f"{recorded[:16]}..." if isinstance(recorded, str) else repr(recorded)
            raise CorruptIndexError(
                f"{path} fails its checksum: it records sha256 {shown}, its content has "
                f"{found[:16]}...; it was changed after it was written: restore it from a backup")
    return manifest


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_agrees(i, path, described, expected, whose):
    """ShardError unless shard i has the graph checksum, roots and eta of
    ``expected`` (the manifest, or shard 0 while creating)."""
    for name in ("graph_checksum", "roots", "eta"):
        got, want = described[name], expected[name]
        if name != "graph_checksum":
            got, want = [float(v) for v in got], [float(v) for v in want]
        if got != want:
            raise ShardError(
                f"shard {i} ({path}) has {name.replace('_', ' ')} {got}, but {whose} has "
                f"{want}: the shard belongs to another index; restore it from a backup",
                i, path)


def sharded_invariants(listed, shards):
    """(shard, problem) of the live documents ``listed`` ({shard: (ids,
    keys)}) with the routing rule and the global ids."""
    out = []
    for i in sorted(listed):
        misplaced = [key for key in listed[i][1] if route(key, shards) != i]
        if misplaced:
            out.append((i, f"{len(misplaced)} key(s) route to another shard (written to this "
                           f"shard directly?): {listed_keys(misplaced)}; delete them here and add "
                           "them through the sharded index"))
    every = np.concatenate([listed[i][0] for i in sorted(listed)] or [np.zeros(0, np.int64)])
    values, counts = np.unique(every, return_counts=True)
    twice = set(values[counts > 1].tolist())
    if twice:
        for i in sorted(listed):
            ids, keys = listed[i]
            shared = [f"{key!r} (id {doc_id})" for doc_id, key in zip(ids.tolist(), keys)
                      if doc_id in twice]
            if shared:
                out.append((i, f"{len(shared)} document(s) have ids that another shard's "
                               f"documents have too (a shard written to directly, or copied?): "
                               f"{', '.join(shared[:KEYS_SHOWN])}"
                               f"{' ...' if len(shared) > KEYS_SHOWN else ''}; ties between "
                               "them are not in insertion order: upsert them through the "
                               "sharded index to give them new ids"))
    return out
