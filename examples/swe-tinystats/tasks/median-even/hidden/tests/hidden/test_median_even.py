from tinystats.median import median


def test_median_even_length_averages_the_middle_pair():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_two_values():
    assert median([10, 20]) == 15
