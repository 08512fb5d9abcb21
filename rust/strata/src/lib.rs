//! strata as Rust's global allocator.
//!
//! ```no_run
//! #[global_allocator]
//! static GLOBAL: strata::Strata = strata::Strata;
//! ```
//!
//! Every call passes what Rust knows to strata: deallocation is sized (`sdallocx`, which
//! skips the size lookup free() does), alignment is asked for only when the layout needs
//! more than strata gives every block of that size, and `realloc` is `rallocx`, which
//! resizes in place whenever the size class does not change or a large block can grow or
//! shrink where it is.
#![no_std]
#![deny(missing_docs)]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::{c_int, c_void};

pub use strata_sys as ffi;

/// The alignment strata gives every block of at least this size without being asked: the
/// quantum (16 bytes); the 8-byte class is 8-aligned, which `align <= size` covers.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64",
          target_arch = "powerpc64", target_arch = "s390x", target_arch = "loongarch64"))]
const MIN_ALIGN: usize = 16;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64", target_arch = "riscv64",
              target_arch = "powerpc64", target_arch = "s390x", target_arch = "loongarch64")))]
const MIN_ALIGN: usize = 8;

/// `MALLOCX_ALIGN(align)` only where the size's own alignment falls short: for most
/// layouts the flags are 0 and the calls take strata's fast paths.
#[inline(always)]
fn layout_to_flags(align: usize, size: usize) -> c_int {
    if align <= MIN_ALIGN && align <= size {
        0
    } else {
        ffi::MALLOCX_ALIGN(align)
    }
}

/// The global allocator: `#[global_allocator] static GLOBAL: strata::Strata = strata::Strata;`
#[derive(Copy, Clone, Default, Debug)]
pub struct Strata;

unsafe impl GlobalAlloc for Strata {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let flags = layout_to_flags(layout.align(), layout.size());
        if flags == 0 {
            ffi::malloc(layout.size()) as *mut u8
        } else {
            ffi::mallocx(layout.size(), flags) as *mut u8
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let flags = layout_to_flags(layout.align(), layout.size());
        if flags == 0 {
            // calloc knows when fresh pages are already zero.
            ffi::calloc(1, layout.size()) as *mut u8
        } else {
            ffi::mallocx(layout.size(), flags | ffi::MALLOCX_ZERO) as *mut u8
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let flags = layout_to_flags(layout.align(), layout.size());
        ffi::sdallocx(ptr as *mut c_void, layout.size(), flags)
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let flags = layout_to_flags(layout.align(), new_size);
        ffi::rallocx(ptr as *mut c_void, new_size, flags) as *mut u8
    }
}

/// The usable size of a block from this allocator (at least the size it was asked for).
///
/// # Safety
/// `ptr` must be a live block allocated by strata.
#[inline]
pub unsafe fn usable_size<T>(ptr: *const T) -> usize {
    ffi::malloc_usable_size(ptr as *const c_void)
}

/// Grows or shrinks the block at `ptr` in place to at least `size` bytes (up to
/// `size + extra` if there is room) and returns its usable size afterwards: smaller
/// than `size` when it could not grow there. Never moves the block.
///
/// # Safety
/// `ptr` must be a live block allocated by strata with alignment `align`.
#[inline]
pub unsafe fn resize_in_place(ptr: *mut u8, align: usize, size: usize, extra: usize) -> usize {
    ffi::xallocx(ptr as *mut c_void, size, extra, layout_to_flags(align, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_only_for_alignment_beyond_the_size_class() {
        assert_eq!(layout_to_flags(8, 8), 0);
        assert_eq!(layout_to_flags(16, 16), 0);
        assert_eq!(layout_to_flags(16, 4096), 0);
        assert_eq!(layout_to_flags(4, 3), ffi::MALLOCX_ALIGN(4)); // align > size
        assert_eq!(layout_to_flags(32, 64), ffi::MALLOCX_ALIGN(32));
        assert_eq!(layout_to_flags(4096, 4096), ffi::MALLOCX_ALIGN(4096));
    }
}
