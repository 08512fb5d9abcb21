"""The allocators `strata bench` compares (glibc, jemalloc, tcmalloc, mimalloc, strata),
where their shared objects live, how each is injected (LD_PRELOAD), and how to prove
which one actually served a process: the dynamic loader's own symbol bindings
(LD_DEBUG=bindings in trace mode, so the program is never run) and /proc/PID/maps.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ORDER = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "strata")
INSTALL_HINT = "run scripts/install-deps.sh"


def multiarch() -> str:
    """Debian's multiarch triplet for this machine (x86_64-linux-gnu, ...)."""
    ma = sysconfig.get_config_var("MULTIARCH")
    if ma:
        return str(ma)
    m = platform.machine()
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
            "armv7l": "arm-linux-gnueabihf", "ppc64le": "powerpc64le-linux-gnu",
            "s390x": "s390x-linux-gnu", "riscv64": "riscv64-linux-gnu"}.get(m, f"{m}-linux-gnu")


def libdir() -> Path:
    return Path("/usr/lib") / multiarch()


def glibc_libc() -> Path:
    """glibc's libc.so.6: preloading it puts glibc's malloc first in the search order
    even in a program linked against another allocator (Debian's redis-server)."""
    for cand in (Path("/lib") / multiarch() / "libc.so.6", libdir() / "libc.so.6"):
        if cand.exists():
            return cand
    return Path("/lib") / multiarch() / "libc.so.6"


@dataclass
class Allocator:
    name: str
    lib: Path | None          # shared object that provides it; None: the libc default
    package: str | None       # Debian package that ships it (for versions and hints)
    available: bool = True
    skip_reason: str | None = None
    version: str | None = None
    extra: dict = field(default_factory=dict)

    def preload(self) -> str | None:
        """LD_PRELOAD value for an ordinary program (glibc needs none)."""
        return str(self.lib) if self.lib is not None and self.name != "glibc" else None

    def redis_preload(self) -> str | None:
        """LD_PRELOAD value for Debian's redis-server, which links libjemalloc itself:
        jemalloc needs nothing, glibc needs libc.so.6 first, the rest their library."""
        if self.name == "jemalloc" and not self.extra.get("given_by_path"):
            return None
        if self.name == "glibc":
            return str(glibc_libc())
        return str(self.lib)

    def to_json(self) -> dict:
        return {"name": self.name, "lib": str(self.lib) if self.lib else None,
                "package": self.package, "available": self.available,
                "skip_reason": self.skip_reason, "version": self.version, **self.extra}


_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]{0,31}$")
# Preloaded libraries given by path (name=PATH), by real path: identify() names them so
# that the loader's bindings verify a peer named "mimalloc3" as itself.
_BY_PATH: dict[str, str] = {}


def parse_spec(spec: str) -> tuple[str, Path | None]:
    """`name` (a built-in allocator) or `name=PATH` (a shared object to preload under that
    name, such as a newer release built from source). Raises ValueError with the reason."""
    name, eq, path = spec.partition("=")
    name = name.strip()
    if not _NAME.match(name):
        raise ValueError(f"allocator name {name!r}: letters, digits and _.+- only, "
                         "starting with a letter")
    if not eq:
        return name, None
    if not path.strip():
        raise ValueError(f"--allocators {spec}: no path after '='")
    if name in ("glibc", "strata"):
        raise ValueError(f"--allocators {spec}: {name} cannot be given by path "
                         f"({'the C library is always the baseline' if name == 'glibc' else 'strata is the build tree one: use --build-dir'})")
    return name, Path(path.strip()).expanduser()


