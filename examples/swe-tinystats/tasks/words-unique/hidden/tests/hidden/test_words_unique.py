from tinystats.words import unique_words


def test_first_appearance_order():
    # Deliberately flaky with the gold patch, which builds the result from a set: the order of
    # a set of strings changes with Python's per-process hash seed.
    assert unique_words("pear fig pear kiwi") == ["pear", "fig", "kiwi"]
