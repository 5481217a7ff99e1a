"""Agora: a two-level resource-offer cluster manager in the line of Apache Mesos.

One import package, whose parts live in the repository's top-level folders:

    agora.common            shared value code: resources, attributes, ids, logging, gRPC plumbing
    agora.master            the master daemon (agora.master.allocator: the pure allocation engine)
    agora.agent             the agent daemon
    agora.frameworks.sdk    the framework SDK (short form for framework authors: agora.sdk)
    agora.frameworks.batch  the batch framework; agora.frameworks.service, the service framework
    agora.cli               the `agora` command
    agora.v1                the generated gRPC modules (protos/agora/v1)

Importing `agora` imports none of them.
"""

__version__ = "0.1.0"
