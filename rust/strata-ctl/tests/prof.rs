//! Heap profiles dumped through strata-ctl, in children started with profiling on (it is
//! a start-up option), and read back by `go tool pprof` where Go is installed.
use std::path::PathBuf;
use std::process::Command;
use strata_ctl::prof::{self, Format};
use strata_ctl::opt;

#[global_allocator]
static GLOBAL: strata::Strata = strata::Strata;

fn child(name: &str, conf: &str, out: &std::path::Path) {
    let o = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", name, "--nocapture", "--test-threads=1"])
        .env_remove("STRATA_CONF")
        .env("MALLOC_CONF", conf)
        .env("STRATA_CTL_TEST_OUT", out)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success() && text.contains("1 passed"), "child {name} ({conf}):\n{text}");
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("strata-ctl-prof-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Allocates 64 MiB in 64 blocks a sampled program would certainly record, then dumps.
fn allocate_and_dump() -> (Vec<Vec<u8>>, prof::Profile) {
    assert!(opt::prof::read().unwrap());
    assert!(prof::active().unwrap());
    let keep: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8; 1 << 20]).collect();
    let p = prof::dump_bytes().unwrap();
    (keep, p)
}

#[test]
fn pprof_dump_is_read_by_go_tool_pprof() {
    let d = scratch("pprof");
    child("child_dumps", "prof:true,prof_format:pprof,lg_prof_sample:16", &d);
    let path = d.join("dump.pb.gz");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "a gzipped profile.proto");
    let go = match Command::new("go").arg("version").output() {
        Ok(o) if o.status.success() => "go",
        _ => {
            eprintln!("SKIP: go is not installed; the profile was not read by go tool pprof");
            return;
        }
    };
    let o = Command::new(go)
        .args(["tool", "pprof", "-raw", "-symbolize=none"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "go tool pprof failed:\n{}{}", text, String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("PeriodType"), "{text}");
    // inuse_space column: the 64 x 1 MiB blocks the child held, within sampling error.
    let mut inuse = 0f64;
    let mut in_samples = false;
    let mut cols: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with("Samples:") {
            in_samples = true;
            continue;
        }
        if in_samples && cols.is_empty() {
            cols = line.split_whitespace().map(|s| s.trim_end_matches(':').to_string()).collect();
            continue;
        }
        if line.starts_with("Locations") || line.starts_with("Mappings") {
            in_samples = false;
        }
        if in_samples {
            let f: Vec<&str> = line.split(':').next().unwrap_or("").split_whitespace().collect();
            if f.len() == cols.len() {
                if let Some(i) = cols.iter().position(|c| c.starts_with("inuse_space")) {
                    inuse += f[i].parse::<f64>().unwrap_or(0.0);
                }
            }
        }
    }
    assert!(inuse >= 48.0 * (1 << 20) as f64, "inuse_space {inuse} in:\n{text}");
}

#[test]
fn heap_v2_dump_by_default() {
    let d = scratch("heapv2");
    child("child_dumps", "prof:true,lg_prof_sample:16", &d);
    let text = std::fs::read_to_string(d.join("dump.pb.gz")).unwrap();
    assert!(text.starts_with("heap_v2/"), "{}", &text[..text.len().min(200)]);
    assert!(text.contains("MAPPED_LIBRARIES:"));
}

#[test]
#[ignore = "run by pprof_dump_is_read_by_go_tool_pprof and heap_v2_dump_by_default"]
fn child_dumps() {
    let out = PathBuf::from(std::env::var_os("STRATA_CTL_TEST_OUT").unwrap());
    let (keep, p) = allocate_and_dump();
    let pprof = std::env::var("MALLOC_CONF").unwrap().contains("prof_format:pprof");
    assert_eq!(p.format(), if pprof { Format::Pprof } else { Format::HeapV2 });
    // And to a path: written there, nothing left behind by dump_bytes.
    prof::dump(&out.join("dump.pb.gz")).unwrap();
    drop(keep);
    prof::set_active(false).unwrap();
    assert!(!prof::active().unwrap());
    prof::reset().unwrap();
}

#[test]
fn dump_without_profiling_is_an_error() {
    if opt::prof::read().unwrap() {
        return; // MALLOC_CONF turned it on for this run
    }
    let e = prof::dump_bytes().unwrap_err();
    assert!(e.errno() != 0, "{e}");
    eprintln!("{e}");
}
