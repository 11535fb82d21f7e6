"""The SimPy core: simulation context, links, chips, channels, tensors and the tracer."""
