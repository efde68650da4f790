"""The split rule: sizes min(100, N//2), disjoint, deterministic, seed-42 shuffled, stratified on request."""

from collections import Counter

import pytest

from ftagent.benchmarks.splits import permutation, split_indices, split_items, split_sizes, unused_indices


@pytest.mark.parametrize("n,val,test", [(0, 0, 0), (1, 1, 0), (2, 1, 1), (3, 1, 1), (201, 100, 100),
                                        (1000, 100, 100)])
def test_split_sizes(n, val, test):
    assert split_sizes(n) == (val, test)
    parts = split_indices(n)
    assert (len(parts["validation"]), len(parts["test"])) == (val, test)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 201, 1000])
def test_splits_never_overlap_and_are_deterministic(n):
    items = list(range(n))
    parts = split_items(items)
    assert not set(parts["validation"]) & set(parts["test"])
    assert parts == split_items(items)
    assert sorted(unused_indices(n) + parts["validation"] + parts["test"]) == items


def test_the_order_is_numpy_default_rng_42():
    """The generator behind datasets.Dataset.shuffle(seed=42), which the reference's loaders use."""
    import numpy as np

    assert permutation(10) == [int(i) for i in np.random.default_rng(42).permutation(10)]
    parts = split_items(list(range(10)))
    assert parts["validation"] == permutation(10)[:5] and parts["test"] == permutation(10)[5:]


def test_n1_goes_to_validation():
    assert split_items(["x"]) == {"validation": ["x"], "test": []}


def test_limit_caps_both_and_is_a_prefix():
    full, capped = split_indices(200), split_indices(200, limit=20)
    assert (len(capped["validation"]), len(capped["test"])) == (20, 20)
    assert capped["validation"] == full["validation"][:20]


def test_a_file_sorted_by_label_gives_both_splits_the_same_population():
    """ChemCoTBench equivalence: 50 "Yes" then 50 "No". First/last-k made validation all-Yes, test all-No."""
    labels = ["Yes"] * 50 + ["No"] * 50
    parts = split_items(labels)
    for side in parts.values():
        assert 15 <= Counter(side)["Yes"] <= 35, Counter(side)


def test_stratified_split_gives_every_group_its_share():
    groups = [g for g, n in (("algebra", 300), ("biology", 100), ("chemistry", 100)) for _ in range(n)]
    parts = split_indices(len(groups), groups=groups)
    for side in ("validation", "test"):
        assert Counter(groups[i] for i in parts[side]) == {"algebra": 60, "biology": 20, "chemistry": 20}
    assert not set(parts["validation"]) & set(parts["test"])
    assert parts == split_indices(len(groups), groups=groups)


def test_stratified_shares_respect_small_groups_and_still_fill_k():
    groups = ["a"] * 3 + ["b"] * 400  # 'a' can give one item to each side at most
    parts = split_indices(len(groups), groups=groups)
    assert len(parts["validation"]) == len(parts["test"]) == 100
    assert Counter(groups[i] for i in parts["validation"])["a"] <= 1
    assert not set(parts["validation"]) & set(parts["test"])


def test_groups_must_match_items():
    with pytest.raises(ValueError):
        split_indices(3, groups=["a", "b"])
