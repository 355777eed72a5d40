"""``import tilelang`` in a process that tools/tilelang_examples.py started for an example, and in the processes that
one starts in turn (the autotuner's compile workers, which run the example's script again): this stand-in installs
the tool's import alias and hands over ``tilex`` itself, so ``tilelang.<sub>`` is ``tilex.<sub>`` there too.

The tool puts this folder on PYTHONPATH of the examples it runs and nowhere else; tilex never imports it."""
import os
import sys

_TOOLS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _TOOLS not in sys.path:
    sys.path.append(_TOOLS)

import tilelang_examples  # noqa: E402

tilelang_examples.install_alias()

import tilex  # noqa: E402

sys.modules[__name__] = tilex
