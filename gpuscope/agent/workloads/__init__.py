"""Which pod uses which GPU: the kubelet's pod-resources API (device plugin and DRA
devices), cgroups, pod metadata from the API server, and the attribution that
joins them."""
