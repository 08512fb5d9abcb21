//! The global allocator: every request shape Rust makes, checked against strata's own
//! view of the block (its usable size), on many threads.
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: strata::Strata = strata::Strata;

fn owned_by_strata<T>(p: *const T) -> usize {
    unsafe { strata::ffi::sallocx(p as *const c_void, 0) }
}

#[test]
fn box_and_vec_come_from_strata() {
    let b = Box::new([7u8; 100]);
    assert!(owned_by_strata(&*b) >= 100);
    let v: Vec<u64> = (0..1000).collect();
    assert!(owned_by_strata(v.as_ptr()) >= 8000);
    assert_eq!(v.iter().sum::<u64>(), 999 * 1000 / 2);
}

#[test]
fn every_size_up_to_64k_is_usable_and_distinct() {
    let mut blocks = Vec::new();
    for size in (1..=65536usize).step_by(97) {
        let l = Layout::from_size_align(size, 1).unwrap();
        let p = unsafe { GLOBAL.alloc(l) };
        assert!(!p.is_null(), "size {size}");
        unsafe { std::ptr::write_bytes(p, (size % 251) as u8, size) };
        assert!(unsafe { strata::usable_size(p) } >= size);
        blocks.push((p, l));
    }
    for (p, l) in blocks {
        let v = (l.size() % 251) as u8;
        assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }.iter().all(|&b| b == v));
        unsafe { GLOBAL.dealloc(p, l) };
    }
}

#[test]
fn alignment_up_to_2_mib() {
    for lg in 0..=21 {
        let align = 1usize << lg;
        for size in [1, align / 2 + 1, align, align * 3 + 5, 3 << 20] {
            let l = Layout::from_size_align(size.max(1), align).unwrap();
            for zeroed in [false, true] {
                let p = unsafe { if zeroed { GLOBAL.alloc_zeroed(l) } else { GLOBAL.alloc(l) } };
                assert!(!p.is_null(), "size {size} align {align}");
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                if zeroed {
                    assert!(unsafe { std::slice::from_raw_parts(p, l.size()) }.iter().all(|&b| b == 0));
                }
                unsafe { p.write_bytes(0xa5, l.size()) };
                // Grow and shrink keep the alignment.
                let q = unsafe { GLOBAL.realloc(p, l, l.size() * 2) };
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                assert_eq!(unsafe { *q.add(l.size() - 1) }, 0xa5);
                let l2 = Layout::from_size_align(l.size() * 2, align).unwrap();
                unsafe { GLOBAL.dealloc(q, l2) };
            }
        }
    }
}

