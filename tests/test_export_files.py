"""How the export writes its files, and the command line's file errors
(issue 22, items 5 and 11).

Every writer (`export_tflite`, `export_generator_tflite`, `python -m
cvattn_keras.export`) writes as `open(path, "wb")` would, but whole or not
at all (`cvattn_keras.export._files`): a new file's mode from the umask,
an existing file's mode kept, a symbolic link written through to its
target. Most tests call the writer directly or replace the conversion by
fixed bytes; one converts the smallest model end to end.

The command line's file errors are found before the model is loaded (no
TensorFlow, no conversion): one line `error: ...`, exit status 2.
"""

import contextlib
import os
import stat

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras.export import __main__ as cli
from cvattn_keras.export import _files
from cvattn_keras.export import generator

# A flatbuffer's first 8 bytes: any 4, then the identifier.
FAKE_TFLITE = b"\x00\x00\x00\x00TFL3 not a real model"


@contextlib.contextmanager
def _umask(mask):
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _leftovers(directory):
    return [name for name in os.listdir(directory) if ".partial" in name]


# ----------------------------------------------------------------------
# The writer.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_a_new_file_takes_its_mode_from_the_umask(tmp_path, mask, mode):
    path = tmp_path / "m.tflite"
    with _umask(mask):
        _files.write_atomically(path, b"data")
    assert path.read_bytes() == b"data"
    assert _mode(path) == mode
    assert not _leftovers(tmp_path)


def test_an_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    with _umask(0o022):
        _files.write_atomically(path, b"new")
    assert path.read_bytes() == b"new"
    assert _mode(path) == 0o640


def test_a_symbolic_link_is_written_through(tmp_path):
    """The target is replaced (in its own directory), its mode kept; the
    link stays a link, relative or absolute."""
    target_dir = tmp_path / "files"
    target_dir.mkdir()
    target = target_dir / "real.tflite"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    for name, pointer in (
        ("relative.tflite", os.path.join("files", "real.tflite")),
        ("absolute.tflite", str(target)),
    ):
        link = tmp_path / name
        link.symlink_to(pointer)
        _files.write_atomically(link, name.encode())
        assert link.is_symlink() and os.readlink(link) == pointer
        assert target.read_bytes() == name.encode()
        assert _mode(target) == 0o640
    assert not _leftovers(tmp_path) and not _leftovers(target_dir)


def test_a_dangling_symbolic_link_creates_its_target(tmp_path):
    link = tmp_path / "link.tflite"
    link.symlink_to(tmp_path / "target.tflite")
    with _umask(0o022):
        path = _files.check_output(link, overwrite=False)
        _files.write_atomically(path, b"data", overwrite=False)
    assert link.is_symlink()
    assert (tmp_path / "target.tflite").read_bytes() == b"data"
    assert _mode(tmp_path / "target.tflite") == 0o644


def test_overwrite_false_keeps_an_existing_file(tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=True") as info:
        _files.write_atomically(path, b"new", overwrite=False)
    assert isinstance(info.value, ValueError)
    assert path.read_bytes() == b"keep me"
    assert not _leftovers(tmp_path)


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(
    tmp_path, monkeypatch
):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"old")

    def no_space(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError, match="No space"):
        _files.write_atomically(path, b"new")
    assert path.read_bytes() == b"old"
    assert not _leftovers(tmp_path)


def test_replace_with_keeps_the_mode_through_a_link(tmp_path):
    """For writers that make their own temporary file (`model.save`)."""
    target = tmp_path / "real.keras"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.keras"
    link.symlink_to(target.name)
    partial = tmp_path / ".real.keras.partial"
    with _umask(0o022):
        partial.write_bytes(b"new")  # 0644, as open() made it
        _files.replace_with(partial, link)
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert _mode(target) == 0o640 and not partial.exists()


def test_check_output_refuses_what_open_would(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "d.tflite").mkdir()
    (tmp_path / "device.tflite").symlink_to(os.devnull)
    for path, match in (
        (tmp_path / "d.tflite", "is a directory"),
        (tmp_path / "missing" / "m.tflite", "does not exist"),
        (tmp_path / "file" / "m.tflite", "is not a directory"),
        (tmp_path / "device.tflite", "not a regular file"),
    ):
        with pytest.raises(ValueError, match=match) as info:
            _files.check_output(path, overwrite=True)
        assert isinstance(info.value, OSError), info.value
        assert str(path) in str(info.value)
    assert not (tmp_path / "missing").exists()  # no directory created


# ----------------------------------------------------------------------
# Every writer of the library.
# ----------------------------------------------------------------------


def _small_model():
    inputs = keras.Input((3, 4), name="x")
    return keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs))


