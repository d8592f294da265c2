"""The Redis frontier: request serialization, queues and duplicate filtering."""
