"""AOT export (tilex.jit.export): the argument metadata round trip and the refusals, on any machine."""
import json
import os

import pytest

import tilex
from tilex.jit import export
from tilex.jit.args import ArgChecker

import jit_kernels
import op_programs


def _specs(checker):
    return [(s.index, s.name, s.kind, s.dtype, s.torch_dtype, s.shape, s.strides, s.is_output)
            for s in checker.params]


@pytest.mark.parametrize("make, out_idx", [
    (lambda: jit_kernels.vec_add(256), -1),
    (jit_kernels.scale_sym, 1),
    (jit_kernels.mixed, -2),
    (jit_kernels.strided, None),
    (op_programs.scale_rows, -1),
    (op_programs.add_into, None),
])
def test_parameters_survive_the_round_trip(make, out_idx):
    original = ArgChecker(make(), out_idx)
    meta = json.loads(json.dumps(export.params_json(original)))  # what kernel.json holds
    again = ArgChecker(export.stand_in_func(meta), meta["out_idx"])
    assert _specs(again) == _specs(original)
    assert again.func_name == original.func_name


def test_the_stand_in_checks_calls_like_the_original():
    torch = pytest.importorskip("torch")
    original = ArgChecker(jit_kernels.mixed(), 2)
    again = ArgChecker(export.stand_in_func(export.params_json(original)), 2)
    a = torch.zeros(5, 7, dtype=torch.float16)
    w = torch.zeros(7, 64, dtype=torch.bfloat16)
    bad_w = torch.zeros(6, 64, dtype=torch.bfloat16)
    messages = []
    for checker in (original, again):
        for args in ([a, w, 7], [a, bad_w, 7], [a.float(), w, 7]):
            with pytest.raises((TypeError, ValueError)) as e:  # CPU tensors: refused last, for the device
                checker.prepare(args)
            messages.append(str(e.value))
    assert messages[:3] == messages[3:]
    assert "CUDA" in messages[0] and "'W'" in messages[1] and "'A'" in messages[2]


def test_a_kernel_without_a_binary_is_refused(tmp_path):
    k = tilex.compile(op_programs.scale_rows(), out_idx=-1, target="sm_90a")
    if k.has_binary:
        pytest.skip("built on a GPU machine: the module holds a cubin (the GPU tests export it)")
    with pytest.raises(tilex.ExportError, match="no compiled binary"):
        k.export(tmp_path / "k")
    assert not (tmp_path / "k").exists()


def test_loading_refuses_what_is_not_an_export(tmp_path):
    with pytest.raises(tilex.ExportError, match="not an exported kernel"):
        tilex.load(tmp_path)
    (tmp_path / export.META_NAME).write_text(json.dumps({"format": 999}))
    with pytest.raises(tilex.ExportError, match="format 999"):
        tilex.load(tmp_path)


def _fill(text):
    def fill(tmp):
        with open(os.path.join(tmp, "a"), "w") as f:
            f.write(text)
        os.mkdir(os.path.join(tmp, "sub"))
        with open(os.path.join(tmp, "sub", "b"), "w") as f:
            f.write(text)
    return fill


def test_write_directory_replaces_only_its_own_exports(tmp_path):
    """Both exports (a kernel's, a DynamicKernel's) write through write_directory: the directory appears whole and
    replaces an earlier export; a failing writer leaves neither it nor its temporary sibling behind."""
    target = tmp_path / "out"
    assert export.write_directory(target, _fill("one")) == str(target)
    assert export.is_tilex_export(target)
    assert export.write_directory(target, _fill("two")) == str(target)
    assert (target / "a").read_text() == "two" and (target / "sub" / "b").read_text() == "two"

    def broken(tmp):
        _fill("three")(tmp)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        export.write_directory(tmp_path / "other", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export.write_directory(target, broken)
    assert sorted(os.listdir(tmp_path)) == ["out"]
    assert (target / "a").read_text() == "two"

    empty = tmp_path / "empty"
    empty.mkdir()
    export.write_directory(empty, _fill("x"))
    assert (empty / "a").read_text() == "x"


@pytest.mark.parametrize("spoil", ["foreign_dir", "added_file", "added_dir", "file", "link", "bad_manifest"])
def test_write_directory_never_replaces_what_it_did_not_write(tmp_path, spoil):
    """kernel.export(".") once deleted a project: a directory tilex did not write (or wrote and somebody added a file
    to since) is refused before anything is written, and left as it was."""
    target = tmp_path / "project"
    if spoil == "foreign_dir":
        target.mkdir()
        (target / "main.py").write_text("user code")
    elif spoil in ("added_file", "added_dir", "bad_manifest"):
        export.write_directory(target, _fill("one"))
        if spoil == "added_file":
            (target / "sub" / "notes.txt").write_text("user notes")
        elif spoil == "added_dir":
            (target / "data").mkdir()
        else:
            (target / export.MANIFEST_NAME).write_text("{not json")
    elif spoil == "file":
        target.write_text("a file")
    else:
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "keep").write_text("keep")
        target.symlink_to(tmp_path / "elsewhere")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(tilex.ExportError, match="refusing to replace|not a directory"):
        export.write_directory(target, _fill("two"))
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before


def test_export_refuses_a_foreign_directory_before_compiling_anything(tmp_path):
    k = tilex.compile(op_programs.scale_rows(), out_idx=-1, target="sm_90a")
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(tilex.ExportError, match="refusing to replace"):
        k.export(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["keep.txt"]
