"""tilex: TileLang-style tile programs compiled through Apache TVM's CUDA codegen.

The CUDA headers in ``src/`` (``src/tilex/*.h``) ship inside the package as ``tilex/_src`` so that the
generated kernels' ``#include "tilex/..."`` resolve in an installed copy too (see ``tilex.env.include_dir``).
"""
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _header_globs():
    """package_data patterns for every header under src/ (explicit per-directory globs, so that old
    setuptools without '**' support also picks them up)."""
    pats = {"*.h", "*.cuh", "*.hpp", "**/*.h", "**/*.cuh", "**/*.hpp"}
    src = os.path.join(HERE, "src")
    for dirpath, _dirs, _files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel != ".":
            for ext in ("h", "cuh", "hpp"):
                pats.add(f"{rel}/*.{ext}".replace(os.sep, "/"))
    return sorted(pats)


HAS_SRC = os.path.isdir(os.path.join(HERE, "src"))

setup(
    name="tilex",
    version="0.1.0",
    description="TileLang-style tile programs compiled through Apache TVM's CUDA codegen",
    long_description=open(os.path.join(HERE, "README.md")).read() if os.path.exists(os.path.join(HERE, "README.md")) else "",
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tilex", "tilex.*"]) + (["tilex._src"] if HAS_SRC else []),
    package_dir={"tilex._src": "src"} if HAS_SRC else {},
    package_data={**({"tilex._src": _header_globs()} if HAS_SRC else {}), "tilex.jit": ["*.cc"]},
    include_package_data=False,
    install_requires=[
        "apache-tvm>=0.27,<0.28",
        "numpy",
        "torch>=2.4",  # install torch first (see README.md: a CPU wheel without a GPU, your CUDA build with one)
        "tqdm",  # the autotuner's progress bars
    ],
    extras_require={
        "test": ["pytest"],
        "bench": ["triton"],  # benchmarks/ compare against Triton (examples/ need nothing beyond tilex)
        # the tuner's cost model (tilex.autotuner.cost_model; the CPU wheel of xgboost is enough) and measurement
        # through TVM's RPC tracker (tilex.autotuner.rpc: its tracker needs tornado, its server cloudpickle)
        "tune": ["xgboost-cpu", "tornado", "cloudpickle"],
    },
    zip_safe=False,
)