def _elf_problem(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return f"{path}: {e.strerror}"
    return None if head == b"\x7fELF" else f"{path}: not an ELF shared object"


def discover(build_dir: Path | None, names: list[str] | None = None) -> list[Allocator]:
    """Allocator records: the built-in ones in the canonical order, filtered to `names`,
    then the ones given as name=PATH in the order given (strata stays last, the subject).
    A built-in name with =PATH uses that library instead of Debian's. Missing libraries
    are marked unavailable with a one-line reason. build_dir None (an installed tool
    outside a checkout): strata is the installed library."""
    d = libdir()
    _BY_PATH.clear()                    # the names of this comparison only
    if build_dir is not None:
        strata_lib = build_dir / "libstrata.so"
    else:
        from . import launch
        strata_lib = launch.find_library() or Path("libstrata.so")
    table = {
        "glibc": Allocator("glibc", glibc_libc(), "libc6"),
        "jemalloc": Allocator("jemalloc", d / "libjemalloc.so.2", "libjemalloc2"),
        "tcmalloc": Allocator("tcmalloc", d / "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
        "mimalloc": Allocator("mimalloc", d / "libmimalloc.so.2", "libmimalloc2.0"),
        "strata": Allocator("strata", strata_lib, None),
    }
    specs = [parse_spec(n) for n in (names or list(ORDER))]
    seen: set[str] = set()
    for n, _ in specs:
        if n in seen:
            raise ValueError(f"allocator {n} named twice")
        seen.add(n)
    unknown = [n for n, path in specs if path is None and n not in table]
    if unknown:
        raise ValueError(f"unknown allocator(s) {', '.join(unknown)} (known: "
                         f"{', '.join(ORDER)}; or name=PATH for a library of your own)")
    wanted = dict(specs)
    out = []
    for name in ORDER:
        if name not in wanted:
            continue
        a = table[name]
        if wanted[name] is not None:          # a built-in name at a path of the user's
            a = Allocator(name, wanted[name], None, extra={"given_by_path": True})
        out.append(a)
    customs = [Allocator(n, p, None, extra={"given_by_path": True})
               for n, p in specs if n not in table]
    if out and out[-1].name == "strata":
        out[-1:-1] = customs
    else:
        out += customs
    for a in out:
        if a.name == "glibc":
            a.available = True          # the default allocator is always there
        elif a.extra.get("given_by_path"):
            why = _elf_problem(a.lib)
            if why:
                a.available, a.skip_reason = False, why
            else:
                a.lib = a.lib.resolve()
                _BY_PATH[str(a.lib)] = a.name
        elif a.lib is None or not a.lib.exists():
            a.available = False
            if a.name == "strata":
                a.skip_reason = (f"{a.lib} not found: build it first "
                                 f"(cmake -S . -B {build_dir} -G Ninja && ninja -C {build_dir})"
                                 if build_dir is not None else
                                 "libstrata.so not found: install strata or give --build-dir")
            else:
                a.skip_reason = (f"{a.lib} not found: {INSTALL_HINT} "
                                 f"(or: apt-get install {a.package}), or give "
                                 f"{a.name}=PATH")
    return out


def identify(path: str | None) -> str:
    """Allocator name for a shared-object path from a link map or binding line."""
    if not path:
        return "unknown"
    given = _BY_PATH.get(os.path.realpath(path))
    if given:
        return given
    base = os.path.basename(path)
    for prefix, name in (("libjemalloc", "jemalloc"), ("libtcmalloc", "tcmalloc"),
                         ("libmimalloc", "mimalloc"), ("libstrata", "strata"),
                         ("libc.so", "glibc"), ("libc-", "glibc")):
        if base.startswith(prefix):
            return name
    return f"other:{base}"


_BINDING = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: \S+ symbol `([^']+)'")
MALLOC_SYMBOLS = ("malloc", "free", "calloc", "realloc")


def resolve_bindings(exe: str, preload: str | None,
                     symbols: tuple[str, ...] = MALLOC_SYMBOLS + ("malloc_usable_size",
                                                                   "mallctl", "nallocx"),
                     env: dict | None = None, timeout: float = 20.0) -> dict:
    """Ask the dynamic loader which object each of `symbols` binds to when `exe` starts
    with LD_PRELOAD=preload, without running it: LD_TRACE_LOADED_OBJECTS with
    LD_WARN/LD_BIND_NOW makes ld.so relocate everything and exit, and LD_DEBUG=bindings
    logs each binding. Returns {"bindings": {symbol: path}, "error": str|None}; the
    bindings of the executable itself win over those of its libraries."""
    e = dict(os.environ if env is None else env)
    e.pop("LD_PRELOAD", None)
    if preload:
        e["LD_PRELOAD"] = preload
    with tempfile.TemporaryDirectory(prefix="strata-ld-") as td:
        e.update(LD_TRACE_LOADED_OBJECTS="1", LD_WARN="yes", LD_BIND_NOW="1",
                 LD_DEBUG="bindings", LD_DEBUG_OUTPUT=os.path.join(td, "ld"))
        try:
            subprocess.run([exe], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL, timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError) as ex:
            return {"bindings": {}, "error": f"{type(ex).__name__}: {ex}"}
        own: dict[str, str] = {}
        anyobj: dict[str, str] = {}
        exe_names = {exe, os.path.realpath(exe)}
        for f in sorted(Path(td).glob("ld*")):
            for line in f.read_text(errors="replace").splitlines():
                m = _BINDING.search(line)
                if not m or m.group(3) not in symbols:
                    continue
                src, dst, sym = m.groups()
                if src in exe_names or os.path.realpath(src) in exe_names:
                    own.setdefault(sym, dst)
                anyobj.setdefault(sym, dst)
    merged = {**anyobj, **own}
    return {"bindings": merged, "error": None if merged else "no malloc binding seen"}


def verify(exe: str, preload: str | None, expected: str, pid: int | None = None,
           env: dict | None = None, map_lib: str | None = None) -> dict:
    """Which allocator serves `exe` run with `preload`: the library malloc, free,
    calloc and realloc bind to (all four must agree), plus, when a live `pid` is given,
    whether the preloaded library (or `map_lib`) is mapped in it. Returns a record with
    verified_allocator, ok (== expected and mapped) and the evidence."""
    rb = resolve_bindings(exe, preload, env=env)
    b = rb["bindings"]
    core = {s: identify(b.get(s)) for s in MALLOC_SYMBOLS}
    names = set(core.values())
    verified = names.pop() if len(names) == 1 else "mixed:" + ",".join(
        f"{s}={n}" for s, n in core.items())
    rec = {"expected": expected, "verified_allocator": verified,
           "bindings": b, "binding_error": rb["error"]}
    lib = preload or map_lib
    if pid is not None and lib:
        rec["mapped_lib"] = lib
        rec["preload_mapped"] = is_mapped(pid, lib)
    ok = verified == expected and rec.get("preload_mapped", True)
    rec["ok"] = bool(ok)
    return rec


def is_mapped(pid: int, lib: str) -> bool:
    """True when `lib` (or the file it resolves to) appears in /proc/PID/maps."""
    want = {lib, os.path.realpath(lib)}
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6:
                    p = parts[5].strip()
                    if p in want or os.path.realpath(p) in want:
                        return True
    except OSError:
        return False
    return False
