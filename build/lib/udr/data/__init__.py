"""Stage 1, data: the task registry, the sources it reads, and `udr prepare`."""
