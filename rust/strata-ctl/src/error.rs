//! mallctl's errno values as a Rust error.
use std::fmt;

/// A failed mallctl call: the errno strata returned, or a name this crate could not pass.
#[derive(Copy, Clone, PartialEq, Eq)]
pub struct Error(i32);

/// `Result<T, strata_ctl::Error>`.
pub type Result<T> = std::result::Result<T, Error>;

// Linux's values; strata is Linux-only.
const EPERM: i32 = 1;
const ENOENT: i32 = 2;
const EAGAIN: i32 = 11;
const ENOMEM: i32 = 12;
const EFAULT: i32 = 14;
const EINVAL: i32 = 22;
const ENAMETOOLONG: i32 = 36;

impl Error {
    pub(crate) const NAME_TOO_LONG: Error = Error(ENAMETOOLONG);
    pub(crate) const INVALID: Error = Error(EINVAL);

    pub(crate) fn from_errno(e: i32) -> Error {
        Error(e)
    }

    /// The errno value.
    pub fn errno(&self) -> i32 {
        self.0
    }

    fn describe(&self) -> &'static str {
        match self.0 {
            EPERM => "EPERM: the name is read-only or write-only, or the operation is not allowed now",
            ENOENT => "ENOENT: no such mallctl name",
            EAGAIN => "EAGAIN: the calling thread has no allocator state (it is exiting)",
            ENOMEM => "ENOMEM: out of memory",
            EFAULT => "EFAULT: the operation failed (a profile dump could not be written)",
            EINVAL => "EINVAL: invalid value or size for this name (or a name with a NUL byte)",
            ENAMETOOLONG => "ENAMETOOLONG: the name is longer than 127 bytes or has more than 8 components",
            _ => "mallctl failed",
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Error({}: {})", self.0, self.describe())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mallctl: {} (errno {})", self.describe(), self.0)
    }
}

impl std::error::Error for Error {}

pub(crate) fn cvt(ret: i32) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Error(ret))
    }
}
