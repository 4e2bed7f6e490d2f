"""The pipeline's stages, one module per `dvc.yaml` stage: each reads the settings and the project's
paths, and wires the library (data, feedback, retriever, evaluation) together in a few named steps
(load, build, run, write); the library modules under them take explicit arguments. Which stages have
moved here, and which runners still sit in their library modules, is in docs/pipeline.md ("Layout").
"""
