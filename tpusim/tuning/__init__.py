"""The autotuner: mesh shape, per-layer dataflow, transposition and slice count for a training step.

``space`` enumerates feasible meshes and layer options, ``layer_costs`` prices them (closed-form twins or
DES, cached), ``dp`` finds a mesh's best plans over the layout flags, ``capacity`` gates on memory, and
``search`` ties them together (analytic pruning, simulated refinement, or exhaustive simulation) through its
stages: ``gates`` (the layouts admitted), ``ranking``, ``refinement`` and ``finalists``, each over one
``mesh_search`` per mesh, with ``notes`` for the result's notes and ``spec`` for the request.
"""

from tpusim.tuning.layer_costs import CostCache
from tpusim.tuning.result import Choice, MeshReport, TuneResult
from tpusim.tuning.search import TuneSpec, tune

__all__ = ["Choice", "CostCache", "MeshReport", "TuneResult", "TuneSpec", "tune"]
