"""The pipeline's stages, one module per `dvc.yaml` stage: each reads the settings and the project's
paths, and wires the library (data, feedback, retriever, evaluation) together in a few named steps
(load, build, run, write). The library modules under them take explicit arguments.

So far: `score` (`udr score`, round 0 and later rounds' `rescore`) and `report` (`udr report`). The
other stages' runners still sit in their library modules (`run_prepare`, `run_candidates`,
`run_train_stage`, `run_mine`, `run_index`, `run_evaluate`) and move here one by one, each move proven
result-neutral by re-running the stages it touches.
"""