#[repr(align(4096))]
struct Page([u8; 4096]);
#[repr(align(64))]
struct Line(#[allow(dead_code)] [u8; 48]);

#[test]
fn over_aligned_types_in_collections() {
    let pages: Vec<Box<Page>> = (0..64).map(|i| Box::new(Page([i as u8; 4096]))).collect();
    for (i, p) in pages.iter().enumerate() {
        assert_eq!(&**p as *const Page as usize % 4096, 0);
        assert_eq!(p.0[4095], i as u8);
    }
    let lines: Vec<Line> = (0..1000).map(|_| Line([0; 48])).collect();
    assert_eq!(lines.as_ptr() as usize % 64, 0);
}

#[test]
fn realloc_keeps_contents_growing_and_shrinking() {
    let mut v: Vec<u32> = Vec::new();
    for i in 0..2_000_000u32 {
        v.push(i); // doubling: small, large and huge reallocs
    }
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
    v.truncate(10);
    v.shrink_to_fit();
    assert_eq!(v, (0..10).collect::<Vec<_>>());
    let mut s = String::new();
    for i in 0..100_000 {
        s.push_str(&i.to_string());
    }
    assert!(s.starts_with("0123456789101112"));
}

#[test]
fn large_realloc_resizes_in_place() {
    // Shrinking a large block frees its tail where it is; a realloc that stays in the
    // same size class returns the same pointer.
    let l = Layout::from_size_align(8 << 20, 8).unwrap();
    let p = unsafe { GLOBAL.alloc(l) };
    assert!(!p.is_null());
    let got = unsafe { strata::resize_in_place(p, 8, 4 << 20, 0) };
    assert!(got >= 4 << 20, "shrinking a large block in place must succeed: {got}");
    assert!(got < 8 << 20);
    let l2 = Layout::from_size_align(got, 8).unwrap();
    let q = unsafe { GLOBAL.realloc(p, l2, 4 << 20) }; // same class: no move
    assert_eq!(q, p);
    unsafe { GLOBAL.dealloc(q, Layout::from_size_align(4 << 20, 8).unwrap()) };
}

#[test]
fn zero_sized_requests() {
    // Rust never asks a global allocator for 0 bytes (ZSTs are dangling pointers), but
    // collections of them, empty collections and the C-level 0 all must work.
    let v: Vec<()> = vec![(); 1_000_000];
    assert_eq!(v.len(), 1_000_000);
    let e: Vec<u64> = Vec::with_capacity(0);
    assert_eq!(e.capacity(), 0);
    let b: Box<[u8]> = Vec::new().into_boxed_slice();
    assert!(b.is_empty());
    unsafe {
        let p = strata::ffi::malloc(0);
        let q = strata::ffi::malloc(0);
        assert!(!p.is_null() && !q.is_null() && p != q, "malloc(0) gives unique pointers");
        strata::ffi::free(p);
        strata::ffi::free(q);
    }
}

#[test]
fn impossible_requests_fail_without_aborting() {
    for size in [isize::MAX as usize - 4095, 1usize << 62, 1 << 56] {
        let l = Layout::from_size_align(size, 4096).unwrap();
        let p = unsafe { GLOBAL.alloc(l) };
        assert!(p.is_null(), "{size} bytes cannot be allocated");
        let l = Layout::from_size_align(size, 8).unwrap();
        assert!(unsafe { GLOBAL.alloc(l) }.is_null());
        assert!(unsafe { GLOBAL.alloc_zeroed(l) }.is_null());
    }
    let mut v: Vec<u8> = vec![1, 2, 3];
    assert!(v.try_reserve(isize::MAX as usize - 64).is_err());
    let p = v.as_mut_ptr();
    let l = Layout::from_size_align(3, 1).unwrap();
    // A failed realloc leaves the block as it was.
    let q = unsafe { GLOBAL.realloc(p, l, 1 << 60) };
    assert!(q.is_null());
    assert_eq!(v, [1, 2, 3]);
}

#[test]
fn large_requests() {
    let mut v = vec![0u8; 256 << 20];
    v[0] = 1;
    v[(256 << 20) - 1] = 2;
    assert!(owned_by_strata(v.as_ptr()) >= 256 << 20);
    let w = v.clone();
    assert_eq!(w[(256 << 20) - 1], 2);
}

#[test]
fn threads_allocate_and_free_each_others_blocks() {
    let (tx, rx) = mpsc::sync_channel::<Box<[u64]>>(256);
    let producers: Vec<_> = (0..4)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut local: HashMap<u64, Vec<u8>> = HashMap::new();
                for i in 0..50_000u64 {
                    let n = 1 + ((i * 31 + t) % 200) as usize;
                    tx.send(vec![i; n].into_boxed_slice()).unwrap();
                    local.insert(i, vec![t as u8; (i % 300) as usize]);
                    if i % 3 == 0 {
                        local.remove(&(i / 2));
                    }
                }
                local.len()
            })
        })
        .collect();
    drop(tx);
    let consumer = std::thread::spawn(move || {
        let mut n = 0u64;
        for b in rx {
            assert!(b.iter().all(|&x| x == b[0]));
            n += 1;
        }
        n
    });
    for p in producers {
        assert!(p.join().unwrap() > 0);
    }
    assert_eq!(consumer.join().unwrap(), 200_000);
}
