"""Stateful property test: random add / upsert / delete / compact / reopen sequences
against an in-memory model {key: (nodes, masses, label)}.

After every step: len, iteration (set and, without upserts, order), membership.
Rules also check get() round-trips, features, and search results against a
brute force over the model with tests/reference.py.
"""

import math
import shutil
import tempfile

import numpy as np
import pytest
from _support.expected import RefModel, check_topk
from _support.graphs import pick_roots, random_graph
from _support.measures import assert_csr_identical, assert_same_measure, measures_on
from _support.settings import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sobolev_index import (
    DuplicateKeyError,
    KeyNotFoundError,
    SobolevIndex,
)

N = 24
SPEC = random_graph(55, N, extra=24, kind="random")
ROOTS = pick_roots(SPEC, 2, seed=5)
ETA = [0.7, 0.3]
GRAPH = SPEC.lib()
TREES = [GRAPH.tree(r) for r in ROOTS]
MODEL = RefModel(SPEC, ROOTS)

measures = measures_on(N, max_support=6)
labels = st.sampled_from([None, "x", "y"])
key_names = st.sampled_from([f"key{i}" for i in range(30)])


class IndexMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="sobolev-stateful-")
        self.path = self.dir + "/idx"
        self.idx = SobolevIndex.create(self.path, GRAPH, roots=list(ROOTS), eta=ETA, p=1)
        self.model = {}  # key -> (nodes, masses, label)
        self.alpha = {}  # key -> reference alphas
        self.order = []  # live keys in insertion order (None once upsert made it ambiguous)
        self.generated = set()

    def teardown(self):
        try:
            self.idx.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    def _put(self, key, m, label):
        self.model[key] = (m[0], m[1], label)
        self.alpha[key] = MODEL.alphas(m)

    def _drop(self, key):
        del self.model[key]
        del self.alpha[key]
        if self.order is not None:
            self.order.remove(key)

    # ------------------------------------------------------------------ rules
    @rule(data=st.data(), n=st.integers(1, 4), named=st.booleans())
    def add(self, data, n, named):
        ms = [data.draw(measures) for _ in range(n)]
        labs = [data.draw(labels) for _ in range(n)]
        if named:
            free = [f"key{i}" for i in range(30) if f"key{i}" not in self.model]
            if len(free) < n:
                return
            keys = data.draw(st.permutations(free))[:n]
            got = self.idx.add(ms, keys=keys, labels=labs)
            assert got == keys
        else:
            got = self.idx.add(ms, labels=labs)
            assert len(got) == n and len(set(got)) == n
            assert not (set(got) & set(self.model)), "generated key collides with a live key"
            assert not (set(got) & self.generated), "generated key reused"
            self.generated |= set(got)
        for key, m, lab in zip(got, ms, labs):
            self._put(key, m, lab)
            if self.order is not None:
                self.order.append(key)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def add_duplicate_fails(self, data):
        live = sorted(self.model)
        dup = data.draw(st.sampled_from(live))
        m = data.draw(measures)
        n_before = len(self.idx)
        with pytest.raises(DuplicateKeyError):
            self.idx.add([m, m], keys=["fresh-never-used", dup])
        assert len(self.idx) == n_before
        assert "fresh-never-used" not in self.idx
        # a key repeated within one batch
        with pytest.raises(DuplicateKeyError):
            self.idx.add([m, m], keys=["fresh-twice", "fresh-twice"])
        assert "fresh-twice" not in self.idx

    @rule(data=st.data(), n=st.integers(1, 3))
    def upsert(self, data, n):
        keys = data.draw(st.lists(key_names, min_size=n, max_size=n, unique=True))
        ms = [data.draw(measures) for _ in range(n)]
        labs = [data.draw(labels) for _ in range(n)]
        got = self.idx.upsert(ms, keys=keys, labels=labs)
        assert got == keys
        if any(k in self.model for k in keys):
            self.order = None
        for key, m, lab in zip(keys, ms, labs):
            if self.order is not None:
                self.order.append(key)
            self._put(key, m, lab)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def delete(self, data):
        live = sorted(self.model)
        gone = data.draw(st.lists(st.sampled_from(live), min_size=1, max_size=4, unique=True))
        assert self.idx.delete(gone) == len(gone)
        for key in gone:
            self._drop(key)

    @rule(data=st.data())
    def delete_unknown_fails(self, data):
        live = sorted(self.model)
        some = data.draw(st.lists(st.sampled_from(live), max_size=2, unique=True)) if live else []
        with pytest.raises(KeyNotFoundError):
            self.idx.delete(some + ["not-a-key"])
        # nothing deleted: checked by the invariants

    @rule()
    def compact(self):
        self.idx.compact()

    @rule()
    def reopen(self):
        self.idx.close()
        self.idx = SobolevIndex.open(self.path, "a")

    @rule()
    def reader_agrees(self):
        with SobolevIndex.open(self.path, "r") as r:
            assert len(r) == len(self.model)
            assert set(r) == set(self.model)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def get_roundtrip(self, data):
        key = data.draw(st.sampled_from(sorted(self.model)))
        nodes, masses, lab = self.model[key]
        doc = self.idx.get(key)
        assert doc["key"] == key
        assert doc["label"] == lab
        assert_same_measure(doc["nodes"], doc["masses"], nodes, masses, N, key)
        for r, tree in enumerate(TREES):
            assert_csr_identical(self.idx.features(key, root=r),
                                 tree.features_of([(nodes, masses)]), f"{key} root {r}")

    @rule(data=st.data(), k=st.integers(1, 8),
          p=st.sampled_from([1, 2, 1.5, math.inf]),
          by_key=st.booleans(), label=st.sampled_from([None, None, "x", "y"]))
    def search(self, data, k, p, by_key, label):
        cands = {key: a for key, a in self.alpha.items()
                 if label is None or self.model[key][2] == label}
        where = None if label is None else {"label": label}
        if by_key and self.model:
            qkey = data.draw(st.sampled_from(sorted(self.model)))
            res = self.idx.search(qkey, k=k, p=p, where=where)
            qa = self.alpha[qkey]
        else:
            q = data.draw(measures)
            res = self.idx.search([q], k=k, p=p, where=where)
            qa = MODEL.alphas(q)
        exp = {key: MODEL.dist(qa, a, p, ETA) for key, a in cands.items()}
        assert len(res.keys) == 1
        check_topk(res.keys[0], np.asarray(res.distances)[0], exp, k,
                   what=f"search k={k} p={p} where={where}")

    # ------------------------------------------------------------------ invariants
    @invariant()
    def sizes_agree(self):
        assert len(self.idx) == len(self.model)
        keys = list(self.idx)
        assert len(keys) == len(set(keys))
        assert set(keys) == set(self.model)
        if self.order is not None:
            assert keys == self.order

    @invariant()
    def membership(self):
        for i in range(30):
            key = f"key{i}"
            assert (key in self.idx) == (key in self.model)


TestIndexStateMachine = pytest.mark.filterwarnings(
    # Labels are drawn at random: some searches ask for one no document has.
    "ignore:no live document has the label:UserWarning")(IndexMachine.TestCase)
TestIndexStateMachine.settings = settings(
    max_examples=examples(30),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much],
)
