"""Kubernetes names gpuscope reads and writes: node labels (NVIDIA's GPU feature discovery,
topology), pod labels and annotations (notebooks, queues, fractional GPUs) and extended
resource names.

The collector's inventory parses objects by these names, the agent lists the GPU resources
by them and the simulator writes its objects with them, so all three agree by construction.
Standard library only: the agent imports this package too.
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
#: GPU memory in MiB, as GPU feature discovery labels it.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
#: Time-slicing replicas per GPU, as GPU feature discovery labels it.
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
POOL_LABEL = "gpuscope.io/pool"
RACK_LABEL = "topology.gpuscope.io/rack"
#: The leaf-switch group a node's rails connect to, under topograph's (older) label key.
LEAF_LABEL = "network.topology.nvidia.com/leaf"
#: ``gpuscope.io/ib-rail-<i>: mlx5_<i>``: the HCA on rail i (beside GPU i).
IB_RAIL_LABEL_PREFIX = "gpuscope.io/ib-rail-"
FRACTION_ANNOTATION = "gpu-fraction"
#: GPU memory in MiB a fractional pod asks for (KAI/Run:ai), instead of a fraction.
GPU_MEMORY_ANNOTATION = "gpu-memory"
NOTEBOOK_LABEL = "notebook-name"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta1"
