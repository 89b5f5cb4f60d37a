"""Bad input through the Python API: measures, keys, labels, fields and call
arguments that must be refused with one clear error of the documented class,
raised by the package's own checks before any file is written, the index
left byte-identical."""
import builtins
import os
import time

import numpy as np

from ..harness import describe, raised_on_purpose, run_task, where_raised
from ..indexes import copy_index, differences, random_measure, snapshot


def _bad_measure_items(n):
    """Measures that must be refused: name -> a (nodes, masses) item."""
    a = np.array
    return {
        "negative mass": (a([1, 2, 3]), a([0.5, -0.25, 1.0])),
        "NaN mass": (a([1, 2]), a([0.5, np.nan])),
        "+inf mass": (a([1, 2]), a([0.5, np.inf])),
        "-inf mass": (a([1, 2]), a([0.5, -np.inf])),
        "all masses zero": (a([4, 5]), a([0.0, 0.0])),
        "subnormal masses (1e-320)": (a([0, 1]), a([1e-320, 1e-320])),
        "total below 1e-300": (a([4, 5]), a([3e-301, 3e-301])),
        "total overflows float64": (a([4, 5]), a([1e308, 1e308])),
        "node id = number of nodes": (a([1, n]), a([0.5, 0.5])),
        "node id -1": (a([-1, 2]), a([0.5, 0.5])),
        "node id 2**40": (a([2**40]), a([1.0])),
        "node id at int64 max": (a([2**63 - 1]), a([1.0])),
        "node id 1.5": (a([1.5, 2.0]), a([0.5, 0.5])),
        "node id NaN": (a([np.nan, 2.0]), a([0.5, 0.5])),
        "node ids as text": (a(["a", "b"]), a([0.5, 0.5])),
        "node ids as booleans": (a([True, False]), None),
        "empty measure": (a([], dtype=np.int64), a([])),
        "empty measure, masses None": (a([], dtype=np.int64), None),
        "more nodes than masses": (a([1, 2, 3]), a([0.5, 0.5])),
        "masses as text": (a([1, 2]), a(["a", "b"])),
        "masses complex": (a([1, 2]), a([1 + 1j, 2])),
        "a mass None": (a([1, 2]), [None, 1.0]),
        "nodes 2-D": (a([[1, 2]]), None),
        "masses 2-D": (a([1, 2]), a([[0.5, 0.5]])),
        "ragged nodes": ([1, [2, 3]], None),
        "not a pair (a triple)": (1, 2, 3),
        "not a pair (a str)": "abc",
        "not a pair (None)": None,
        "not a pair (an int)": 5,
    }


def _bad_measure_batches(n):
    """Whole ``measures`` arguments that must be refused."""
    import scipy.sparse as sp

    wide = np.zeros((2, n + 1))
    wide[:, 1] = 1.0
    negative = np.zeros((2, n))
    negative[0, 1], negative[1, 2], negative[1, 3] = 1.0, 1.0, -2.0
    empty_row = sp.csr_matrix(([1.0], ([0], [4])), shape=(2, n))
    return {
        "measures is an int": 5,
        "measures is None": None,
        "dense matrix with one column too many": wide,
        "dense matrix with a negative mass": negative,
        "sparse matrix with an empty row": empty_row,
        "3-D array": np.ones((2, n, 1)),
    }


def _deep_fields(depth):
    fields = {}
    inner = fields
    for _ in range(depth):
        inner["a"] = {}
        inner = inner["a"]
    return fields


