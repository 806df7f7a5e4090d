"""What the agent reads from its node: GPUs through NVML, DCGM or a dcgm-exporter
page (or the simulator), and InfiniBand ports from sysfs; each source a small
Protocol with a real and a simulated implementation."""
