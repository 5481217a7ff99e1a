"""The generated gRPC modules of the `agora.v1` proto package (`make protos` regenerates them)."""
