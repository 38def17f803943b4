from tinystats.clamp import clamp
from tinystats.mean import mean
from tinystats.median import median
from tinystats.parse import parse_int
from tinystats.slug import slugify
from tinystats.words import unique_words


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_parse_plain():
    assert parse_int("42") == 42


def test_slug_lowercase_input():
    assert slugify("hello world") == "hello-world"


def test_unique_words_single():
    assert unique_words("word") == ["word"]


def test_clamp_rejects_empty_interval():
    try:
        clamp(1, 2, 0)
    except ValueError:
        return
    raise AssertionError("expected ValueError")


def test_mean_rejects_empty():
    try:
        mean([])
    except ValueError:
        return
    raise AssertionError("expected ValueError")
