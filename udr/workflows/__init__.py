"""Where the project's stages are composed: a run that chains several stages (`udr adapt`,
:mod:`udr.workflows.adapt`) lives here, and the commands (udr/cli) only parse its options into a request
and show its outcome. Besides the commands, this is the only layer that imports udr/stages; nothing but the
commands imports it (`tests/test_layout.py`).
"""
