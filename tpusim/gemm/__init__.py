"""Distributed GeMM algorithms as SPMD chip programs, the dataflow role table, and their twins."""
