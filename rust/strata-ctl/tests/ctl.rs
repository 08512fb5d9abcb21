//! Each accessor against a change it must see. Tests that read process-wide statistics
//! hold STATS so that their allocations do not overlap; options are checked in child
//! processes started with MALLOC_CONF / STRATA_CONF.
use std::process::Command;
use std::sync::Mutex;
use strata_ctl::*;

#[global_allocator]
static GLOBAL: strata::Strata = strata::Strata;

static STATS: Mutex<()> = Mutex::new(());
const MIB64: usize = 64 << 20;

fn lock() -> std::sync::MutexGuard<'static, ()> {
    STATS.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn epoch_advances() {
    let a = epoch::advance().unwrap();
    let b = epoch::advance().unwrap();
    assert!(b > a);
    assert_eq!(epoch::read().unwrap(), b);
    let m = epoch::mib().unwrap();
    assert!(m.advance().unwrap() > b);
}

#[test]
fn a_64_mib_allocation_moves_allocated_active_mapped_resident() {
    let _g = lock();
    let s0 = Stats::read().unwrap();
    let mut v = vec![1u8; MIB64]; // written: resident too
    v[MIB64 - 1] = 2;
    let s1 = Stats::read().unwrap();
    // Other tests run on other threads meanwhile (only some take the lock) and free what
    // they allocated: the figures may move by their few blocks besides the 64 MiB.
    const SLACK: usize = 1 << 20;
    assert!(s1.allocated + SLACK >= s0.allocated + MIB64, "{s0:?} -> {s1:?}");
    assert!(s1.active + SLACK >= s0.active + MIB64, "{s0:?} -> {s1:?}");
    // Mapped and resident pages cover the new active ones; they grow by less than 64 MiB
    // where the allocation reuses dirty pages that were already mapped and resident.
    assert!(s1.mapped + SLACK >= s0.active + MIB64, "{s0:?} -> {s1:?}");
    assert!(s1.resident + SLACK >= s0.active + MIB64, "{s0:?} -> {s1:?}");
    // The typed reads and the MIB reads see the same snapshot.
    assert_eq!(stats::allocated::mib().unwrap().read().unwrap(), s1.allocated);
    assert_eq!(stats::active::mib().unwrap().read().unwrap(), s1.active);
    drop(v);
    let s2 = Stats::read().unwrap();
    assert!(s2.allocated + MIB64 <= s1.allocated, "{s1:?} -> {s2:?}");
}

#[test]
fn purging_turns_mapped_and_resident_into_retained() {
    let _g = lock();
    let v = vec![3u8; MIB64];
    assert_eq!(v[12345], 3);
    let s1 = Stats::read().unwrap();
    drop(v);
    arena::purge(arena::ALL).unwrap();
    let s2 = Stats::read().unwrap();
    assert!(opt::retain::read().unwrap());
    assert!(s2.retained >= s1.retained + MIB64 / 2, "{s1:?} -> {s2:?}");
    assert!(s2.resident + MIB64 / 2 <= s1.resident, "{s1:?} -> {s2:?}");
    assert!(s2.mapped + MIB64 / 2 <= s1.mapped, "{s1:?} -> {s2:?}");
}

#[test]
fn a_million_small_blocks_move_metadata() {
    let _g = lock();
    let s1 = Stats::read().unwrap();
    let smalls: Vec<Box<[u8; 40]>> = (0..1_000_000).map(|_| Box::new([0u8; 40])).collect();
    let s2 = Stats::read().unwrap();
    assert!(s2.metadata > s1.metadata, "{s1:?} -> {s2:?}");
    assert!(s2.allocated >= s1.allocated + 40 * 1_000_000);
    drop(smalls);
}

#[test]
fn thread_counters_count_this_threads_bytes() {
    std::thread::spawn(|| {
        let a0 = thread::allocated::read().unwrap();
        let d0 = thread::deallocated::read().unwrap();
        let m = thread::allocated::mib().unwrap();
        let v = vec![0u8; MIB64];
        let a1 = thread::allocated::read().unwrap();
        assert!(a1 >= a0 + MIB64 as u64 && a1 < a0 + MIB64 as u64 + (1 << 20), "{a0} -> {a1}");
        assert_eq!(m.read().unwrap(), a1);
        drop(v);
        let d1 = thread::deallocated::read().unwrap();
        assert!(d1 >= d0 + MIB64 as u64, "{d0} -> {d1}");
    })
    .join()
    .unwrap();
}

