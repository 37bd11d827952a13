"""Builds mymetaops._C.

CPU kernels always; cuda/ when torch is a CUDA build, hip/ when torch is a ROCm build.

Sources (every folder searched recursively, so a family may span a folder of its own):
  csrc/**/*.cpp         host code: op registration, CPU kernels, autograd
  csrc/**/*_gpu.cpp     the GPU glue (launchers' callers; CUDA/HIP headers allowed): built only
                        with GPU kernels
  cuda/**/*.cu          CUDA kernels
  hip/**/*.hip          HIP kernels (hip/shim holds the HIP-on-CUDA headers only)
Include path: csrc/include (scripts/check_cuda.sh and scripts/check_hip.sh compile with the same).
The CUDA build also needs CUTLASS's headers, from the PyPI package nvidia-cutlass (requirements.txt):
cuda/gemm's kernels are CUTLASS 3.x templates.

Install into an environment that already has torch: the extension is compiled against it, so
without build isolation:
  pip install --no-build-isolation .       (or -e . for an editable install)
Environment:
  MYMETAOPS_GPU=auto|0|1        auto: GPU kernels when torch has CUDA/ROCm and its toolkit is found
                                (else CPU only, said loudly); 0: CPU only; 1: GPU or fail.
  MYMETAOPS_CUDA_ARCHS="90a;100a"  CUDA targets (compute capabilities, ';'-separated).
  PYTORCH_ROCM_ARCH="gfx942;gfx950"  ROCm targets (torch's own variable).
  MYMETAOPS_HIP_ON_CUDA=1       build hip/ instead of cuda/ through the HIP-on-CUDA shim
                                (hip/shim), to run the HIP kernels' logic on an NVIDIA GPU.
  MAX_JOBS                      parallel compiles (torch's ninja build).
"""
import glob
import os
import sys
import sysconfig

from setuptools import setup

try:
    import torch
except ImportError:
    sys.exit("mymetaops: the build needs torch installed first (the extension is compiled against "
             "it); install torch, then: pip install --no-build-isolation .")
from torch.utils.cpp_extension import CUDA_HOME, ROCM_HOME, BuildExtension, CppExtension, CUDAExtension

ROOT = os.path.dirname(os.path.abspath(__file__))


def env_flag(name, default):
    return os.environ.get(name, default).strip().lower()


def rel(paths):
    return sorted(os.path.relpath(p, ROOT) for p in paths)


def sources(folder, pattern):
    """Every file matching pattern under folder, subfolders included, relative to the root."""
    return rel(glob.glob(os.path.join(ROOT, folder, "**", pattern), recursive=True))


def nvidia_wheel_includes():
    """CUDA torch wheels ship cuBLAS/cuSPARSE headers, which ATen's CUDA headers include."""
    try:
        import nvidia  # the nvidia-* wheels torch depends on
    except ImportError:
        return []
    return [d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "cu*", "include"))]


def cutlass_includes():
    """CUTLASS's header folders inside the nvidia-cutlass wheel (its cutlass_library package).

    Found without importing the package (its import pulls in heavy dependencies). The include/
    tree holds cute/ and cutlass/; tools/util/include the host utilities.
    """
    import importlib.util
    spec = importlib.util.find_spec("cutlass_library")
    roots = list(spec.submodule_search_locations or []) if spec else []
    for root in roots:
        source = os.path.join(root, "source")
        if os.path.exists(os.path.join(source, "include", "cutlass", "cutlass.h")):
            return [os.path.join(source, "include"), os.path.join(source, "tools", "util", "include")]
    sys.exit("mymetaops: the CUDA build needs CUTLASS's headers from the nvidia-cutlass package: "
             "pip install nvidia-cutlass==4.2.0 (see requirements.txt)")


def hip_on_cuda_sources():
    """Wrap each hip/**/*.hip in a .cu so nvcc compiles it (the shim maps the HIP API to CUDA).

    The wrappers mirror hip/'s folders: hip/a/x.hip and hip/b/x.hip get distinct objects.
    """
    wrappers = []
    for hip_file in sources("hip", "*.hip"):
        name = os.path.relpath(hip_file, "hip")[: -len(".hip")] + ".cu"
        wrapper = os.path.join(ROOT, "build", "hip_on_cuda", name)
        os.makedirs(os.path.dirname(wrapper), exist_ok=True)
        text = f'#include "{os.path.join(ROOT, hip_file)}"\n'
        if not os.path.exists(wrapper) or open(wrapper).read() != text:
            with open(wrapper, "w") as f:
                f.write(text)
        wrappers.append(wrapper)
    return rel(wrappers)


