"""The transformer workload: models, layers as ops, the training step, memory."""
