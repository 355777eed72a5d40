"""tilex's own compiler passes (one pass a module); `tilex.engine.pipeline` puts them in order.

``PassConfigKey`` is here too, where TileLang programs import it from (``tilelang.transform.PassConfigKey``)."""
from tilex.pass_config import PassConfigKey  # noqa: F401
