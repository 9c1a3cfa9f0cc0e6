"""The numba kernel cache directory: used only when no other local user can write into it.

numba unpickles its cache index and fxkit imports the kernel files it finds there, so a directory
another user prepared (created first in the shared temporary directory, left writable, or owned by
someone else) would run their code in this process. Each case pre-creates such a directory and checks
that it is refused with a warning, that nothing is written into it, and that kernels still compile.
"""
import os
import stat
import tempfile

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from fxkit.backends import numba_cache  # noqa: E402
from fxkit.backends.numba_cache import CacheDirWarning, cache_dir, load_kernel_module, scratch_dir  # noqa: E402

UID = os.getuid() if hasattr(os, "getuid") else None
pytestmark = pytest.mark.skipif(os.name != "posix", reason="owners and mode bits are POSIX")

_KERNEL = """import numba


@numba.njit(cache=True)
def kernel(x):
    return x * {factor}
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """FXKIT_CACHE_DIR pointing into a fresh folder; the temporary directory also fresh."""
    monkeypatch.setenv("FXKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path


def _refused(directory):
    with pytest.warns(CacheDirWarning, match="not using .* as the numba kernel cache") as record:
        chosen = cache_dir()
    assert chosen == scratch_dir() and chosen != directory
    assert stat.S_IMODE(os.stat(chosen).st_mode) == 0o700 and os.stat(chosen).st_uid == UID
    return str(record[0].message)


def _unusable_normal_dir(home):
    """Make the normal directory impossible to create, so the temporary fallback is taken."""
    (home / "blocker").write_text("a file, not a directory")
    os.environ["FXKIT_CACHE_DIR"] = str(home / "blocker")


def test_the_normal_directory_is_created_private_and_used(home):
    directory = cache_dir()
    assert directory == home / "cache" / "numba"
    assert stat.S_IMODE(os.stat(directory).st_mode) & 0o077 == 0


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o722])
def test_a_normal_directory_others_can_write_is_refused(home, mode):
    directory = home / "cache" / "numba"
    directory.mkdir(parents=True)
    directory.chmod(mode)
    message = _refused(directory)
    assert f"mode is {mode:04o}" in message and "chmod 700" in message


def test_a_directory_owned_by_another_user_is_refused(home, monkeypatch):
    directory = home / "cache" / "numba"
    directory.mkdir(parents=True, mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda real=os.getuid(): real + 1)  # simulate: created by someone else
    assert "owned by uid" in _refused(directory)


def test_a_symlink_to_a_directory_others_can_write_is_refused(home):
    target = home / "shared"
    target.mkdir()
    target.chmod(0o777)
    (home / "cache").mkdir()
    (home / "cache" / "numba").symlink_to(target)
    _refused(target)


def test_a_parent_others_can_write_without_sticky_bit_is_refused(home):
    (home / "cache").mkdir()
    (home / "cache").chmod(0o777)
    assert "parent directory" in _refused(home / "cache" / "numba")


def test_a_loose_pycache_inside_is_refused(home):
    directory = home / "cache" / "numba"
    (directory / "__pycache__").mkdir(parents=True)
    directory.chmod(0o700)
    (directory / "__pycache__").chmod(0o777)
    assert "__pycache__" in _refused(directory)


@pytest.mark.parametrize("mode", [0o755, 0o777, 0o750])
def test_a_temporary_fallback_others_can_read_is_refused(home, mode):
    _unusable_normal_dir(home)
    fallback = home / "tmp" / f"fxkit-numba-{os.getuid()}"
    fallback.mkdir()
    fallback.chmod(mode)
    assert "group and others have access" in _refused(fallback)


def test_a_temporary_fallback_another_user_created_first_is_refused(home, monkeypatch):
    monkeypatch.setattr(os, "getuid", lambda real=os.getuid(): real + 1)  # we are the victim, uid + 1
    _unusable_normal_dir(home)
    fallback = home / "tmp" / f"fxkit-numba-{os.getuid()}"
    fallback.mkdir(mode=0o700)  # made by the real uid: "another user", ahead of the victim
    assert "owned by uid" in _refused(fallback)


def test_the_temporary_fallback_is_created_0700(home):
    _unusable_normal_dir(home)
    directory = cache_dir()
    assert directory == home / "tmp" / f"fxkit-numba-{os.getuid()}"
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700


def test_kernels_compile_without_touching_a_refused_directory(home):
    directory = home / "cache" / "numba"
    directory.mkdir(parents=True)
    directory.chmod(0o777)
    with pytest.warns(CacheDirWarning):
        module = load_kernel_module(_KERNEL.format(factor=f"{np.random.default_rng().integers(2, 10**9)}.0"))
    factor = float(module.kernel.py_func.__code__.co_consts[-1])
    assert module.kernel(np.float64(2.0)) == 2.0 * factor
    assert list(directory.iterdir()) == []
    assert os.path.dirname(module.__file__) == str(scratch_dir())
