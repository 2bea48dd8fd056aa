//! The agent's allocator (shadowgraph::alloc) under threads: every block
//! is as large and as aligned as asked (grown or shrunk too), owned by one
//! caller only, and a fork while other threads allocate leaves the child an
//! allocator that works.

use shadowgraph::alloc::MmapAlloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

static A: MmapAlloc = MmapAlloc::new();

/// A small xorshift: sizes and alignments that vary, repeatably.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Allocates, fills with `tag`, checks and frees `rounds` blocks of mixed
/// layouts, a window of them alive at once.
fn churn(seed: u64, rounds: usize) {
    let mut s = seed;
    let mut live: Vec<(*mut u8, Layout, u8)> = Vec::new();
    for i in 0..rounds {
        let r = next(&mut s);
        let size = match r % 10 {
            0 => 1 + (r >> 8) as usize % (256 << 10),
            1..=3 => 1 + (r >> 8) as usize % 4096,
            _ => 1 + (r >> 8) as usize % 200,
        };
        let align = 1usize << ((r >> 40) % 14);
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: a layout of non-zero size.
        let p = unsafe { A.alloc(layout) };
        assert!(!p.is_null(), "{layout:?}");
        assert_eq!(p as usize % align, 0, "{layout:?}");
        let tag = (i % 251) as u8;
        // SAFETY: the block holds `size` bytes and is ours.
        unsafe { std::ptr::write_bytes(p, tag, size) };
        live.push((p, layout, tag));
        if r.is_multiple_of(7) {
            // Grown or shrunk, across classes and mappings: the bytes it
            // keeps are the owner's still.
            let k = (r >> 24) as usize % live.len();
            let (p, layout, tag) = live[k];
            let size = match (r >> 12) % 3 {
                0 => 1 + (r >> 30) as usize % 200,
                1 => 1 + (r >> 30) as usize % (64 << 10),
                _ => 1 + (r >> 30) as usize % (1 << 20),
            };
            // SAFETY: allocated by A with `layout`; a non-zero size.
            let q = unsafe { A.realloc(p, layout, size) };
            assert!(!q.is_null());
            assert_eq!(q as usize % layout.align(), 0, "{layout:?} to {size}");
            // SAFETY: the block holds `size` bytes and is ours.
            let kept = unsafe { std::slice::from_raw_parts(q, size.min(layout.size())) };
            assert!(kept.iter().all(|&b| b == tag), "realloc lost bytes");
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(q, tag, size) };
            live[k] = (
                q,
                Layout::from_size_align(size, layout.align()).unwrap(),
                tag,
            );
        }
        if live.len() > 64 || r & 3 == 0 {
            let (p, layout, tag) = live.swap_remove((r >> 20) as usize % live.len());
            // SAFETY: written by us above, not freed yet.
            let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
            assert!(
                bytes.iter().all(|&b| b == tag),
                "a block changed under its owner"
            );
            // SAFETY: allocated by A with this layout.
            unsafe { A.dealloc(p, layout) };
        }
    }
    for (p, layout, tag) in live {
        // SAFETY: as above.
        let bytes = unsafe { std::slice::from_raw_parts(p, layout.size()) };
        assert!(bytes.iter().all(|&b| b == tag));
        // SAFETY: as above.
        unsafe { A.dealloc(p, layout) };
    }
}

#[test]
fn threads_share_the_allocator_and_a_fork_leaves_it_usable() {
    MmapAlloc::register_fork_handlers(&A);
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut k = 0;
                // Relaxed: a flag polled to end the loop, ordering nothing.
                while !stop.load(Ordering::Relaxed) {
                    churn(0x9e37_79b9 + t * 1000 + k, 2000);
                    k += 1;
                }
                k
            })
        })
        .collect();
    // Forks while the threads allocate: each child allocates and exits 0
    // (a child started with the lock held would spin forever).
    for _ in 0..50 {
        // SAFETY: the child only allocates through A and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            churn(7, 500);
            // SAFETY: leaving the child without running the parent's
            // destructors.
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0);
        assert_eq!(wait_at_most_10s(pid), Some(0), "the child did not finish");
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        assert!(t.join().unwrap() > 0);
    }
}

/// The child's exit code, or None (and the child killed) if it has not
/// exited within 10 s.
fn wait_at_most_10s(pid: libc::pid_t) -> Option<i32> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut status = 0;
        // SAFETY: polling our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
