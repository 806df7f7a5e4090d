"""Generated gRPC code for the kubelet's pod-resources v1 API.

``podresources_v1.proto`` is written here to match the field numbers of upstream
``k8s.io/kubelet/pkg/apis/podresources/v1/api.proto``; the ``*_pb2*.py`` modules are
generated from it and must not be edited by hand. Regenerate from the repository root with::

    .venv/bin/python -m grpc_tools.protoc -I gpuscope/agent/proto \\
        --python_out=gpuscope/agent/proto --grpc_python_out=gpuscope/agent/proto \\
        gpuscope/agent/proto/podresources_v1.proto
    sed -i 's/^import \\(podresources_v1_pb2\\) as/from gpuscope.agent.proto import \\1 as/' \\
        gpuscope/agent/proto/podresources_v1_pb2_grpc.py

The second step turns protoc's top-level import into a package import. The generated code
checks at import time that the installed ``grpcio``/``protobuf`` are at least the versions of
the ``grpcio-tools`` that generated it, so regenerate after lowering those pins.

Import these modules only through :mod:`gpuscope.agent.workloads.podresources`, which gives them
types.
"""
