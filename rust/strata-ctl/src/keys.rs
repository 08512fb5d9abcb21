//! The typed names: one unit struct per mallctl name, with `read()` (and `write()` /
//! `update()` where strata accepts writes) and `mib()` for repeated use.
use crate::{raw, Mib, Result};

macro_rules! leaf {
    ($(#[$m:meta])* $id:ident, $name:literal, $t:ty, r) => {
        $(#[$m])*
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug)]
        pub struct $id;
        impl $id {
            /// The mallctl name.
            pub const NAME: &'static str = $name;
            /// Reads the value.
            pub fn read() -> Result<$t> {
                unsafe { raw::read::<$t>(Self::NAME) }
            }
            /// The name resolved once, for repeated reads.
            pub fn mib() -> Result<Mib<$t>> {
                Mib::new(Self::NAME)
            }
        }
    };
    ($(#[$m:meta])* $id:ident, $name:literal, $t:ty, rw) => {
        leaf!($(#[$m])* $id, $name, $t, r);
        impl $id {
            /// Writes the value.
            pub fn write(value: $t) -> Result<()> {
                unsafe { raw::write::<$t>(Self::NAME, value) }
            }
            /// Writes the value and returns the previous one.
            pub fn update(value: $t) -> Result<$t> {
                unsafe { raw::update::<$t>(Self::NAME, value) }
            }
        }
    };
    ($(#[$m:meta])* $id:ident, $name:literal, str) => {
        $(#[$m])*
        #[allow(non_camel_case_types)]
        #[derive(Copy, Clone, Debug)]
        pub struct $id;
        impl $id {
            /// The mallctl name.
            pub const NAME: &'static str = $name;
            /// Reads the value.
            pub fn read() -> Result<&'static str> {
                unsafe { raw::read_str(Self::NAME) }
            }
            /// The name resolved once, for repeated reads.
            pub fn mib() -> Result<Mib<&'static str>> {
                Mib::new(Self::NAME)
            }
        }
    };
}

leaf!(
    /// strata's version ("0.1.0").
    version, "version", str
);

/// `epoch`: statistics are a snapshot taken when the epoch advances.
pub mod epoch {
    use crate::{raw, Mib, Result};
    /// The mallctl name.
    pub const NAME: &str = "epoch";
    /// Refreshes the statistics snapshot; returns the new epoch.
    pub fn advance() -> Result<u64> {
        unsafe { raw::update::<u64>(NAME, 1) }
    }
    /// The current epoch, without refreshing.
    pub fn read() -> Result<u64> {
        unsafe { raw::read::<u64>(NAME) }
    }
    /// The name resolved once: `epoch::mib()?.advance()` on a hot path.
    pub fn mib() -> Result<EpochMib> {
        Ok(EpochMib(Mib::new(NAME)?))
    }
    /// `epoch` resolved to its numeric path.
    #[derive(Copy, Clone, Debug)]
    pub struct EpochMib(Mib<u64>);
    impl EpochMib {
        /// Refreshes the statistics snapshot; returns the new epoch.
        pub fn advance(&self) -> Result<u64> {
            self.0.update(1)
        }
    }
}

leaf!(
    /// Background purging threads are on (write to start or stop them).
    background_thread, "background_thread", bool, rw
);
leaf!(
    /// The most background threads.
    max_background_threads, "max_background_threads", usize, rw
);

/// `config.*`: how the library was built.
pub mod config {
    use crate::{raw, Mib, Result};
    leaf!(
        /// The options string built into the library.
        malloc_conf, "config.malloc_conf", str
    );
    leaf!(
        /// Built with internal assertions (STRATA_DEBUG).
        debug, "config.debug", bool, r
    );
    leaf!(
        /// Statistics are kept (always, in strata).
        stats, "config.stats", bool, r
    );
    leaf!(
        /// The heap profiler is built in (always, in strata: `opt.prof` turns it on).
        prof, "config.prof", bool, r
    );
}

/// `opt.*`: the options in force (from `malloc_conf`, `/etc/strata.conf`, `STRATA_CONF`,
/// `MALLOC_CONF`).
pub mod opt {
    use crate::{raw, Mib, Result};
    leaf!(
        /// Abort on warnings.
        abort, "opt.abort", bool, r
    );
    leaf!(
        /// Abort on invalid options.
        abort_conf, "opt.abort_conf", bool, r
    );
    leaf!(
        /// Keep the address space of purged extents.
        retain, "opt.retain", bool, r
    );
    leaf!(
        /// Ordinary arenas.
        narenas, "opt.narenas", u32, r
    );
    leaf!(
        /// Size from which the oversize arena serves.
        oversize_threshold, "opt.oversize_threshold", usize, r
    );
    leaf!(
        /// Dirty page decay time, ms (-1: never).
        dirty_decay_ms, "opt.dirty_decay_ms", isize, r
    );
    leaf!(
        /// Muzzy page decay time, ms.
        muzzy_decay_ms, "opt.muzzy_decay_ms", isize, r
    );
    leaf!(
        /// Background purging threads at start.
        background_thread, "opt.background_thread", bool, r
    );
    leaf!(
        /// The most background threads.
        max_background_threads, "opt.max_background_threads", usize, r
    );
    leaf!(
        /// Thread caches on.
        tcache, "opt.tcache", bool, r
    );
    leaf!(
        /// Largest size class cached per thread.
        tcache_max, "opt.tcache_max", usize, r
    );
    leaf!(
        /// Junk filling ("false", "true", "alloc", "free").
        junk, "opt.junk", str
    );
    leaf!(
        /// Zero every allocation.
        zero, "opt.zero", bool, r
    );
    leaf!(
        /// Transparent huge pages for extents ("default", "always", "never").
        thp, "opt.thp", str
    );
    leaf!(
        /// Transparent huge pages for metadata ("disabled", "auto", "always").
        metadata_thp, "opt.metadata_thp", str
    );
    leaf!(
        /// malloc_stats_print at exit.
        stats_print, "opt.stats_print", bool, r
    );
    leaf!(
        /// Heap profiling on.
        prof, "opt.prof", bool, r
    );
    leaf!(
        /// Sampling active at start.
        prof_active, "opt.prof_active", bool, r
    );
    leaf!(
        /// Mean bytes between samples, log2.
        lg_prof_sample, "opt.lg_prof_sample", usize, r
    );
    leaf!(
        /// Dump file prefix.
        prof_prefix, "opt.prof_prefix", str
    );
    leaf!(
        /// A dump every 2^N bytes allocated (-1: none).
        lg_prof_interval, "opt.lg_prof_interval", isize, r
    );
    leaf!(
        /// A dump at exit.
        prof_final, "opt.prof_final", bool, r
    );
}

/// `arenas.*`: facts about every arena.
pub mod arenas {
    use crate::{raw, Mib, Result};
    leaf!(
        /// Arenas, the oversize arena and user arenas included.
        narenas, "arenas.narenas", u32, r
    );
    leaf!(
        /// Page size.
        page, "arenas.page", usize, r
    );
    leaf!(
        /// The quantum: every block of at least this size is aligned to it.
        quantum, "arenas.quantum", usize, r
    );
    leaf!(
        /// Small size classes.
        nbins, "arenas.nbins", u32, r
    );
    leaf!(
        /// Large size classes.
        nlextents, "arenas.nlextents", u32, r
    );
    leaf!(
        /// Largest cached size class.
        tcache_max, "arenas.tcache_max", usize, r
    );
    leaf!(
        /// Dirty decay time of arenas made from now on, ms.
        dirty_decay_ms, "arenas.dirty_decay_ms", isize, rw
    );
    leaf!(
        /// Muzzy decay time of arenas made from now on, ms.
        muzzy_decay_ms, "arenas.muzzy_decay_ms", isize, rw
    );
    /// Makes a user arena (for `MALLOCX_ARENA`); returns its index.
    pub fn create() -> Result<u32> {
        unsafe { raw::read::<u32>("arenas.create") }
    }
}

/// `arena.<i>.*`: operations on one arena (`MALLCTL_ARENAS_ALL` for every arena).
pub mod arena {
    use crate::{raw, Result};
    /// The index standing for every arena.
    pub const ALL: usize = crate::ffi::MALLCTL_ARENAS_ALL;

    fn name<'a>(buf: &'a mut [u8; 48], i: usize, leaf: &str) -> &'a str {
        use std::io::Write;
        let mut c = std::io::Cursor::new(&mut buf[..]);
        let _ = write!(c, "arena.{i}.{leaf}");
        let n = c.position() as usize;
        std::str::from_utf8(&buf[..n]).unwrap_or("")
    }
    /// Returns every dirty and muzzy page of arena `i` to the system now.
    pub fn purge(i: usize) -> Result<()> {
        raw::trigger(name(&mut [0; 48], i, "purge"))
    }
    /// Purges what arena `i`'s decay curve allows now.
    pub fn decay(i: usize) -> Result<()> {
        raw::trigger(name(&mut [0; 48], i, "decay"))
    }
    /// Arena `i`'s dirty decay time, ms.
    pub fn dirty_decay_ms(i: usize) -> Result<isize> {
        unsafe { raw::read(name(&mut [0; 48], i, "dirty_decay_ms")) }
    }
    /// Sets arena `i`'s dirty decay time, ms (-1: never purge).
    pub fn set_dirty_decay_ms(i: usize, ms: isize) -> Result<()> {
        unsafe { raw::write(name(&mut [0; 48], i, "dirty_decay_ms"), ms) }
    }
}

/// `stats.*`: the snapshot of the last `epoch` advance.
pub mod stats {
    use crate::{raw, Mib, Result};
    leaf!(
        /// Bytes allocated by the application.
        allocated, "stats.allocated", usize, r
    );
    leaf!(
        /// Bytes in active pages (allocated plus page-level fragmentation).
        active, "stats.active", usize, r
    );
    leaf!(
        /// Bytes of allocator metadata.
        metadata, "stats.metadata", usize, r
    );
    leaf!(
        /// Bytes in resident pages.
        resident, "stats.resident", usize, r
    );
    leaf!(
        /// Bytes mapped, retained excluded.
        mapped, "stats.mapped", usize, r
    );
    leaf!(
        /// Bytes of address space kept without memory.
        retained, "stats.retained", usize, r
    );
    leaf!(
        /// Bytes all thread caches hold (live, strata).
        tcache_bytes, "stats.tcache_bytes", usize, r
    );
    /// `stats.background_thread.*`.
    pub mod background_thread {
        use crate::{raw, Mib, Result};
        leaf!(
            /// Background threads running.
            num_threads, "stats.background_thread.num_threads", usize, r
        );
        leaf!(
            /// Background thread wake-ups.
            num_runs, "stats.background_thread.num_runs", u64, r
        );
    }
}

/// `thread.*`: the calling thread's figures and settings.
pub mod thread {
    use crate::{raw, Mib, Result};
    leaf!(
        /// Bytes this thread has allocated (live, no epoch needed).
        allocated, "thread.allocated", u64, r
    );
    leaf!(
        /// Bytes this thread has freed.
        deallocated, "thread.deallocated", u64, r
    );
    leaf!(
        /// This thread's arena (write to move the thread).
        arena, "thread.arena", u32, rw
    );
    /// `thread.tcache.*`.
    pub mod tcache {
        use crate::{raw, Mib, Result};
        leaf!(
            /// This thread's cache is on.
            enabled, "thread.tcache.enabled", bool, rw
        );
        /// Returns every block this thread's cache holds to its arena.
        pub fn flush() -> Result<()> {
            raw::trigger("thread.tcache.flush")
        }
    }
    /// Flushes this thread's cache and purges what decay allows: call before a thread
    /// sleeps for long.
    pub fn idle() -> Result<()> {
        raw::trigger("thread.idle")
    }
}
