"""Python wrappers, fake kernels, autograd and GPU dispatch, one module per op family."""
