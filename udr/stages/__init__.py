"""The pipeline's stages, one module per `dvc.yaml` stage (its `udr <command>`): each reads the settings and
the project's paths, and wires the library (data, feedback, lm, retriever, evaluation) together in a few
named steps (load, build, run, write); the library modules under them take explicit arguments or one
settings section. What earlier work is resumed or reused (fingerprints) and the records are decided here.
What else reads a project (`udr show`, `udr rounds`, `udr init-task`, saved evaluations compared, the
project's inference LM and retrievers) is in :mod:`udr.project` (`tests/test_layout.py` checks both).
"""
