"""Program -> TVM executable: the tilex lowering pipeline (filled in by tilex.engine.pipeline)."""
