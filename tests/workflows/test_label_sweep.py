"""udr.workflows.label_sweep: the grid of label-aware settings swept on validation, and the choice."""

from __future__ import annotations

from udr.workflows.label_sweep import PLAIN, choose, grid, point_name


def test_the_grid_starts_with_the_plain_retriever_and_names_each_point():
    points = grid()
    assert points[0] == PLAIN and len(points) == len(set(map(str, points)))
    names = [point_name("udr", p) for p in points]
    assert names[0] == "udr" and names[1] == "udr-labels-w0-balanced"
    assert "udr-labels-w0.3-noquota" in names and "udr-labels-w3-balanced" in names


def test_the_best_validation_score_is_chosen_and_ties_go_to_the_earlier_point():
    scores = {point_name("udr", p): 50.0 for p in grid()}
    assert choose("udr", scores) == PLAIN  # all level: the plain retriever
    scores["udr-labels-w1-balanced"] = scores["udr-labels-w0.3-noquota"] = 60.0
    chosen = choose("udr", scores)
    assert (chosen.weight, chosen.per_label) == (0.3, None)
