"""Where the GPUs go: allocation (whole, fractional and shared GPUs), fragmentation
(FGD) and what keeps pending pods from starting."""