def loaded_libstdcxx():
    """The shared libstdc++ this process runs with (torch is loaded, so torch's), or None.

    The extension must use the C++ runtime libtorch uses: strings, exceptions and streams cross
    between them. Some toolchains find only a static libstdc++.a first on their library path (the
    H200 machine's /opt/gcc does), so a plain -lstdc++ links a second copy into the extension whose
    locale is never set up: formatting an integer into an error message then segfaulted (or printed
    nothing). Linking this file by its path, after the objects, makes the shared one resolve
    every C++ runtime symbol, whatever the toolchain's search order.
    """
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libstdc++.so") and os.path.exists(path):
                    return path
    except OSError:  # not Linux: no /proc
        pass
    return None


def extension():
    cpu_sources = sources("csrc", "*.cpp")
    gpu_glue = [s for s in cpu_sources if s.endswith("_gpu.cpp")]
    cpu_sources = [s for s in cpu_sources if s not in gpu_glue]
    include_dirs = [os.path.join(ROOT, "csrc", "include")]
    cxx_flags = ["-O3"]  # the C++ standard is the one torch asks for (C++20 from torch 2.13)
    libstdcxx = loaded_libstdcxx()
    link_args = [libstdcxx] if libstdcxx else []
    want_gpu = env_flag("MYMETAOPS_GPU", "auto")
    toolkit = ROCM_HOME if torch.version.hip else CUDA_HOME if torch.version.cuda else None
    if want_gpu == "1" and toolkit is None:
        sys.exit("MYMETAOPS_GPU=1: torch has no CUDA/ROCm, or its toolkit was not found "
                 "(set CUDA_HOME / ROCM_HOME)")
    if want_gpu == "auto" and toolkit is None and (torch.version.cuda or torch.version.hip):
        print("mymetaops: WARNING: torch is a GPU build but no CUDA/ROCm toolkit was found; "
              "building the CPU kernels only (set CUDA_HOME / ROCM_HOME)", file=sys.stderr)
    want_gpu = want_gpu != "0" and toolkit is not None

    if want_gpu and torch.version.hip:
        os.environ.setdefault("PYTORCH_ROCM_ARCH", "gfx942;gfx950")
        return CUDAExtension(
            "mymetaops._C", cpu_sources + gpu_glue + sources("hip", "*.hip"),
            include_dirs=include_dirs,
            extra_compile_args={"cxx": cxx_flags + ["-DMYMETAOPS_ROCM"],
                                "nvcc": ["-O3"]}, extra_link_args=link_args)
    if want_gpu and torch.version.cuda:
        archs = os.environ.get("MYMETAOPS_CUDA_ARCHS", "90a;100a").split(";")
        gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs if a]
        # NDEBUG: a device-side assert() is an extern call, and ptxas serializes every wgmma of a
        # kernel that has one (warning C7510; CUTLASS's GEMMs lose ~10%).
        nvcc_flags = ["-O3", "-DNDEBUG", "--threads", "0"] + gencode  # archs in parallel
        if env_flag("MYMETAOPS_HIP_ON_CUDA", "0") == "1":
            kernels = hip_on_cuda_sources()
            include_dirs.append(os.path.join(ROOT, "hip", "shim"))
        else:
            kernels = sources("cuda", "*.cu")
            # -isystem: CUTLASS's own warnings are not ours (nvcc compiles only, cuda/ needs it).
            for d in cutlass_includes():
                nvcc_flags += ["-isystem", d]
        return CUDAExtension(
            "mymetaops._C", cpu_sources + gpu_glue + kernels,
            include_dirs=include_dirs + nvidia_wheel_includes(),
            extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags},
            extra_link_args=link_args)
    return CppExtension("mymetaops._C", cpu_sources, include_dirs=include_dirs,
                        extra_compile_args={"cxx": cxx_flags}, extra_link_args=link_args)


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """torch's build_ext; editable installs keep their objects in build/ too.

    setuptools builds an editable install (pip install -e .) in a throwaway folder, so each
    re-install would recompile everything; in the folder a plain build uses, ninja recompiles only
    what changed. The extension itself lands next to the sources (setuptools' editable mode), where
    the editable import finds it.
    """

    def finalize_options(self):
        super().finalize_options()
        if self.editable_mode:
            tag = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
            self.build_temp = os.path.join(ROOT, "build", f"temp.{tag}")


# Metadata and packages: pyproject.toml.
setup(ext_modules=[extension()], cmdclass={"build_ext": BuildExt})
