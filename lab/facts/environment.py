"""The one list of environment variables a pass records: those its libraries read that change
its numerics, speed or memory (or which devices and files it uses), each with the library that
reads it, what it changes and the documentation that says so.

A pass records the ones set in its own process (lab.inputs.manifest.pass_environment, result.json
``environment``), the manifest those of the orchestrator's start; nothing else of the
environment is read (no tokens or secrets). Adding a variable: one ``EnvVariable`` here.
"""

from __future__ import annotations

from typing import NamedTuple


class EnvVariable(NamedTuple):
    """One recorded variable: ``name``, the ``library`` that reads it, what it ``changes``
    ("numerics", "speed", "memory", "devices" or "files", comma-joined) and its ``source``
    (the documentation's address)."""

    name: str
    library: str
    changes: str
    source: str


TORCH_CUDA = "https://pytorch.org/docs/stable/cuda_environment_variables.html"
TORCH_CPU = "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
ATEN_DISPATCH = ("https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/DispatchStub.cpp "
                 "(torch.backends.cpu.get_cpu_capability)")
OPENMP = "https://www.openmp.org/spec-html/5.0/openmpch6.html"
LIBGOMP = "https://gcc.gnu.org/onlinedocs/libgomp/Environment-Variables.html"
INTEL_OMP = ("https://www.intel.com/content/www/us/en/docs/dpcpp-cpp-compiler/developer-guide-reference/"
             "2023-0/supported-environment-variables.html")
ONEMKL = ("https://www.intel.com/content/www/us/en/docs/onemkl/developer-guide-linux/2024-0/"
          "onemkl-environment-variables.html")
OPENBLAS = "https://github.com/OpenMathLib/OpenBLAS/wiki/Faq"
ONEDNN_ISA = "https://oneapi-src.github.io/oneDNN/dev_guide_cpu_dispatcher_control.html"
ONEDNN_FPMATH = "https://oneapi-src.github.io/oneDNN/dev_guide_attributes_fpmath_mode.html"
ONEDNN_CACHE = "https://oneapi-src.github.io/oneDNN/dev_guide_primitive_cache.html"
CUDA_ENV = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-environment-variables"
NVIDIA_TF32 = "https://docs.nvidia.com/deeplearning/frameworks/tensorflow-user-guide/index.html#tf32"
CUBLAS = "https://docs.nvidia.com/cuda/cublas/index.html#results-reproducibility"
NCCL = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
TORCH_NCCL = "https://pytorch.org/docs/stable/torch_nccl_environment_variables.html"
TORCH_HIP = "https://pytorch.org/docs/stable/notes/hip.html"
TUNABLEOP = "https://pytorch.org/docs/stable/cuda.tunable.html"
ROCM_ISOLATION = "https://rocm.docs.amd.com/en/latest/conceptual/gpu-isolation.html"
MIOPEN = "https://rocm.docs.amd.com/projects/MIOpen/en/latest/how-to/find-and-immediate.html"
VLLM = "https://docs.vllm.ai/en/latest/configuration/env_vars.html (vllm/envs.py of the pinned version)"
GLIBC = "https://www.gnu.org/software/libc/manual/html_node/Memory-Allocation-Tunables.html"
HF_TOKENIZERS = "https://huggingface.co/docs/tokenizers (Rust thread pool: TOKENIZERS_PARALLELISM)"
HF_HUB = "https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables"

