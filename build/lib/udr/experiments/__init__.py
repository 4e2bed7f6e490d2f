"""`udr exp`: DVC experiments, sweeps and the paper's analyses."""
