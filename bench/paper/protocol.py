"""The paper's evaluation protocol for a precomputed distance matrix.

SVM (Section 5 of the paper, following Le et al. 2019): random 70/30
train/test splits; the kernel exp(-t d) with 1/t chosen from
{q_s, 2 q_s, 5 q_s}, q_s the s% quantile of the training distances, and the
SVM's C from {0.01, 0.1, 1, 10, 100}, both by cross-validation inside the
training part; one-vs-one multi-class (libsvm through scikit-learn's SVC). An
indefinite Gram matrix (graph OT) is regularised by adding to its diagonal
the magnitude of its smallest eigenvalue, on the training part.

k-NN: the number of neighbours k in 1..19 chosen by cross-validation inside
the training part, the same splits.
"""
import time

import numpy as np
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.svm import SVC

C_VALUES = (0.01, 0.1, 1.0, 10.0, 100.0)
QUANTILES = tuple(range(10, 100, 10))
MULTIPLIERS = (1, 2, 5)
KNN_K = tuple(range(1, 20))


def splits(labels, n_splits=10, test_size=0.3, seed=0):
    """Stratified random 70/30 splits: (train, test) index arrays."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_splits):
        train, test = train_test_split(np.arange(len(labels)), test_size=test_size,
                                       stratify=labels, random_state=int(rng.integers(2**31)))
        out.append((np.sort(train), np.sort(test)))
    return out


def _t_values(D_train, quantiles, multipliers):
    """t with 1/t in {m q_s}: q_s quantiles of the training distances."""
    upper = D_train[np.triu_indices_from(D_train, k=1)]
    positive = upper[upper > 0]
    if len(positive) == 0:
        return [1.0]
    qs = np.percentile(positive, quantiles)
    return sorted({1.0 / (m * q) for q in qs for m in multipliers if q > 0})


def _gram(D, t, regularize, train_rows=None):
    K = np.exp(-t * D)
    if regularize and train_rows is not None:
        # Only the training block goes into the fit; its shift is applied
        # there (a test row's kernel values are not on the diagonal).
        block = K[np.ix_(train_rows, train_rows)]
        smallest = np.linalg.eigvalsh(block)[0]
        return K, max(0.0, -smallest)
    return K, 0.0


def _svm_fit_score(K, y, train, test, C, shift):
    K_train = K[np.ix_(train, train)]
    if shift:
        K_train = K_train + shift * np.eye(len(train))
    model = SVC(kernel="precomputed", C=C, decision_function_shape="ovo")
    model.fit(K_train, y[train])
    return float(np.mean(model.predict(K[np.ix_(test, train)]) == y[test]))


def svm_accuracy(D, labels, split_list, regularize=False, inner_folds=3,
                 quantiles=QUANTILES, multipliers=MULTIPLIERS, c_values=C_VALUES, seed=0):
    """Test accuracy per split with (t, C) chosen by inner cross-validation.

    Returns dict(accuracies=[...], chosen=[(t, C), ...], seconds=float).
    """
    started = time.perf_counter()
    y = np.asarray(labels)
    accuracies, chosen = [], []
    for split_no, (train, test) in enumerate(split_list):
        t_values = _t_values(D[np.ix_(train, train)], quantiles, multipliers)
        folds = list(StratifiedKFold(inner_folds, shuffle=True, random_state=seed + split_no)
                     .split(train, y[train]))
        best = (-1.0, None, None)
        for t in t_values:
            K, _ = _gram(D, t, False)
            shifts = [_gram(D, t, True, train[inner_train])[1] if regularize else 0.0
                      for inner_train, _ in folds]
            for C in c_values:
                scores = []
                for (inner_train, inner_test), shift in zip(folds, shifts):
                    scores.append(_svm_fit_score(K, y, train[inner_train], train[inner_test], C,
                                                 shift))
                score = float(np.mean(scores))
                if score > best[0]:
                    best = (score, t, C)
        _, t, C = best
        K, shift = _gram(D, t, regularize, train)
        accuracies.append(_svm_fit_score(K, y, train, test, C, shift))
        chosen.append((t, C))
    return {"accuracies": accuracies, "chosen": chosen,
            "seconds": time.perf_counter() - started}


def knn_accuracy(D, labels, split_list, inner_folds=3, k_values=KNN_K, seed=0):
    """k-NN test accuracy per split, k chosen by inner cross-validation."""
    y = np.asarray(labels)
    accuracies, chosen = [], []
    for split_no, (train, test) in enumerate(split_list):
        folds = list(StratifiedKFold(inner_folds, shuffle=True, random_state=seed + split_no)
                     .split(train, y[train]))
        best = (-1.0, None)
        for k in k_values:
            scores = []
            for inner_train, inner_test in folds:
                rows_train, rows_test = train[inner_train], train[inner_test]
                if k > len(rows_train):
                    continue
                model = KNeighborsClassifier(n_neighbors=k, metric="precomputed")
                model.fit(D[np.ix_(rows_train, rows_train)], y[rows_train])
                scores.append(np.mean(model.predict(D[np.ix_(rows_test, rows_train)]) == y[rows_test]))
            if scores and np.mean(scores) > best[0]:
                best = (float(np.mean(scores)), k)
        k = best[1]
        model = KNeighborsClassifier(n_neighbors=k, metric="precomputed")
        model.fit(D[np.ix_(train, train)], y[train])
        accuracies.append(float(np.mean(model.predict(D[np.ix_(test, train)]) == y[test])))
        chosen.append(k)
    return {"accuracies": accuracies, "chosen": chosen}
