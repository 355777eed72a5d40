"""Program -> TVM executable: the tilex lowering pipeline (see pipeline.py)."""
from tilex.engine.pipeline import build, lower_to_tir  # noqa: F401
