//! A typed, safe view of strata's mallctl tree, in the shape of tikv-jemalloc-ctl, plus
//! what services otherwise write by hand: the OpenMetrics text ([`metrics`]) and heap
//! profile dumps to a path or to bytes ([`prof`]).
//!
//! ```no_run
//! use strata_ctl::{epoch, stats};
//! # fn main() -> Result<(), strata_ctl::Error> {
//! epoch::advance()?; // statistics are a snapshot: refresh it first
//! let allocated = stats::allocated::read()?;
//! let resident = stats::resident::read()?;
//! // Faster on a hot path: resolve the name once.
//! let e = epoch::mib()?;
//! let a = stats::allocated::mib()?;
//! e.advance()?;
//! let now = a.read()?;
//! # let _ = (allocated, resident, now); Ok(()) }
//! ```
//!
//! Every accessor calls strata's `mallctl` whichever way the library was linked: the
//! [`strata`](https://docs.rs/strata) global allocator, or strata-sys alone.
#![deny(missing_docs)]

use std::fmt;
use std::marker::PhantomData;

pub use strata_sys as ffi;

mod error;
mod keys;
pub mod metrics;
pub mod prof;
pub mod raw;

pub use error::{Error, Result};
pub use keys::*;

/// The longest mallctl name (dot-separated components) strata's tree has, with room.
pub const MAX_DEPTH: usize = 8;

/// A name resolved to its numeric path (a "management information base"), reading and
/// writing values of type `T` without looking the name up again.
#[derive(Copy, Clone)]
pub struct Mib<T> {
    mib: [usize; MAX_DEPTH],
    len: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Mib<T> {
    /// Resolves `name` ("stats.allocated").
    pub fn new(name: &str) -> Result<Self> {
        let (mib, len) = raw::name_to_mib(name)?;
        Ok(Mib { mib, len, _t: PhantomData })
    }

    /// The numeric path.
    pub fn as_slice(&self) -> &[usize] {
        &self.mib[..self.len]
    }

    /// Replaces component `i` (an arena or size-class index, as in
    /// `stats.arenas.<i>.pactive`) and returns the new path.
    pub fn with_index(mut self, i: usize, value: usize) -> Self {
        assert!(i < self.len, "mib component {i} out of 0..{}", self.len);
        self.mib[i] = value;
        self
    }
}

impl<T: Copy> Mib<T> {
    /// Reads the value.
    pub fn read(&self) -> Result<T> {
        unsafe { raw::read_mib(self.as_slice()) }
    }
    /// Writes the value.
    pub fn write(&self, value: T) -> Result<()> {
        unsafe { raw::write_mib(self.as_slice(), value) }
    }
    /// Writes the value and returns the previous one.
    pub fn update(&self, value: T) -> Result<T> {
        unsafe { raw::update_mib(self.as_slice(), value) }
    }
}

impl Mib<&'static str> {
    /// Reads a string value.
    pub fn read_str(&self) -> Result<&'static str> {
        unsafe { raw::read_str_mib(self.as_slice()) }
    }
}

impl<T> fmt::Debug for Mib<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Mib").field(&self.as_slice()).finish()
    }
}

/// The statistics services export, read together after one `epoch` advance.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes the program holds (`stats.allocated`).
    pub allocated: usize,
    /// Bytes in pages with live blocks (`stats.active`): `allocated` plus fragmentation.
    pub active: usize,
    /// Bytes of allocator metadata (`stats.metadata`).
    pub metadata: usize,
    /// Bytes in resident pages (`stats.resident`).
    pub resident: usize,
    /// Bytes mapped, retained excluded (`stats.mapped`).
    pub mapped: usize,
    /// Address space kept without memory behind it (`stats.retained`).
    pub retained: usize,
}

impl Stats {
    /// Advances the epoch and reads the six figures.
    pub fn read() -> Result<Stats> {
        epoch::advance()?;
        Ok(Stats {
            allocated: stats::allocated::read()?,
            active: stats::active::read()?,
            metadata: stats::metadata::read()?,
            resident: stats::resident::read()?,
            mapped: stats::mapped::read()?,
            retained: stats::retained::read()?,
        })
    }
}
