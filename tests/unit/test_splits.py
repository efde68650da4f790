import pytest

from ftagent.benchmarks.splits import split_items, split_ranges, split_sizes


@pytest.mark.parametrize("n,val,test", [(0, 0, 0), (1, 1, 0), (2, 1, 1), (3, 1, 1), (201, 100, 100),
                                        (1000, 100, 100)])
def test_split_sizes(n, val, test):
    assert split_sizes(n) == (val, test)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 201, 1000])
def test_splits_never_overlap(n):
    items = list(range(n))
    parts = split_items(items)
    assert not set(parts["validation"]) & set(parts["test"])
    assert parts["validation"] == items[: len(parts["validation"])]
    assert parts["test"] == items[len(items) - len(parts["test"]):]


def test_n1_goes_to_validation():
    assert split_items(["x"]) == {"validation": ["x"], "test": []}


def test_odd_n_leaves_middle_unused():
    assert split_items([1, 2, 3]) == {"validation": [1], "test": [3]}


def test_limit_caps_both():
    assert split_sizes(200, limit=20) == (20, 20)
    assert split_ranges(200, limit=20) == {"validation": (0, 20), "test": (180, 200)}
