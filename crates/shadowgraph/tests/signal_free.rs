//! The code grace period of a process joined late (`record -p`), where no
//! signal of ours may end a system call: other threads are looked at where
//! the kernel keeps their user pc and sp, never signalled. A test binary
//! of its own: the signal-free mode is process-wide.

use shadowgraph::stop;

/// The user pc of thread `tid` while it is blocked in a system call.
fn blocked_pc(tid: i32) -> usize {
    let start = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).unwrap();
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() > 3 && !f[0].starts_with('-') {
            return usize::from_str_radix(f[f.len() - 1].trim_start_matches("0x"), 16).unwrap();
        }
        assert!(start.elapsed().as_secs() < 10, "{text}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn a_thread_blocked_in_the_code_holds_its_grace_period() {
    stop::set_signal_free(true);
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        let mut b = 0u8;
        // SAFETY: a one-byte read into `b`, blocking until the test writes.
        unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) }
    });
    let pc = blocked_pc(rx.recv().unwrap());
    // The code the blocked thread will go on in: never quiescent while it
    // waits there (the period gives up after about a second).
    assert!(!stop::wait_code_quiescent(&[(pc - 1, pc + 1)]));
    // SAFETY: a one-byte write from a static buffer.
    assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
    assert_eq!(reader.join().unwrap(), 1);
    assert!(stop::wait_code_quiescent(&[(pc - 1, pc + 1)]));
}