#[test]
fn thread_cache_and_arena_settings() {
    std::thread::spawn(|| {
        assert!(thread::tcache::enabled::read().unwrap());
        assert!(thread::tcache::enabled::update(false).unwrap());
        assert!(!thread::tcache::enabled::read().unwrap());
        let b = Box::new(5u64); // still allocates with the cache off
        assert_eq!(*b, 5);
        thread::tcache::enabled::write(true).unwrap();
        thread::tcache::flush().unwrap();
        thread::idle().unwrap();
        let a = thread::arena::read().unwrap();
        assert!(a < arenas::narenas::read().unwrap());
    })
    .join()
    .unwrap();
}

#[test]
fn arenas_create_moves_narenas() {
    let _g = lock();
    let n0 = arenas::narenas::read().unwrap();
    let i = arenas::create().unwrap();
    assert!(i >= n0 - 1, "new arena {i}, narenas was {n0}");
    assert_eq!(arenas::narenas::read().unwrap(), n0 + 1);
    // An allocation in the new arena is counted in its own statistics.
    let p = unsafe { ffi::mallocx(1 << 20, ffi::MALLOCX_ARENA(i as usize)) };
    assert!(!p.is_null());
    epoch::advance().unwrap();
    let pactive = Mib::<usize>::new("stats.arenas.0.pactive").unwrap().with_index(2, i as usize);
    assert!(pactive.read().unwrap() * arenas::page::read().unwrap() >= 1 << 20);
    unsafe { ffi::dallocx(p, 0) };
    arena::purge(i as usize).unwrap();
    arena::set_dirty_decay_ms(i as usize, 500).unwrap();
    assert_eq!(arena::dirty_decay_ms(i as usize).unwrap(), 500);
}

#[test]
fn constant_facts() {
    assert_eq!(version::read().unwrap(), "0.1.0");
    assert_eq!(arenas::page::read().unwrap() % 4096, 0);
    assert_eq!(arenas::quantum::read().unwrap(), 16);
    assert!(arenas::nbins::read().unwrap() > 30);
    assert!(arenas::nlextents::read().unwrap() > 100);
    assert!(arenas::tcache_max::read().unwrap() >= 1024);
    assert!(config::stats::read().unwrap());
    assert!(config::prof::read().unwrap());
    let _ = config::debug::read().unwrap();
    let _ = config::malloc_conf::read().unwrap();
}

#[test]
fn background_threads_start_and_stop() {
    let _g = lock();
    // On by default (threads start lazily, once there are pages to decay).
    assert!(background_thread::read().unwrap());
    assert!(max_background_threads::read().unwrap() >= 1);
    background_thread::write(false).unwrap();
    assert!(!background_thread::read().unwrap());
    epoch::advance().unwrap();
    assert_eq!(stats::background_thread::num_threads::read().unwrap(), 0);
    background_thread::write(true).unwrap();
    assert!(background_thread::read().unwrap());
    epoch::advance().unwrap();
    assert!(stats::background_thread::num_threads::read().unwrap() >= 1);
}

#[test]
fn raw_reads_and_writes_by_name_and_mib() {
    let _g = lock();
    epoch::advance().unwrap();
    let by_name: usize = unsafe { raw::read("stats.allocated").unwrap() };
    let (mib, len) = raw::name_to_mib("stats.allocated").unwrap();
    let by_mib: usize = unsafe { raw::read_mib(&mib[..len]).unwrap() };
    assert_eq!(by_name, by_mib);
    // tikv-jemalloc-ctl's b"name\0" spelling is accepted too.
    let v: &str = unsafe { raw::read_str("version\0").unwrap() };
    assert_eq!(v, "0.1.0");
    let old: isize = unsafe { raw::update("arenas.dirty_decay_ms", 2000isize).unwrap() };
    assert_eq!(arenas::dirty_decay_ms::read().unwrap(), 2000);
    arenas::dirty_decay_ms::write(old).unwrap();
    let m = arenas::dirty_decay_ms::mib().unwrap();
    assert_eq!(m.update(1234).unwrap(), old);
    assert_eq!(m.read().unwrap(), 1234);
    m.write(old).unwrap();
}