ENV_VARIABLES: tuple[EnvVariable, ...] = (
    # which devices a pass sees
    EnvVariable("CUDA_VISIBLE_DEVICES", "CUDA", "devices", CUDA_ENV),
    EnvVariable("CUDA_DEVICE_ORDER", "CUDA", "devices", CUDA_ENV),
    EnvVariable("HIP_VISIBLE_DEVICES", "ROCm", "devices", ROCM_ISOLATION),
    EnvVariable("ROCR_VISIBLE_DEVICES", "ROCm", "devices", ROCM_ISOLATION),
    # torch: CPU kernels, TF32, allocators, tuned kernels
    EnvVariable("ATEN_CPU_CAPABILITY", "torch", "numerics, speed", ATEN_DISPATCH),
    EnvVariable("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "torch", "numerics, speed", TORCH_CUDA),
    EnvVariable("TORCH_CUDNN_V8_API_DISABLED", "torch", "speed", TORCH_CUDA),
    EnvVariable("TORCH_BLAS_PREFER_CUBLASLT", "torch", "numerics, speed", TORCH_CUDA),
    EnvVariable("PYTORCH_CUDA_ALLOC_CONF", "torch", "memory", TORCH_CUDA),
    EnvVariable("PYTORCH_NO_CUDA_MEMORY_CACHING", "torch", "memory, speed", TORCH_CUDA),
    EnvVariable("PYTORCH_HIP_ALLOC_CONF", "torch", "memory", TORCH_HIP),
    EnvVariable("PYTORCH_TUNABLEOP_ENABLED", "torch", "numerics, speed", TUNABLEOP),
    EnvVariable("HIPBLASLT_ALLOW_TF32", "torch (ROCm)", "numerics, speed", TORCH_HIP),
    # OpenMP threads, placement and waiting (torch's CPU kernels, oneDNN, MKL)
    EnvVariable("OMP_NUM_THREADS", "OpenMP", "speed", OPENMP),
    EnvVariable("OMP_PROC_BIND", "OpenMP", "speed", OPENMP),
    EnvVariable("OMP_PLACES", "OpenMP", "speed", OPENMP),
    EnvVariable("OMP_WAIT_POLICY", "OpenMP", "speed", OPENMP),
    EnvVariable("OMP_DYNAMIC", "OpenMP", "speed", OPENMP),
    EnvVariable("GOMP_CPU_AFFINITY", "libgomp", "speed", LIBGOMP),
    EnvVariable("GOMP_SPINCOUNT", "libgomp", "speed", LIBGOMP),
    EnvVariable("KMP_AFFINITY", "Intel OpenMP", "speed", INTEL_OMP),
    EnvVariable("KMP_BLOCKTIME", "Intel OpenMP", "speed", INTEL_OMP),
    # oneDNN and MKL: instruction set, numerics mode, threads, caches
    EnvVariable("ONEDNN_MAX_CPU_ISA", "oneDNN", "numerics, speed", ONEDNN_ISA),
    EnvVariable("DNNL_MAX_CPU_ISA", "oneDNN", "numerics, speed", ONEDNN_ISA),
    EnvVariable("ONEDNN_CPU_ISA_HINTS", "oneDNN", "speed", ONEDNN_ISA),
    EnvVariable("ONEDNN_DEFAULT_FPMATH_MODE", "oneDNN", "numerics, speed", ONEDNN_FPMATH),
    EnvVariable("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "oneDNN", "speed, memory", ONEDNN_CACHE),
    EnvVariable("MKL_NUM_THREADS", "oneMKL", "speed", ONEMKL),
    EnvVariable("MKL_DYNAMIC", "oneMKL", "speed", ONEMKL),
    EnvVariable("MKL_CBWR", "oneMKL", "numerics, speed", ONEMKL),
    EnvVariable("MKL_ENABLE_INSTRUCTIONS", "oneMKL", "numerics, speed", ONEMKL),
    EnvVariable("OPENBLAS_NUM_THREADS", "OpenBLAS", "speed", OPENBLAS),
    EnvVariable("OPENBLAS_CORETYPE", "OpenBLAS", "numerics, speed", OPENBLAS),
    # CUDA, NVIDIA's libraries, NCCL
    EnvVariable("CUDA_LAUNCH_BLOCKING", "CUDA", "speed", CUDA_ENV),
    EnvVariable("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA", "speed", CUDA_ENV),
    EnvVariable("CUDA_MODULE_LOADING", "CUDA", "memory, speed", CUDA_ENV),
    EnvVariable("NVIDIA_TF32_OVERRIDE", "cuBLAS, cuDNN", "numerics, speed", NVIDIA_TF32),
    EnvVariable("CUBLAS_WORKSPACE_CONFIG", "cuBLAS", "numerics, speed, memory", CUBLAS),
    EnvVariable("NCCL_ALGO", "NCCL", "numerics, speed", NCCL),
    EnvVariable("NCCL_PROTO", "NCCL", "speed", NCCL),
    EnvVariable("NCCL_P2P_DISABLE", "NCCL", "speed", NCCL),
    EnvVariable("NCCL_SHM_DISABLE", "NCCL", "speed", NCCL),
    EnvVariable("NCCL_IB_DISABLE", "NCCL", "speed", NCCL),
    EnvVariable("NCCL_NVLS_ENABLE", "NCCL", "speed, memory", NCCL),
    EnvVariable("NCCL_BUFFSIZE", "NCCL", "speed, memory", NCCL),
    EnvVariable("NCCL_MIN_NCHANNELS", "NCCL", "speed", NCCL),
    EnvVariable("TORCH_NCCL_BLOCKING_WAIT", "torch (NCCL)", "speed", TORCH_NCCL),
    # ROCm's kernel libraries
    EnvVariable("HSA_OVERRIDE_GFX_VERSION", "ROCm", "numerics, speed", ROCM_ISOLATION),
    EnvVariable("MIOPEN_FIND_MODE", "MIOpen", "numerics, speed", MIOPEN),
    # vLLM (read by the engine process the pass starts)
    EnvVariable("VLLM_CPU_KVCACHE_SPACE", "vLLM", "memory", VLLM),
    EnvVariable("VLLM_CPU_OMP_THREADS_BIND", "vLLM", "speed", VLLM),
    EnvVariable("VLLM_CPU_NUM_OF_RESERVED_CPU", "vLLM", "speed", VLLM),
    EnvVariable("VLLM_CPU_ATTN_SPLIT_KV", "vLLM", "numerics, speed", VLLM),
    EnvVariable("VLLM_CPU_MOE_PREPACK", "vLLM", "speed", VLLM),
    EnvVariable("VLLM_BATCH_INVARIANT", "vLLM", "numerics, speed", VLLM),
    EnvVariable("VLLM_ENABLE_V1_MULTIPROCESSING", "vLLM", "speed", VLLM),
    EnvVariable("VLLM_WORKER_MULTIPROC_METHOD", "vLLM", "speed", VLLM),
    EnvVariable("VLLM_USE_FLASHINFER_SAMPLER", "vLLM", "numerics, speed", VLLM),
    EnvVariable("VLLM_USE_DEEP_GEMM", "vLLM", "numerics, speed", VLLM),
    EnvVariable("VLLM_ROCM_USE_AITER", "vLLM", "numerics, speed", VLLM),
    EnvVariable("VLLM_KV_CACHE_LAYOUT", "vLLM", "speed, memory", VLLM),
    EnvVariable("VLLM_DISABLE_COMPILE_CACHE", "vLLM", "speed", VLLM),
    # memory allocators, tokenizers, what is loaded
    EnvVariable("MALLOC_ARENA_MAX", "glibc", "memory", GLIBC),
    EnvVariable("GLIBC_TUNABLES", "glibc", "memory, speed", GLIBC),
    EnvVariable("LD_PRELOAD", "dynamic loader (jemalloc, tcmalloc, Intel OpenMP)", "memory, speed", TORCH_CPU),
    EnvVariable("TOKENIZERS_PARALLELISM", "tokenizers", "speed", HF_TOKENIZERS),
    EnvVariable("HF_HUB_OFFLINE", "huggingface_hub", "files", HF_HUB),
)

RECORDED_NAMES: tuple[str, ...] = tuple(v.name for v in ENV_VARIABLES)
"""The names of ``ENV_VARIABLES``, in its order."""
