//! Raw bindings to strata, a jemalloc-family malloc for Linux, built from source with the
//! `cc` crate (or linked from a prebuilt `libstrata.a` named by `STRATA_OVERRIDE`).
//!
//! The names are jemalloc's (`mallocx`, `sdallocx`, `mallctl`, ...), as in
//! tikv-jemalloc-sys, so code written against that crate ports by changing the path. They
//! link to strata's `strata_`-prefixed symbols, which every build of strata exports;
//! with the `unprefixed_malloc_on_supported_platforms` feature the library also exports
//! `malloc`, `free`, ... so C and C++ code in the program allocates from strata as well.
//!
//! Configuration is read at start from, in order (later wins): the built-in string
//! (`STRATA_SYS_WITH_MALLOC_CONF` at build time, as `strata_malloc_conf`),
//! `/etc/strata.conf`, then the `STRATA_CONF` and `MALLOC_CONF` environment variables.
//! Prefixed or not, the variables keep these names.
#![no_std]
#![allow(non_camel_case_types, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// Alignment `2^la` (`la` in 1..63).
#[inline]
pub const fn MALLOCX_LG_ALIGN(la: usize) -> c_int {
    la as c_int
}

/// Alignment `align` (a power of two).
#[inline]
pub const fn MALLOCX_ALIGN(align: usize) -> c_int {
    align.trailing_zeros() as c_int
}

/// Zero the new bytes (all of them for `mallocx`, the grown tail for `rallocx`/`xallocx`).
pub const MALLOCX_ZERO: c_int = 0x40;

/// Use explicit thread cache `tc` (from mallctl `tcache.create`).
#[inline]
pub const fn MALLOCX_TCACHE(tc: usize) -> c_int {
    ((tc as c_int) + 2) << 8
}

/// Bypass the calling thread's cache.
pub const MALLOCX_TCACHE_NONE: c_int = MALLOCX_TCACHE(usize::MAX); // (-1 + 2) << 8

/// Allocate from arena `a` (from mallctl `arenas.create`, or 0..narenas).
#[inline]
pub const fn MALLOCX_ARENA(a: usize) -> c_int {
    (a as c_int).wrapping_add(1) << 20
}

/// The mallctl index standing for every arena (`arena.4096.purge`).
pub const MALLCTL_ARENAS_ALL: usize = 4096;
/// The mallctl index of the merged statistics of destroyed arenas.
pub const MALLCTL_ARENAS_DESTROYED: usize = 4097;

/// The write callback of `malloc_stats_print`.
pub type write_cb_t = unsafe extern "C" fn(*mut c_void, *const c_char);

extern "C" {
    #[link_name = "strata_malloc"]
    pub fn malloc(size: usize) -> *mut c_void;
    #[link_name = "strata_calloc"]
    pub fn calloc(number: usize, size: usize) -> *mut c_void;
    #[link_name = "strata_posix_memalign"]
    pub fn posix_memalign(ptr: *mut *mut c_void, alignment: usize, size: usize) -> c_int;
    #[link_name = "strata_aligned_alloc"]
    pub fn aligned_alloc(alignment: usize, size: usize) -> *mut c_void;
    #[link_name = "strata_realloc"]
    pub fn realloc(ptr: *mut c_void, size: usize) -> *mut c_void;
    #[link_name = "strata_free"]
    pub fn free(ptr: *mut c_void);
    #[link_name = "strata_malloc_usable_size"]
    pub fn malloc_usable_size(ptr: *const c_void) -> usize;

    /// At least `size` bytes aligned as `flags` say; NULL on failure. `size` 0 is
    /// undefined in jemalloc's contract (strata returns a minimal block).
    #[link_name = "strata_mallocx"]
    pub fn mallocx(size: usize, flags: c_int) -> *mut c_void;
    /// Resizes `ptr` (moving it if needed); NULL on failure, `ptr` then intact.
    #[link_name = "strata_rallocx"]
    pub fn rallocx(ptr: *mut c_void, size: usize, flags: c_int) -> *mut c_void;
    /// Resizes in place to at least `size` (up to `size + extra`); returns the usable size
    /// after the call, which is below `size` when it could not grow.
    #[link_name = "strata_xallocx"]
    pub fn xallocx(ptr: *mut c_void, size: usize, extra: usize, flags: c_int) -> usize;
    #[link_name = "strata_sallocx"]
    pub fn sallocx(ptr: *const c_void, flags: c_int) -> usize;
    #[link_name = "strata_dallocx"]
    pub fn dallocx(ptr: *mut c_void, flags: c_int);
    /// Frees `ptr`, whose size (anything between the requested and the usable size) the
    /// caller knows: strata skips the size lookup.
    #[link_name = "strata_sdallocx"]
    pub fn sdallocx(ptr: *mut c_void, size: usize, flags: c_int);
    /// The usable size `mallocx(size, flags)` would return; 0 if it would fail.
    #[link_name = "strata_nallocx"]
    pub fn nallocx(size: usize, flags: c_int) -> usize;

    #[link_name = "strata_mallctl"]
    pub fn mallctl(
        name: *const c_char,
        oldp: *mut c_void,
        oldlenp: *mut usize,
        newp: *mut c_void,
        newlen: usize,
    ) -> c_int;
    #[link_name = "strata_mallctlnametomib"]
    pub fn mallctlnametomib(name: *const c_char, mibp: *mut usize, miblenp: *mut usize) -> c_int;
    #[link_name = "strata_mallctlbymib"]
    pub fn mallctlbymib(
        mib: *const usize,
        miblen: usize,
        oldp: *mut c_void,
        oldlenp: *mut usize,
        newp: *mut c_void,
        newlen: usize,
    ) -> c_int;
    /// `opts`: jemalloc's letters (`J` JSON, ...) and strata's `P` (OpenMetrics), `T`
    /// (Prometheus text), `D` (per-arena and per-class series). A NULL `write_cb`
    /// writes to stderr.
    #[link_name = "strata_malloc_stats_print"]
    pub fn malloc_stats_print(write_cb: Option<write_cb_t>, cbopaque: *mut c_void, opts: *const c_char);
    /// Purges every arena and the caller's cache; 1 if memory was released.
    #[link_name = "strata_malloc_trim"]
    pub fn malloc_trim(pad: usize) -> c_int;
}

/// Keeps `c_uint` in the public vocabulary of the crate (arena indices in mallctl are
/// `unsigned`), as tikv-jemalloc-sys does.
pub type unsigned = c_uint;
