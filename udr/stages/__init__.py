"""The pipeline's stages, one module per `dvc.yaml` stage and per command that reads a project (`udr
show`, `udr rounds`, `udr init-task`): each reads the settings and the project's paths, and wires the
library (data, feedback, lm, retriever, evaluation) together in a few named steps (load, build, run,
write); the library modules under them take explicit arguments or one settings section
(`tests/test_layout.py`). Resume, reuse, fingerprints and records live here.
"""
