"""The ops: importing this package loads the compiled library (registers every schema and its C++
kernels), connects the C++ dispatch to the model (`dispatch`) and registers each family's fake
kernels and Triton launchers (one module per op family)."""
from mymetaops.ops import dispatch  # noqa: F401  (loads mymetaops._C first)
from mymetaops.ops import embedding_bag  # noqa: F401
from mymetaops.ops import gemm  # noqa: F401
from mymetaops.ops import jagged  # noqa: F401
from mymetaops.ops import attention  # noqa: F401
