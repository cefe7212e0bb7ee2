"""Local stand-in for the one `chex` function `model.py` uses (not part of the upstream repository).

chex is not installed in this project; `chex.assert_shape(x, shape)` checks that `x.shape` matches `shape`,
where `None` in `shape` matches any size. This shim keeps that check.
"""


def assert_shape(x, expected):
    actual = tuple(x.shape)
    expected = tuple(expected)
    if len(actual) != len(expected) or any(e is not None and e != a for a, e in zip(actual, expected)):
        raise AssertionError(f"shape {actual} does not match expected {expected}")