#[test]
fn errors_name_the_problem() {
    let e = unsafe { raw::read::<usize>("stats.no_such_name") }.unwrap_err();
    assert_eq!(e.errno(), 2);
    assert!(e.to_string().contains("ENOENT"), "{e}");
    let e = unsafe { raw::read::<u8>("stats.allocated") }.unwrap_err(); // wrong size
    assert_eq!(e.errno(), 22);
    let e = stats::allocated::mib().unwrap().write(5).unwrap_err(); // read-only
    assert!(e.errno() == 1 || e.errno() == 22, "{e:?}");
    let long = "x.".repeat(100);
    assert_eq!(unsafe { raw::read::<usize>(&long) }.unwrap_err().errno(), 36);
    assert_eq!(unsafe { raw::read::<usize>("stats\0.allocated") }.unwrap_err().errno(), 22);
}

/// The OpenMetrics text, parsed: every family's TYPE once before its samples, every
/// sample name the family's (counters with `_total`), every value a number, `# EOF`
/// last; and the figures agree with the typed reads.
#[test]
fn openmetrics_text_parses() {
    let _g = lock();
    let keep = vec![9u8; MIB64];
    for (text, om) in [
        (metrics::openmetrics().unwrap(), true),
        (metrics::openmetrics_detailed().unwrap(), true),
        (metrics::prometheus_text().unwrap(), false),
    ] {
        let fams = parse_exposition(&text, om);
        let allocated = fams["strata_allocated_bytes"][0].1;
        assert!(allocated >= MIB64 as f64, "strata_allocated_bytes {allocated}");
        assert!(fams.contains_key("strata_resident_bytes"));
        assert!(fams.contains_key("strata_retained_bytes"));
    }
    assert!(metrics::stats_print("J").unwrap().trim_start().starts_with('{'));
    drop(keep);
}

type Families = std::collections::HashMap<String, Vec<(String, f64)>>;

fn parse_exposition(text: &str, openmetrics: bool) -> Families {
    let mut types: std::collections::HashMap<String, String> = Default::default();
    let mut out = Families::new();
    let mut lines = text.lines().peekable();
    let mut saw_eof = false;
    while let Some(line) = lines.next() {
        assert!(!saw_eof, "text after # EOF: {line:?}");
        if line == "# EOF" {
            assert!(openmetrics, "# EOF in the Prometheus text format");
            saw_eof = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut it = rest.splitn(3, ' ');
            let (kw, name, arg) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap_or(""));
            assert!(valid_name(name), "{line:?}");
            match kw {
                "TYPE" => {
                    assert!(["gauge", "counter", "unknown"].contains(&arg), "{line:?}");
                    assert!(types.insert(name.to_string(), arg.to_string()).is_none(), "family twice: {name}");
                }
                "HELP" => {} // before or after TYPE: both orders are valid
                "UNIT" => {
                    assert!(openmetrics && name.ends_with(&format!("_{arg}")), "{line:?}");
                }
                _ => panic!("unknown comment {line:?}"),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("bad value: {line:?}"));
        let (name, labels) = match series.find('{') {
            Some(i) => {
                assert!(series.ends_with('}'), "{line:?}");
                (&series[..i], &series[i + 1..series.len() - 1])
            }
            None => (series, ""),
        };
        for l in labels.split(',').filter(|l| !l.is_empty()) {
            let (k, v) = l.split_once('=').unwrap_or_else(|| panic!("bad label {l:?} in {line:?}"));
            assert!(valid_name(k) && v.starts_with('"') && v.ends_with('"'), "{line:?}");
        }
        let family = types
            .iter()
            .find(|(f, t)| {
                name == f.as_str() || (t.as_str() == "counter" && name.strip_suffix("_total") == Some(f.as_str()))
            })
            .map(|(f, t)| (f.clone(), t.clone()))
            .unwrap_or_else(|| panic!("sample before its # TYPE: {line:?}"));
        if openmetrics && family.1 == "counter" {
            assert!(name.ends_with("_total"), "OpenMetrics counter without _total: {line:?}");
        }
        out.entry(family.0).or_default().push((labels.to_string(), value));
    }
    assert_eq!(saw_eof, openmetrics, "# EOF must end OpenMetrics text");
    assert!(out.len() >= 6, "{} families", out.len());
    out
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        && !n.starts_with(|c: char| c.is_ascii_digit())
}

