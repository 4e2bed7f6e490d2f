"""What reads a project's settings and paths but is no DVC stage: the commands that look around a project
(`udr show`, :mod:`udr.project.show`; `udr rounds`, :mod:`udr.project.rounds`; `udr init-task`,
:mod:`udr.project.workspace`), its saved evaluations compared (:mod:`udr.project.saved_evaluations`, for
`udr report` and `udr exp`), and its inference LM and retrievers (:mod:`udr.project.evaluation`, for
`udr evaluate` and the `udr exp` instruments). The stages (udr/stages) and the layers above them may import
these modules; they import no stage (`tests/test_layout.py`).
"""
