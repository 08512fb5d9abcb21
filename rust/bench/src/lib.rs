//! Three allocation-heavy programs a Rust service resembles, run by one binary per global
//! allocator (`src/bin/*.rs`): `json` (serde_json parse and serialise of a large
//! document), `hashmap` (threads each build and drop a `HashMap<String, Vec<u64>>`),
//! `channel` (a pipeline of threads passing boxed messages, freed by another thread).
//! Each run prints one JSON line: allocator, workload, seconds, peak RSS (VmHWM) in KiB.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Instant;

#[derive(Serialize, Deserialize)]
struct Record {
    id: u64,
    name: String,
    email: String,
    tags: Vec<String>,
    scores: Vec<f64>,
    address: Address,
    active: bool,
}

#[derive(Serialize, Deserialize)]
struct Address {
    street: String,
    city: String,
    zip: String,
}

/// A deterministic generator (xorshift), so every allocator sees the same document.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A word of `min` to `min + span - 1` letters.
    fn word_of(&mut self, min: usize, span: u64) -> String {
        let len = min + (self.next() % span) as usize;
        self.word(len)
    }
    fn word(&mut self, len: usize) -> String {
        (0..len).map(|_| (b'a' + (self.next() % 26) as u8) as char).collect()
    }
}

fn document(n: usize) -> String {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let recs: Vec<Record> = (0..n as u64)
        .map(|id| {
            let nt = 1 + (r.next() % 6) as usize;
            let ns = (r.next() % 12) as usize;
            Record {
                id,
                name: r.word_of(5, 15),
                email: format!("{}@{}.example", r.word(8), r.word(6)),
                tags: (0..nt).map(|_| r.word_of(3, 8)).collect(),
                scores: (0..ns).map(|_| (r.next() % 10_000) as f64 / 7.0).collect(),
                address: Address { street: r.word(20), city: r.word(9), zip: format!("{:05}", r.next() % 100_000) },
                active: r.next() % 2 == 0,
            }
        })
        .collect();
    serde_json::to_string(&recs).unwrap()
}

/// Parses the document into both typed records and an untyped `Value` tree, and
/// serialises each back: the two ways services use serde_json.
fn json(rounds: usize) -> u64 {
    let doc = document(150_000);
    let mut check = 0u64;
    for _ in 0..rounds {
        let recs: Vec<Record> = serde_json::from_str(&doc).unwrap();
        let out = serde_json::to_string(&recs).unwrap();
        check += out.len() as u64;
        drop(recs);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        check += serde_json::to_vec_pretty(&v).unwrap().len() as u64;
    }
    check
}

/// Each thread builds a map of 300k String keys to small vectors, reads it, drops it.
fn hashmap(threads: usize, rounds: usize) -> u64 {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut sum = 0u64;
                    for round in 0..rounds {
                        let mut m: HashMap<String, Vec<u64>> = HashMap::new();
                        for i in 0..300_000u64 {
                            let k = format!("key-{t}-{round}-{i}");
                            m.insert(k, (0..(i % 7)).collect());
                        }
                        for i in (0..300_000u64).step_by(3) {
                            sum += m.get(&format!("key-{t}-{round}-{i}")).map_or(0, |v| v.len() as u64);
                        }
                        m.retain(|_, v| v.len() % 2 == 0);
                        sum += m.len() as u64;
                    }
                    sum
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

struct Msg {
    seq: u64,
    payload: Vec<u8>,
    note: String,
}

/// producer -> transform -> sink: every message is allocated in one thread, grown in the
/// next and freed in the last (the cross-thread free path).
fn channel(messages: u64) -> u64 {
    let (tx1, rx1) = mpsc::sync_channel::<Box<Msg>>(1024);
    let (tx2, rx2) = mpsc::sync_channel::<Box<Msg>>(1024);
    let producer = std::thread::spawn(move || {
        for seq in 0..messages {
            let len = 16 + (seq as usize * 37) % 1000;
            tx1.send(Box::new(Msg { seq, payload: vec![seq as u8; len], note: String::new() })).unwrap();
        }
    });
    let transform = std::thread::spawn(move || {
        for mut m in rx1 {
            m.note = format!("seen {}", m.seq);
            m.payload.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
            tx2.send(m).unwrap();
        }
    });
    let mut sum = 0u64;
    for m in rx2 {
        sum += m.payload.len() as u64 + m.note.len() as u64;
    }
    producer.join().unwrap();
    transform.join().unwrap();
    sum
}

/// VmHWM, the peak of this program's own address space. (getrusage's ru_maxrss would
/// also count the parent's RSS when it forked this process: Linux keeps the larger of the
/// two across exec.)
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Runs the workload named by the first argument and prints the result line.
pub fn main_with(allocator: &str) {
    let w = std::env::args().nth(1).unwrap_or_default();
    let t = Instant::now();
    let check = match w.as_str() {
        "json" => json(3),
        "hashmap" => hashmap(4, 2),
        "channel" => channel(2_000_000),
        _ => {
            eprintln!("usage: {} json|hashmap|channel (got {:?})", std::env::args().next().unwrap_or_default(), w);
            std::process::exit(2);
        }
    };
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{{\"allocator\":\"{allocator}\",\"workload\":\"{w}\",\"seconds\":{secs:.4},\"peak_rss_kib\":{},\"check\":{check}}}",
        peak_rss_kib()
    );
}
