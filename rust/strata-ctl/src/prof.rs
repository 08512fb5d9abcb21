//! Heap profiles: strata's `prof.dump` to a path, or to bytes.
//!
//! Profiling must be on from the start: `MALLOC_CONF=prof:true` (or `STRATA_CONF`, or
//! `STRATA_SYS_WITH_MALLOC_CONF` at build time). The format is the option `prof_format`:
//! `jemalloc` (heap_v2 text, the default, read by jeprof), `pprof` (profile.proto,
//! gzipped, read by `go tool pprof`, Pyroscope, Parca) or `both` (the proto then goes to
//! `<path>.pb.gz`). `lg_prof_sample` sets the mean bytes between samples (2^19 default).
//!
//! ```no_run
//! // MALLOC_CONF=prof:true,prof_format:pprof
//! let profile = strata_ctl::prof::dump_bytes().unwrap(); // serve at /debug/pprof/heap
//! assert_eq!(profile.format(), strata_ctl::prof::Format::Pprof);
//! ```
use crate::error::{Error, Result};
use crate::raw;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Sampling on (write to pause or resume).
pub fn active() -> Result<bool> {
    unsafe { raw::read("prof.active") }
}

/// Pauses or resumes sampling; returns the previous state.
pub fn set_active(on: bool) -> Result<bool> {
    unsafe { raw::update("prof.active", on) }
}

/// Forgets every sample (the next dump shows only what is allocated from now on).
pub fn reset() -> Result<()> {
    raw::trigger("prof.reset")
}

/// Writes a heap profile to `path`, in the configured format(s). EPERM-like errors
/// (`Error::errno`) when profiling is off (`opt.prof` false); EFAULT when the file could
/// not be written.
pub fn dump(path: &Path) -> Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::INVALID)?;
    raw::write_str("prof.dump", &c)
}

/// Writes a heap profile under strata's own name (`<prof_prefix>.<pid>.<seq>.m<n>.heap`).
pub fn dump_default() -> Result<()> {
    unsafe { raw::write::<*const std::ffi::c_char>("prof.dump", std::ptr::null()) }
}

/// What a dump holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// pprof's profile.proto, gzipped.
    Pprof,
    /// jemalloc's heap_v2 text.
    HeapV2,
}

/// A heap profile read back from a dump.
#[derive(Clone, Debug)]
pub struct Profile {
    bytes: Vec<u8>,
}

impl Profile {
    /// The format, from the bytes themselves.
    pub fn format(&self) -> Format {
        if self.bytes.starts_with(&[0x1f, 0x8b]) {
            Format::Pprof
        } else {
            Format::HeapV2
        }
    }
    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// The bytes, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Dumps a heap profile and returns it: the pprof proto when `prof_format` is `pprof` or
/// `both`, the heap_v2 text when it is `jemalloc`. The dump goes through a private file
/// in the temporary directory (`TMPDIR`), removed afterwards.
pub fn dump_bytes() -> Result<Profile> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let path: PathBuf = std::env::temp_dir().join(format!(
        "strata-ctl-{}-{}.heap",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let pb = PathBuf::from(format!("{}.pb.gz", path.display()));
    let r = dump(&path);
    let out = r.and_then(|()| {
        std::fs::read(&pb).or_else(|_| std::fs::read(&path)).map_err(|_| Error::from_errno(5 /* EIO */))
    });
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&pb);
    out.map(|bytes| Profile { bytes })
}
