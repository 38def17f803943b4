from tinystats.parse import parse_int


def test_thousands_separator():
    assert parse_int("1,234") == 1234


def test_separator_and_spaces():
    assert parse_int(" 12,000 ") == 12000
