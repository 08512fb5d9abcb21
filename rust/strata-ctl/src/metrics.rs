//! strata's statistics as metrics text, written by strata itself (`malloc_stats_print`
//! with `P` or `T`): the epoch is advanced first, so the figures are fresh.
//!
//! ```no_run
//! // in an HTTP handler for /metrics:
//! let body = strata_ctl::metrics::openmetrics().unwrap();
//! // Content-Type: application/openmetrics-text; version=1.0.0; charset=utf-8
//! ```
//!
//! Without detail every family is one unlabelled sample of the merged figures
//! (`strata_allocated_bytes`, `strata_resident_bytes`, ...); with detail, per-arena series
//! carry `arena="<i>"` and per-size-class families are added. With the
//! `prometheus-client` feature, [`StrataCollector`] adds the same families to a
//! `prometheus_client` registry.
use crate::ffi;
use crate::Result;
use std::ffi::{c_char, c_void, CStr};

/// The OpenMetrics text (`application/openmetrics-text; version=1.0.0`), ending `# EOF`.
pub fn openmetrics() -> Result<String> {
    print("P")
}

/// The OpenMetrics text with per-arena and per-size-class series.
pub fn openmetrics_detailed() -> Result<String> {
    print("PD")
}

/// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`), as node_exporter's
/// textfile collector reads.
pub fn prometheus_text() -> Result<String> {
    print("T")
}

/// `malloc_stats_print` with jemalloc's option letters (`J` for JSON, ...), collected.
pub fn stats_print(opts: &str) -> Result<String> {
    print(opts)
}

unsafe extern "C" fn append(opaque: *mut c_void, s: *const c_char) {
    let out = &mut *(opaque as *mut Vec<u8>);
    out.extend_from_slice(CStr::from_ptr(s).to_bytes());
}

fn print(opts: &str) -> Result<String> {
    let o = crate::raw::CName::new(opts)?;
    let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
    unsafe { ffi::malloc_stats_print(Some(append), &mut out as *mut Vec<u8> as *mut c_void, o.as_ptr()) };
    // strata writes ASCII; a lossy conversion keeps any surprise visible, not fatal.
    Ok(String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

#[cfg(feature = "prometheus-client")]
mod collector {
    use crate::{epoch, stats, thread};
    use prometheus_client::collector::Collector;
    use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::registry::Unit;

    /// strata's gauges for a `prometheus_client` registry, read at each scrape:
    /// `registry.register_collector(Box::new(StrataCollector::default()))`.
    ///
    /// Families (prefix the registry's own): `strata_{allocated,active,metadata,resident,
    /// mapped,retained}_bytes`, the names strata's own OpenMetrics text uses.
    #[derive(Debug, Default)]
    pub struct StrataCollector {
        _private: (),
    }

    impl Collector for StrataCollector {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            if epoch::advance().is_err() {
                return Ok(()); // the thread is exiting: no sample this scrape
            }
            let rows: [(&str, &str, crate::Result<usize>); 6] = [
                ("strata_allocated", "bytes allocated by the application", stats::allocated::read()),
                ("strata_active", "bytes in active pages", stats::active::read()),
                ("strata_metadata", "bytes of allocator metadata", stats::metadata::read()),
                ("strata_resident", "bytes in resident pages", stats::resident::read()),
                ("strata_mapped", "bytes mapped, retained excluded", stats::mapped::read()),
                ("strata_retained", "bytes of address space kept without memory", stats::retained::read()),
            ];
            for (name, help, v) in rows {
                if let Ok(v) = v {
                    let g = ConstGauge::new(v as i64);
                    let e = encoder.encode_descriptor(name, help, Some(&Unit::Bytes), g.metric_type())?;
                    g.encode(e)?;
                }
            }
            let _ = thread::allocated::NAME; // per-thread figures are not process metrics
            Ok(())
        }
    }
}

#[cfg(feature = "prometheus-client")]
pub use collector::StrataCollector;