@pytest.mark.slow
def test_export_tflite_writes_through_a_link_and_keeps_the_mode(tmp_path):
    """One real conversion: through a symbolic link to an existing 0640
    file, then a new file under umask 022."""
    model = _small_model()
    target = tmp_path / "target.tflite"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.tflite"
    link.symlink_to(target.name)
    with _umask(0o022):
        cvk.export.export_tflite(model, link)
        new = tmp_path / "new.tflite"
        cvk.export.export_tflite(model, new)
    assert link.is_symlink() and target.read_bytes()[4:8] == b"TFL3"
    assert _mode(target) == 0o640
    assert _mode(new) == 0o644
    report = cvk.export.verify_tflite(link, model, np.ones((2, 3, 4)))
    assert report.max_abs_error <= 1e-5
    assert not _leftovers(tmp_path)


def _tiny_generator():
    return cvk.models.music_generator(
        source_frames=5,
        target_frames=4,
        bins=10,
        notes=6,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(3, 3),
    )


def test_the_generator_export_writes_as_open_would(tmp_path, monkeypatch):
    """The generator's writer is the same: its conversion replaced by
    fixed bytes (tests/test_export_generator.py converts)."""
    fake = lambda *args, **kwargs: FAKE_TFLITE  # noqa: E731
    monkeypatch.setattr(generator, "_convert", fake)
    monkeypatch.setattr(generator, "_convert_in_subprocess", fake)
    model = _tiny_generator()
    target = tmp_path / "target.tflite"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.tflite"
    link.symlink_to(target)
    with _umask(0o022):
        generator.export_generator_tflite(model, link)
        generator.export_generator_tflite(model, tmp_path / "new.tflite")
    assert link.is_symlink() and target.read_bytes() == FAKE_TFLITE
    assert _mode(target) == 0o640
    assert _mode(tmp_path / "new.tflite") == 0o644
    with pytest.raises(ValueError, match="does not exist"):
        generator.export_generator_tflite(model, tmp_path / "no" / "g.tflite")


# ----------------------------------------------------------------------
# The command line's file errors (item 5): one line, status 2, before
# the model is loaded.
# ----------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "m.keras"
    _small_model().save(path)
    return path


def _run(args, capfd):
    code = cli.main([str(a) for a in args])
    captured = capfd.readouterr()
    return code, captured.out, captured.err


def _error_line(err):
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _cases(tmp_path, saved):
    """`(arguments, fragment of the error)` for each file error."""
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir.tflite").mkdir()
    (tmp_path / "dir.keras").mkdir()
    (tmp_path / "dangling.tflite").symlink_to(tmp_path / "no" / "t.tflite")
    (tmp_path / "dangling.keras").symlink_to(tmp_path / "no.keras")
    out = tmp_path / "out.tflite"
    calibrate = ["--quantize", "int8", "--representative-data"]
    return [
        ([saved, tmp_path / "dir.tflite"], "is a directory"),
        ([saved, tmp_path / "dangling.tflite"], "does not exist"),
        ([saved, tmp_path / "missing" / "m.tflite"], "does not exist"),
        ([saved, tmp_path / "file" / "m.tflite"], "is not a directory"),
        ([saved, tmp_path / "m.tflite", "--quantize", "int8"], "random"),
        ([tmp_path / "none.keras", out], "no such file"),
        ([tmp_path / "dir.keras", out], "is a directory"),
        ([tmp_path / "dangling.keras", out], "does not exist"),
        ([tmp_path / "file", out], "not a .keras model file"),
        ([saved, out, *calibrate, tmp_path / "none.npz"], "no such file"),
        ([saved, out, *calibrate, tmp_path], "is a directory"),
    ]


def test_command_line_file_errors_are_one_line_and_status_2(
    tmp_path, saved, capfd
):
    for args, fragment in _cases(tmp_path, saved):
        code, printed, err = _run(args, capfd)
        assert code == 2, (args, err)
        line = _error_line(err)
        assert fragment in line, (args, err)
        assert "Traceback" not in err and not printed
    assert not (tmp_path / "out.tflite").exists()
    assert not (tmp_path / "missing").exists()


@pytest.mark.tensorflow_only  # the model is loaded: in this process
def test_command_line_rejects_bad_calibration_files(tmp_path, saved, capfd):
    (tmp_path / "text.npz").write_text("not an archive")
    np.savez(tmp_path / "shape.npz", x=np.ones((4, 3, 5), "float32"))
    out = tmp_path / "out.tflite"
    for name, fragment in (
        ("text.npz", "is not a readable .npz file"),
        ("shape.npz", "does not fit the model"),
    ):
        code, _, err = _run(
            [
                saved,
                out,
                "--quantize",
                "int8",
                "--representative-data",
                tmp_path / name,
            ],
            capfd,
        )
        assert code == 2, err
        assert fragment in _error_line(err) and name in err, err
    assert not out.exists()


def test_command_line_argparse_errors_return_2(tmp_path, capfd):
    code, _, err = _run(
        [tmp_path / "m.keras", tmp_path / "m.tflite", "--max-rel-error", "0"],
        capfd,
    )
    assert code == 2 and "--max-rel-error" in err.strip().splitlines()[-1]
