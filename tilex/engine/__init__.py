"""Program -> TVM executable: the tilex lowering pipeline (see pipeline.py); ``callback``: the user's CUDA
post-processing hook (TileLang's ``tilelang.engine.callback``)."""
from tilex.engine.pipeline import build, lower_to_tir  # noqa: F401
from tilex.engine.callback import register_c_postproc, register_cuda_postproc, register_hip_postproc  # noqa: F401
