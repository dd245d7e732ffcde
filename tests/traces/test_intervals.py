from dpbench.traces.intervals import clip, intersection, length, subtract, union


def test_union_merges_overlaps_and_touching_intervals_and_drops_empty_ones():
    assert union([(5, 7), (0, 2), (1, 3), (3, 4), (6, 6)]) == [(0, 4), (5, 7)]
    assert length([(0, 2), (1, 3), (10, 11)]) == 4


def test_intersection_subtract_and_clip():
    a, b = [(0, 10), (20, 30)], [(5, 25)]
    assert intersection(a, b) == [(5, 10), (20, 25)]
    assert subtract(a, b) == [(0, 5), (25, 30)]
    assert subtract([(0, 10)], [(2, 3), (5, 6)]) == [(0, 2), (3, 5), (6, 10)]
    assert clip([(0, 10), (12, 14), (-5, -1)], 5, 13) == [(5, 10), (12, 13)]
