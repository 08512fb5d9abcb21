//! Reads and writes by name or by numeric path, for any name of the tree. The caller
//! names the value's type: it must be exactly the C type the name has (`size_t` is
//! `usize`, `unsigned` is `u32`, `ssize_t` is `isize`, `bool` is `bool`, `uint64_t` is
//! `u64`); strata checks the size and answers EINVAL on a mismatch.
//!
//! Names are copied into a stack buffer, so none of these functions allocates (they may
//! be called from a hook inside the allocator).
use crate::error::{cvt, Error, Result};
use crate::ffi;
use crate::MAX_DEPTH;
use std::ffi::{c_char, c_void, CStr};
use std::mem::{size_of, MaybeUninit};
use std::ptr;

/// The longest name accepted, NUL excluded.
pub const MAX_NAME: usize = 127;

pub(crate) struct CName([u8; MAX_NAME + 1]);

impl CName {
    pub(crate) fn new(name: &str) -> Result<CName> {
        let b = name.as_bytes();
        let b = b.strip_suffix(b"\0").unwrap_or(b); // tikv-jemalloc-ctl style b"name\0"
        if b.len() > MAX_NAME {
            return Err(Error::NAME_TOO_LONG);
        }
        if b.contains(&0) {
            return Err(Error::INVALID);
        }
        let mut buf = [0u8; MAX_NAME + 1];
        buf[..b.len()].copy_from_slice(b);
        Ok(CName(buf))
    }
    pub(crate) fn as_ptr(&self) -> *const c_char {
        self.0.as_ptr() as *const c_char
    }
}

/// Resolves a name to its numeric path.
pub fn name_to_mib(name: &str) -> Result<([usize; MAX_DEPTH], usize)> {
    let n = CName::new(name)?;
    let mut mib = [0usize; MAX_DEPTH];
    let mut len = MAX_DEPTH;
    cvt(unsafe { ffi::mallctlnametomib(n.as_ptr(), mib.as_mut_ptr(), &mut len) })?;
    Ok((mib, len))
}

unsafe fn call<T>(name: &str, old: Option<*mut T>, new: Option<*const T>) -> Result<()> {
    let n = CName::new(name)?;
    let mut oldlen = size_of::<T>();
    let ret = ffi::mallctl(
        n.as_ptr(),
        old.map_or(ptr::null_mut(), |p| p as *mut c_void),
        if old.is_some() { &mut oldlen } else { ptr::null_mut() },
        new.map_or(ptr::null_mut(), |p| p as *mut c_void),
        if new.is_some() { size_of::<T>() } else { 0 },
    );
    cvt(ret)?;
    if old.is_some() && oldlen != size_of::<T>() {
        return Err(Error::INVALID);
    }
    Ok(())
}

unsafe fn call_mib<T>(mib: &[usize], old: Option<*mut T>, new: Option<*const T>) -> Result<()> {
    let mut oldlen = size_of::<T>();
    let ret = ffi::mallctlbymib(
        mib.as_ptr(),
        mib.len(),
        old.map_or(ptr::null_mut(), |p| p as *mut c_void),
        if old.is_some() { &mut oldlen } else { ptr::null_mut() },
        new.map_or(ptr::null_mut(), |p| p as *mut c_void),
        if new.is_some() { size_of::<T>() } else { 0 },
    );
    cvt(ret)?;
    if old.is_some() && oldlen != size_of::<T>() {
        return Err(Error::INVALID);
    }
    Ok(())
}

/// Reads `name`.
///
/// # Safety
/// `T` must be the name's C type (any bit pattern strata writes must be a valid `T`).
pub unsafe fn read<T: Copy>(name: &str) -> Result<T> {
    let mut v = MaybeUninit::<T>::uninit();
    call::<T>(name, Some(v.as_mut_ptr()), None)?;
    Ok(v.assume_init())
}

/// Writes `name`.
///
/// # Safety
/// `T` must be the name's C type; pointers written must stay valid as long as strata
/// may use them.
pub unsafe fn write<T: Copy>(name: &str, value: T) -> Result<()> {
    call::<T>(name, None, Some(&value))
}

/// Writes `name` and returns its previous value.
///
/// # Safety
/// As [`read`] and [`write`].
pub unsafe fn update<T: Copy>(name: &str, value: T) -> Result<T> {
    let mut v = MaybeUninit::<T>::uninit();
    call::<T>(name, Some(v.as_mut_ptr()), Some(&value))?;
    Ok(v.assume_init())
}

/// Triggers a name that takes no value (`thread.tcache.flush`, `arena.<i>.purge`).
pub fn trigger(name: &str) -> Result<()> {
    let n = CName::new(name)?;
    cvt(unsafe { ffi::mallctl(n.as_ptr(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), 0) })
}

/// Reads a string-valued name (`version`, `opt.junk`, `opt.prof_prefix`, ...). strata's
/// strings live as long as the program.
///
/// # Safety
/// The name must have type `const char *`.
pub unsafe fn read_str(name: &str) -> Result<&'static str> {
    let p: *const c_char = read(name)?;
    cstr(p)
}

unsafe fn cstr(p: *const c_char) -> Result<&'static str> {
    if p.is_null() {
        return Ok("");
    }
    CStr::from_ptr(p).to_str().map_err(|_| Error::INVALID)
}

/// Reads by numeric path.
///
/// # Safety
/// As [`read`].
pub unsafe fn read_mib<T: Copy>(mib: &[usize]) -> Result<T> {
    let mut v = MaybeUninit::<T>::uninit();
    call_mib::<T>(mib, Some(v.as_mut_ptr()), None)?;
    Ok(v.assume_init())
}

/// Writes by numeric path.
///
/// # Safety
/// As [`write`].
pub unsafe fn write_mib<T: Copy>(mib: &[usize], value: T) -> Result<()> {
    call_mib::<T>(mib, None, Some(&value))
}

/// Writes by numeric path and returns the previous value.
///
/// # Safety
/// As [`read`] and [`write`].
pub unsafe fn update_mib<T: Copy>(mib: &[usize], value: T) -> Result<T> {
    let mut v = MaybeUninit::<T>::uninit();
    call_mib::<T>(mib, Some(v.as_mut_ptr()), Some(&value))?;
    Ok(v.assume_init())
}

/// Reads a string by numeric path.
///
/// # Safety
/// As [`read_str`].
pub unsafe fn read_str_mib(mib: &[usize]) -> Result<&'static str> {
    let p: *const c_char = read_mib(mib)?;
    cstr(p)
}

/// Writes a string-valued name (`prof.dump`, `thread.prof.name`); strata copies it.
pub fn write_str(name: &str, value: &CStr) -> Result<()> {
    unsafe { write::<*const c_char>(name, value.as_ptr()) }
}
