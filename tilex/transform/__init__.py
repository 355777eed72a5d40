"""tilex's own compiler passes (one pass a module); `tilex.engine.pipeline` puts them in order."""