# name -> (entries, expected exception classes by name, call(index, good measures))
def _bad_key_cases():
    two = ["k1", "k2"]
    return {
        "a key repeated in the batch": (["add"], ("DuplicateKeyError",),
                                        lambda ix, m: ix.add(m[:2], keys=["k1", "k1"])),
        "a key already live": (["add"], ("DuplicateKeyError",),
                               lambda ix, m: ix.add(m[:2], keys=["k1", "a0"])),
        "a key that is an int": (["add", "upsert"], ("ValueError", "TypeError"),
                                 lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", 7])),
        "a key None": (["add", "upsert"], ("ValueError", "TypeError"),
                       lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", None])),
        "an empty key": (["add", "upsert"], ("ValueError",),
                         lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", ""])),
        "keys as one str": (["add"], ("TypeError", "ValueError"),
                            lambda ix, m: ix.add(m[:2], keys="k1")),
        "fewer keys than measures": (["add", "upsert"], ("ValueError",),
                                     lambda ix, m, e: getattr(ix, e)(m[:3], keys=two)),
        "a key with a lone surrogate": (["add", "upsert"], ("ValueError",),
                                        lambda ix, m, e: getattr(ix, e)(m[:2], keys=["k1", "k\udcff"])),
        "a label that is an int": (["add"], ("ValueError", "TypeError"),
                                   lambda ix, m: ix.add(m[:2], keys=two, labels=["x", 3])),
        "labels as one str": (["add"], ("ValueError", "TypeError"),
                              lambda ix, m: ix.add(m[:2], keys=two, labels="x")),
        "more labels than measures": (["add"], ("ValueError",),
                                      lambda ix, m: ix.add(m[:2], keys=two, labels=["x"] * 3)),
        "a label with a lone surrogate": (["add"], ("ValueError",),
                                          lambda ix, m: ix.add(m[:2], keys=two, labels=["x", "\ud800"])),
        "NaN in fields": (["add", "upsert"], ("ValueError",),
                          lambda ix, m, e: getattr(ix, e)(m[:2], keys=two,
                                                          fields=[{"v": 1}, {"v": float("nan")}])),
        "inf in fields": (["add", "upsert"], ("ValueError",),
                          lambda ix, m, e: getattr(ix, e)(m[:2], keys=two,
                                                          fields=[None, {"v": [1, float("inf")]}])),
        "fields holding an object": (["add"], ("ValueError", "TypeError"),
                                     lambda ix, m: ix.add(m[:2], keys=two, fields=[{"v": object()}, None])),
        "fields holding a NumPy array": (["add"], ("ValueError", "TypeError"),
                                         lambda ix, m: ix.add(m[:2], keys=two,
                                                              fields=[{"v": np.arange(3)}, None])),
        "fields not a dict": (["add"], ("ValueError", "TypeError"),
                              lambda ix, m: ix.add(m[:2], keys=two, fields=[[1, 2], None])),
        "fewer fields than measures": (["add"], ("ValueError",),
                                       lambda ix, m: ix.add(m[:2], keys=two, fields=[{}])),
        "fields nested 5,000 deep": (["add"], ("ValueError",),
                                     lambda ix, m: ix.add(m[:2], keys=two,
                                                          fields=[_deep_fields(5000), None])),
        "upsert without keys": (["upsert"], ("ValueError",), lambda ix, m: ix.upsert(m[:2], keys=None)),
    }


def _bad_arg_cases():
    from sobolev_index.index.sql import run_query

    q = [(np.array([1, 2, 3]), None)]
    cases = {}
    for value in (0, -1, 2.5, "3", True, 10**30, float("nan")):
        cases[f"k = {value!r}"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=v))
    for value in (0.5, 0, -1, float("nan"), float("-inf"), "abc", 1j, [1]):
        cases[f"p = {value!r} (search)"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=3, p=v))
        cases[f"p = {value!r} (distance)"] = (("ValueError",),
                                              lambda ix, v=value: ix.distance("a0", "b0", p=v))
    cases["p = 0 (gram)"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], p=0))
    for value in ([7], [-1], [], [0, 0], [0.5]):
        cases[f"roots = {value!r}"] = (("ValueError",), lambda ix, v=value: ix.search(q, k=3, roots=v))
    cases["where with an unknown name"] = (("ValueError",), lambda ix: ix.search(q, where={"nope": 1}))
    cases["where as a str"] = (("ValueError",), lambda ix: ix.search(q, where="x"))
    cases["search by an unknown key"] = (("KeyNotFoundError",), lambda ix: ix.search("nope"))
    cases["distance to an unknown key"] = (("KeyNotFoundError",), lambda ix: ix.distance("a0", "nope"))
    cases["distance to a deleted key"] = (("KeyNotFoundError",), lambda ix: ix.distance("a0", "a3"))
    cases["get of an int"] = (("TypeError",), lambda ix: ix.get(3))
    cases["delete of unknown keys"] = (("KeyNotFoundError",), lambda ix: ix.delete(["a0", "nope"]))
    cases["delete(None)"] = (("TypeError", "ValueError"), lambda ix: ix.delete(None))
    cases["gram with t = NaN"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], t=float("nan")))
    cases["gram with t = -1"] = (("ValueError",), lambda ix: ix.gram(["a0", "b0"], t=-1))
    cases["verify(sample=0)"] = (("ValueError",), lambda ix: ix.verify(sample=0))
    cases["open with mode 'w'"] = (("ValueError",), lambda ix: type(ix).open(ix.path, "w"))
    cases["SQL on a writer"] = (("SobolevIndexError",), lambda ix: run_query(ix, "SELECT 1"))
    cases["features for root 9"] = (("ValueError",), lambda ix: ix.features(["a0"], root=9))
    return cases


