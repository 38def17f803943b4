from tinystats.mean import mean


def test_mean_of_three():
    assert mean([1, 2, 3]) == 2


def test_mean_of_one():
    assert mean([5]) == 5
