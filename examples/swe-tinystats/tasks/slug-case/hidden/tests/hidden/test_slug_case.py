from tinystats.slug import slugify


def test_mixed_case_is_lowered():
    assert slugify("Hello World") == "hello-world"


def test_capitals_and_digits():
    assert slugify("Release 2.0 Notes") == "release-2-0-notes"