def trial_bad_api(spec, ctx):
    """One bad input through the API: one clear error, nothing written,
    the index byte-identical."""
    import sobolev_index.errors as errors_module
    from sobolev_index import SobolevIndex
    from sobolev_index.index import storage

    cache = ctx["cache"]
    if cache.get("index") is None:
        path = copy_index(ctx["template"], os.path.join(ctx["workdir"], "ix"))
        cache["index"] = SobolevIndex.open(path, "a")
    index = cache["index"]
    n = index.graph.n_nodes
    rng = np.random.default_rng(spec["seed"])
    good = [random_measure(rng, n) for _ in range(int(rng.integers(3, 8)))]
    row, case, entry = spec["row"], spec["case"], spec["entry"]
    if row == "bad-measures-api":
        if spec["whole"]:
            bad_batch = _bad_measure_batches(n)[case]
            expected = ("InvalidMeasureError", "TypeError")
        else:
            bad = _bad_measure_items(n)[case]
            at = int(rng.integers(0, len(good) + 1))
            bad_batch = good[:at] + [bad] + good[at:]
            expected = ("InvalidMeasureError",)
        count = (bad_batch.shape[0] if getattr(bad_batch, "ndim", 0) >= 1 else
                 len(bad_batch) if isinstance(bad_batch, list) else 3)
        keys = [f"new{i}" for i in range(count)]

        def call():
            if entry == "add":
                return index.add(bad_batch, keys=keys)
            if entry == "add (generated keys)":
                return index.add(bad_batch)
            if entry == "upsert":
                return index.upsert(bad_batch, keys=["a0"] + keys[1:])
            if entry == "search":
                return index.search(bad_batch, k=3)
            return index.distance(bad if not spec["whole"] else bad_batch, good[0])
    elif row == "bad-keys-api":
        entries, expected, fn = _bad_key_cases()[case]

        def call():
            return fn(index, good, entry) if fn.__code__.co_argcount == 3 else fn(index, good)
    else:
        expected, fn = _bad_arg_cases()[case]

        def call():
            return fn(index)
    expected_classes = tuple(getattr(errors_module, name, None) or getattr(builtins, name)
                             for name in expected)
    before = snapshot(index.path)
    written = []
    real_write = storage.write_segment

    def counting(*args, **kwargs):
        written.append(args[1])
        return real_write(*args, **kwargs)

    storage.write_segment = counting
    try:
        call()
        error = None
    except Exception as exc:
        error = exc
    finally:
        storage.write_segment = real_write
    changed = differences(before, snapshot(index.path))
    if changed:
        index.close()
        cache["index"] = None
        return "index changed", f"{case} via {entry}: {changed}; error: {error and describe(error)}"
    if error is None:
        return "accepted", f"{case} via {entry}"
    if written:
        return ("refused only after writing a segment",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    if not isinstance(error, expected_classes):
        return (f"wrong error: {type(error).__name__}",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    if not raised_on_purpose(error) or not str(error):
        return ("error not raised by the package's checks",
                f"{case} via {entry}: {describe(error)} at {where_raised(error)}")
    return "one clear error, unchanged", ""


def kind_bad_api(run):
    """Bad measures, keys, labels, fields and arguments through the Python API."""
    expected = ("one error of the documented class ({classes}) raised by the package's own "
                "checks, before any file is written; index byte-identical")
    ok = ["one clear error, unchanged"]
    rows = {
        "bad-measures-api": run.row(
            "bad-measures-api", "bad-api", "Bad measures (API)",
            "a random batch of good measures with one bad one at a random position, given to "
            "add, add with generated keys, upsert, search and distance; {cases}",
            expected.format(classes="InvalidMeasureError; TypeError for a wrong type"), ok),
        "bad-keys-api": run.row(
            "bad-keys-api", "bad-api", "Bad keys, labels and fields (API)",
            "add and upsert with: {cases}",
            expected.format(classes="DuplicateKeyError, ValueError or TypeError"), ok),
        "bad-args-api": run.row(
            "bad-args-api", "bad-api", "Bad search and call arguments (API)",
            "search, distance, gram, get, delete, features, verify, open and SQL with: {cases}",
            expected.format(classes="ValueError, TypeError, KeyNotFoundError, SobolevIndexError"), ok),
    }
    started = time.monotonic()
    repeats = max(1, run.trials // 10)
    specs = []
    n = 60
    item_cases = run.subset(_bad_measure_items(n), 6)
    whole_cases = run.subset(_bad_measure_batches(n), 2)
    for case in item_cases:
        for entry in ("add", "add (generated keys)", "upsert", "search", "distance"):
            if entry == "distance" and case == "not a pair (a str)":
                continue  # distance() takes a str as a stored key, by design
            for _ in range(repeats):
                specs.append({"row": "bad-measures-api", "case": case, "entry": entry, "whole": False,
                              "seed": run.rng.randrange(2**31)})
    for case in whole_cases:
        for entry in ("add", "search"):
            specs.append({"row": "bad-measures-api", "case": case, "entry": entry, "whole": True,
                          "seed": run.rng.randrange(2**31)})
    key_cases = run.subset(_bad_key_cases(), 5)
    for case in key_cases:
        for entry in _bad_key_cases()[case][0]:
            specs.append({"row": "bad-keys-api", "case": case, "entry": entry,
                          "seed": run.rng.randrange(2**31)})
    arg_cases = run.subset(_bad_arg_cases(), 6)
    for case in arg_cases:
        specs.append({"row": "bad-args-api", "case": case, "entry": "call",
                      "seed": run.rng.randrange(2**31)})
    rows["bad-measures-api"].injection = rows["bad-measures-api"].injection.format(
        cases="; ".join(item_cases + whole_cases))
    rows["bad-keys-api"].injection = rows["bad-keys-api"].injection.format(cases="; ".join(key_cases))
    rows["bad-args-api"].injection = rows["bad-args-api"].injection.format(cases="; ".join(arg_cases))
    run_task(run, "bad-api", specs, list(rows.values()), {"template": run.template("small")})
    run.finish(rows.values(), started)


