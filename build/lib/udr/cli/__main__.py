"""`python -m udr.cli` (and `torchrun -m udr.cli`) runs the command line."""

from udr.cli import main

main()
