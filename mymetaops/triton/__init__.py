"""Triton kernels: candidates next to the native CUDA/HIP kernels and fallbacks where those are missing."""
