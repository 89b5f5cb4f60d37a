"""The paper's evaluation protocol (bench/paper/protocol.py) on distance
matrices whose answer is known."""

import numpy as np
import pytest
from _support.bench import bench_module

pytest.importorskip("sklearn")
protocol = bench_module("paper.protocol")
_t_values, knn_accuracy = protocol._t_values, protocol.knn_accuracy
splits, svm_accuracy = protocol.splits, protocol.svm_accuracy


def clustered(n_per_class=30, classes=3, gap=10.0, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.arange(classes) * gap
    x = np.concatenate([c + rng.normal(size=n_per_class) for c in centres])
    labels = np.repeat([f"c{i}" for i in range(classes)], n_per_class)
    return np.abs(x[:, None] - x[None, :]), labels


def test_splits_are_stratified_70_30_and_disjoint():
    labels = np.repeat(["a", "b"], [40, 60])
    for train, test in splits(labels, n_splits=4, seed=1):
        assert len(test) == 30 and not set(train) & set(test)
        assert sorted(np.unique(labels[test], return_counts=True)[1]) == [12, 18]


def test_t_grid_comes_from_training_quantiles():
    D = np.array([[0, 1, 4], [1, 0, 9], [4, 9, 0]], dtype=float)
    ts = _t_values(D, quantiles=(50,), multipliers=(1, 2))
    assert ts == pytest.approx(sorted([1 / 4.0, 1 / 8.0]))  # the median of {1, 4, 9} is 4


def test_separable_classes_are_learned_and_random_labels_are_not():
    D, labels = clustered()
    split_list = splits(labels, n_splits=3, seed=0)
    svm = svm_accuracy(D, labels, split_list, quantiles=(10, 50, 90), c_values=(1.0, 10.0))
    knn = knn_accuracy(D, labels, split_list, k_values=(1, 3, 5))
    assert min(svm["accuracies"]) == 1.0 and min(knn["accuracies"]) == 1.0
    shuffled = np.random.default_rng(5).permutation(labels)
    svm = svm_accuracy(D, shuffled, splits(shuffled, n_splits=3, seed=0),
                       quantiles=(10, 50, 90), c_values=(1.0, 10.0))
    assert np.mean(svm["accuracies"]) < 0.6  # chance is 1/3


def test_indefinite_gram_is_regularised_and_still_learns():
    D, labels = clustered(seed=3)
    D = D + 0.5 * (1 - np.eye(len(D)))  # not a metric of a Hilbert space any more
    result = svm_accuracy(D, labels, splits(labels, n_splits=2, seed=0), regularize=True,
                          quantiles=(50,), c_values=(1.0,))
    assert min(result["accuracies"]) > 0.9
