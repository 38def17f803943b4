from tinystats.clamp import clamp


def test_clamp_inside():
    assert clamp(1, 0, 3) == 1


def test_clamp_below():
    assert clamp(-1, 0, 3) == 0


def test_clamp_above():
    assert clamp(5, 0, 3) == 3
