"""What a committed difference must show to be a claim: the bootstrap's resamples and the margin by which an
interval must clear zero (:class:`udr.evaluation.bootstrap.Interval`'s `resolved`). No heavy import: serving
reads the margin too."""

# Resamples of every committed interval: at 1000 an interval's ends move by tenths of a point between seeds of
# the bootstrap itself, enough to move a bound across the margin below.
BOOTSTRAP_RESAMPLES = 10_000
# Points by which an interval must clear 0 for its difference to count as resolved (a claim, shown in bold):
# more than the committed averages and interval ends moved between the CPU kinds of this project's machines
# (0.3 points at most for untrained retrievers, docs/reproducibility.md), so that a claim holds on all of them.
CLAIM_MARGIN = 0.5
