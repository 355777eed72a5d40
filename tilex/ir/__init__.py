"""tilex.ir: the IR vocabulary every other layer speaks, at the bottom of the import graph.

* :mod:`~tilex.ir.names`: every marker op and attribute key that crosses a file, with who writes and who reads it;
* :mod:`~tilex.ir.intrin`: one typed builder per device function of ``src/tilex/*.h``, and the readers;
* :mod:`~tilex.ir.visit`: tree walks and small statement/expression helpers over TVM 0.27's IR;
* :mod:`~tilex.ir.hardware`: compute capability, shared-memory / register limits, SM counts;
* :mod:`~tilex.ir.shared_memory`: the bytes a kernel's shared buffers take.

It imports nothing of tilex but :mod:`tilex.env` and :mod:`tilex.config`.
"""
