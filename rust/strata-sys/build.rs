//! Builds libstrata.a from the C sources with the `cc` crate, with the flags and defines
//! the CMake build uses for its static library (CMakeLists.txt, `strata_configure`).
//!
//! Environment, as tikv-jemalloc-sys reads its JEMALLOC_* variables:
//! - `STRATA_OVERRIDE=/path/libstrata.a` (or `.so`): link that library instead of
//!   building one (a CMake build of strata, prefixed or not: only strata_ names are used).
//! - `STRATA_SYS_WITH_MALLOC_CONF=opts`: options in MALLOC_CONF syntax built into the
//!   program as its `malloc_conf` string; /etc/strata.conf, STRATA_CONF and MALLOC_CONF
//!   still override them at run time, in that order.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// Every C file of src/ is part of the library (CMakeLists.txt's STRATA_SOURCES lists them
/// all); taking the directory's list keeps this build in step when a file is added.
fn sources(src: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(src)
        .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().map_or(false, |x| x == "c")).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(env::var_os("OUT_DIR").unwrap());
    for v in ["STRATA_OVERRIDE", "STRATA_SYS_WITH_MALLOC_CONF", "CC", "CFLAGS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os != "linux" {
        panic!("strata-sys: strata supports Linux only (target OS {target_os:?})");
    }

    let include = manifest.join("include");
    println!("cargo:include={}", include.display());

    if let Some(lib) = env::var_os("STRATA_OVERRIDE") {
        link_prebuilt(Path::new(&lib));
    } else {
        build_from_source(&manifest.join("c_src"), &include);
    }

    if let Ok(conf) = env::var("STRATA_SYS_WITH_MALLOC_CONF") {
        build_malloc_conf(&conf, &out);
    }
    // What the C code uses beyond libc: threads, libm (the profiler's sampler) and libgcc's
    // unwinder (the profiler's and the guard's stacks); Rust's std on Linux links them
    // too, but a no_std program would not.
    println!("cargo:rustc-link-lib=pthread");
    println!("cargo:rustc-link-lib=m");
    println!("cargo:rustc-link-lib=gcc_s");
}

fn build_from_source(src: &Path, include: &Path) {
    let files = sources(src);
    if !files.iter().any(|p| p.ends_with("alloc.c")) {
        panic!(
            "strata-sys: no C sources in {}; in a checkout, c_src links to the repository's src/ \
             (clone with symlinks enabled), or set STRATA_OVERRIDE to a prebuilt libstrata.a",
            src.display()
        );
    }
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", include.display());
    for f in files.iter().cloned().chain(headers(src)).chain(headers(include)) {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let mut b = cc::Build::new();
    b.files(&files)
        .include(include)
        .include(include.join("strata"))
        .include(src)
        .std("c11")
        .pic(true)
        // Optimised whatever the profile: a debug build of the program still wants a
        // fast allocator (STRATA_DEBUG is the debugging switch).
        .opt_level(2)
        .warnings(false)
        .define("_GNU_SOURCE", None);
    for flag in [
        "-fvisibility=hidden",
        "-fno-plt",
        "-ftls-model=initial-exec",
        "-fno-semantic-interposition",
        "-fno-builtin-malloc",
        "-fno-builtin-free",
        "-fno-builtin-calloc",
        "-fno-builtin-realloc",
    ] {
        b.flag_if_supported(flag);
    }
    if env::var_os("CARGO_FEATURE_UNPREFIXED_MALLOC_ON_SUPPORTED_PLATFORMS").is_some() {
        b.define("STRATA_OVERRIDE", "1");
    }
    if env::var_os("CARGO_FEATURE_DEBUG").is_some() {
        b.define("STRATA_DEBUG", "1");
    }
    b.compile("strata");
}

fn headers(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                v.extend(headers(&p));
            } else if p.extension().map_or(false, |x| x == "h") {
                v.push(p);
            }
        }
    }
    v
}

fn link_prebuilt(lib: &Path) {
    println!("cargo:rerun-if-changed={}", lib.display());
    let name = lib.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let (stem, kind) = if let Some(s) = name.strip_suffix(".a") {
        (s, "static")
    } else if let Some(i) = name.find(".so") {
        (&name[..i], "dylib")
    } else {
        panic!("strata-sys: STRATA_OVERRIDE={} is not a .a or .so file", lib.display());
    };
    let stem = stem.strip_prefix("lib").unwrap_or_else(|| {
        panic!("strata-sys: STRATA_OVERRIDE={}: the file name must start with lib", lib.display())
    });
    if !lib.is_file() {
        panic!("strata-sys: STRATA_OVERRIDE={}: no such file", lib.display());
    }
    let dir = lib.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib={kind}={stem}");
}

/// The options become strata's `strata_malloc_conf` string (every build reads it, prefixed
/// or not, and a program may still define jemalloc's `malloc_conf` beside it). strata's own
/// definition is weak; this strong one sits in an archive of its own linked whole, since
/// nothing references the symbol and it would otherwise be left out.
fn build_malloc_conf(conf: &str, out: &Path) {
    if conf.bytes().any(|c| c == 0 || c == b'\n') {
        panic!("strata-sys: STRATA_SYS_WITH_MALLOC_CONF must be one line of key:value pairs");
    }
    let escaped: String = conf
        .chars()
        .flat_map(|c| match c {
            '"' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let file = out.join("strata_sys_malloc_conf.c");
    fs::write(
        &file,
        format!(
            "/* generated by strata-sys from STRATA_SYS_WITH_MALLOC_CONF */\n\
             __attribute__((visibility(\"default\"))) const char *strata_malloc_conf = \"{escaped}\";\n"
        ),
    )
    .unwrap();
    cc::Build::new().file(&file).pic(true).cargo_metadata(false).compile("strata_sys_conf");
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static:+whole-archive=strata_sys_conf");
}