#[cfg(feature = "prometheus-client")]
#[test]
fn prometheus_client_collector_encodes_the_gauges() {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;
    let _g = lock();
    let keep = vec![1u8; MIB64];
    let mut reg = Registry::default();
    reg.register_collector(Box::new(metrics::StrataCollector::default()));
    let mut s = String::new();
    encode(&mut s, &reg).unwrap();
    let fams = parse_exposition(&s, true);
    assert!(fams["strata_allocated_bytes"][0].1 >= MIB64 as f64, "{s}");
    for f in ["active", "metadata", "resident", "mapped", "retained"] {
        assert!(fams.contains_key(&format!("strata_{f}_bytes")), "{s}");
    }
    drop(keep);
}

// ---------------------------------------------------------------- options, in children

/// Runs the ignored test `name` of this binary in a child with `env` set.
fn child(name: &str, env: &[(&str, &str)]) -> String {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"]);
    c.env_remove("MALLOC_CONF").env_remove("STRATA_CONF");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child {name} with {env:?} failed:\n{text}");
    assert!(text.contains("1 passed"), "child {name} did not run:\n{text}");
    text
}

#[test]
fn options_come_from_malloc_conf_and_strata_conf() {
    // The symbols are prefixed (strata_malloc, ...) and the variables keep their names.
    child(
        "child_reads_options",
        &[("MALLOC_CONF", "narenas:3,dirty_decay_ms:1234,junk:free,tcache_max:4096,lg_prof_sample:12,thp:never")],
    );
    child(
        "child_reads_options",
        &[
            ("STRATA_CONF", "narenas:3,dirty_decay_ms:1234,junk:free"),
            ("MALLOC_CONF", "tcache_max:4096,lg_prof_sample:12,thp:never"),
        ],
    );
}

#[test]
#[ignore = "run by options_come_from_malloc_conf_and_strata_conf"]
fn child_reads_options() {
    assert_eq!(opt::narenas::read().unwrap(), 3);
    assert_eq!(opt::dirty_decay_ms::read().unwrap(), 1234);
    assert_eq!(opt::junk::read().unwrap(), "free");
    assert_eq!(opt::tcache_max::read().unwrap(), 4096);
    assert_eq!(opt::lg_prof_sample::read().unwrap(), 12);
    assert_eq!(opt::thp::read().unwrap(), "never");
    // Untouched options keep their defaults.
    assert!(opt::tcache::read().unwrap());
    assert!(opt::retain::read().unwrap());
    assert!(!opt::prof::read().unwrap());
    assert!(!opt::zero::read().unwrap());
    assert!(!opt::abort::read().unwrap() && !opt::abort_conf::read().unwrap());
    assert!(opt::background_thread::read().unwrap()); // on by default
    assert!(opt::max_background_threads::read().unwrap() >= 1);
    assert!(opt::oversize_threshold::read().unwrap() > 0);
    assert_eq!(opt::muzzy_decay_ms::read().unwrap(), 0);
    assert_eq!(opt::metadata_thp::read().unwrap(), "disabled");
    assert!(!opt::stats_print::read().unwrap());
    assert!(!opt::prof_active::read().unwrap() || !opt::prof::read().unwrap());
    assert!(!opt::prof_prefix::read().unwrap().is_empty());
    assert_eq!(opt::lg_prof_interval::read().unwrap(), -1);
    assert!(!opt::prof_final::read().unwrap());
}
