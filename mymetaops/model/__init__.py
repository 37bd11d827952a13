"""The analytical performance model: hardware specs, per-op cost models, and kernel selection.

Pure Python (torch is imported only by `detect_hardware`), so decisions for any device can be
inspected on any machine: `python -m mymetaops.model explain embedding_bag --device MI350X ...`.
"""
from .embedding_bag import OPS, EmbeddingBagProblem
from .hardware import HARDWARE, HardwareSpec, detect_hardware, get_hardware
from .select import Candidate, Decision, decide, format_decision

__all__ = ["OPS", "EmbeddingBagProblem", "HARDWARE", "HardwareSpec", "detect_hardware", "get_hardware",
           "Candidate", "Decision", "decide", "format_decision"]
