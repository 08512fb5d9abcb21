"""Peers given by path (`--allocators NAME=PATH`): parsed, checked, ordered before strata,
and verified as themselves by the loader's bindings (not as the built-in of the same
family)."""

import pytest

from strata_tool import allocators as al


@pytest.fixture(autouse=True)
def forget_paths():
    """identify() must not keep this file's names for the other tests."""
    yield
    al._BY_PATH.clear()


def test_name_equals_path_adds_a_peer_before_strata(tmp_path):
    lib = al.libdir() / "libmimalloc.so.2"
    if not lib.exists():
        pytest.skip(f"{lib} not installed")
    got = al.discover(tmp_path, ["glibc", f"mimalloc3={lib}", "strata"])
    assert [a.name for a in got] == ["glibc", "mimalloc3", "strata"]
    m = got[1]
    assert m.available and m.extra["given_by_path"] and m.preload() == str(lib.resolve())
    # The loader binds malloc to libmimalloc.so.2: that is mimalloc3 here.
    assert al.identify(str(lib)) == "mimalloc3"


def test_a_built_in_name_at_a_path_replaces_debians(tmp_path):
    lib = al.libdir() / "libjemalloc.so.2"
    if not lib.exists():
        pytest.skip(f"{lib} not installed")
    (j,) = al.discover(tmp_path, [f"jemalloc={lib}"])
    assert j.extra["given_by_path"]
    # Redis links Debian's jemalloc; a jemalloc of the user's must still be preloaded.
    assert j.redis_preload() == str(lib.resolve())


@pytest.mark.parametrize("spec,why", [
    ("x=", "no path"), ("1x=/lib/x.so", "letters"), ("glibc=/lib/x.so", "baseline"),
    ("strata=/lib/x.so", "--build-dir"), ("nosuch", "unknown allocator"),
])
def test_bad_specs_are_refused_with_the_reason(tmp_path, spec, why):
    with pytest.raises(ValueError, match=why):
        al.discover(tmp_path, [spec])


def test_a_path_that_is_not_a_library_is_skipped_with_the_reason(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("hello")
    (a,) = al.discover(tmp_path, [f"mine={f}"])
    assert not a.available and "not an ELF shared object" in a.skip_reason
    (b,) = al.discover(tmp_path, [f"mine={tmp_path}/missing.so"])
    assert not b.available and "No such file" in b.skip_reason
