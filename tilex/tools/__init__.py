"""TileLang's developer tools (``tilelang.tools``): ``plot_layout`` (drawing a layout with matplotlib) and
``Analyzer`` (FLOP and memory-traffic estimates of a program on a carver device model) are not implemented in
tilex; both raise NotImplementedError. tilex's own inspection tools: ``kernel.bank_conflicts()``,
``kernel.resources`` (ptxas's report), ``kernel.get_kernel_source()``, and the scripts in the repository's
``tools/`` directory."""
from __future__ import annotations

__all__ = ["plot_layout", "Analyzer"]


def plot_layout(layout, save_directory="./tmp", name: str = "layout", colormap: str | None = None,
                verbose: bool = False, formats="pdf", view: str = "input", grid_shape=None, **kwargs):
    """Not implemented in tilex (TileLang: draw ``layout``'s index map to files). Raises NotImplementedError."""
    raise NotImplementedError("tilex.tools.plot_layout: drawing layouts is not implemented in tilex (a layout's "
                              "map is available as numpy arrays: Layout.map_numpy / Fragment.map_numpy)")


class Analyzer:
    """Not implemented in tilex (TileLang: FLOPs, global-memory traffic and an estimated time of a program on a
    carver device model)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("tilex.tools.Analyzer: TileLang's performance analyzer is not implemented in tilex")

    @classmethod
    def analysis(cls, *args, **kwargs):
        """Not implemented (raises NotImplementedError)."""
        raise NotImplementedError("tilex.tools.Analyzer.analysis: TileLang's performance analyzer is not "
                                  "implemented in tilex")
