"""Reading generated CUDA in tests (tests/ is on sys.path through its conftest.py)."""


def braced_block(src, start):
    """The text of the first ``{ ... }`` block after the first occurrence of `start` in `src` (braces matched)."""
    i = src.index("{", src.index(start))
    depth, j = 0, i
    while True:
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[i:j]
        j += 1
