"""The analytical performance model: hardware specs, op families (problem, candidates, cost model,
buckets), kernel selection, explain and the regret report.

Pure Python (torch is imported only by `detect_hardware`), so decisions for any device can be
inspected on any machine: `python -m mymetaops.model explain embedding_bag --device MI350X ...`.
Importing it registers every family listed in `family.FAMILY_MODULES` (each is a submodule:
`mymetaops.model.embedding_bag`).
"""
from .family import (BACKENDS, Estimate, Family, all_ops, families, family_of, get_family, register,
                     unregister)
from .hardware import HARDWARE, HardwareSpec, detect_hardware, get_hardware
from .regret import RegretReport, regret
from .select import (BucketedDecision, Candidate, Decision, decide, decide_bucketed, format_bucketed,
                     format_decision)

__all__ = ["BACKENDS", "Estimate", "Family", "all_ops", "families", "family_of",
           "get_family", "register", "unregister", "HARDWARE", "HardwareSpec", "detect_hardware",
           "get_hardware", "RegretReport", "regret", "BucketedDecision", "Candidate", "Decision", "decide",
           "decide_bucketed", "format_bucketed", "format_decision"]
