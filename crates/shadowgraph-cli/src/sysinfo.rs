//! What `record` notes about the machine and the run, for `info` (the
//! fields uftrace's `info` has): read here, where the program ran, and
//! stored in the recording's `shadowgraph.info`.

use shadowgraph_data::dir::Info;
use std::path::Path;

/// The traced program's resource usage (wait4) and how it ended.
pub struct Usage {
    pub rusage: libc::rusage,
    pub elapsed_ns: u64,
}

/// Adds the machine's facts to `info`.
pub fn describe_machine(info: &mut Info) {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    info.set("cpu_desc", model);
    // SAFETY: sysconf has no preconditions.
    let (online, possible) = unsafe {
        (
            libc::sysconf(libc::_SC_NPROCESSORS_ONLN),
            libc::sysconf(libc::_SC_NPROCESSORS_CONF),
        )
    };
    info.set("cpus", format!("{online} / {possible}"));
    let meminfo = read("/proc/meminfo");
    let kb = |key: &str| -> f64 {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0)
    };
    info.set(
        "memory",
        format!(
            "{:.1} / {:.1} GB (free / total)",
            kb("MemFree:") / 1048576.0,
            kb("MemTotal:") / 1048576.0
        ),
    );
    let load: Vec<String> = read("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .map(str::to_string)
        .collect();
    info.set("load", load.join(" / "));
    // SAFETY: uname fills the zeroed struct.
    let (kernel, host) = unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        libc::uname(&mut u);
        let s = |f: &[libc::c_char]| {
            std::ffi::CStr::from_ptr(f.as_ptr())
                .to_string_lossy()
                .into_owned()
        };
        (
            format!("{} {}", s(&u.sysname), s(&u.release)),
            s(&u.nodename),
        )
    };
    info.set("kernel", kernel);
    info.set("hostname", host);
    let distro = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME=").map(str::to_string))
        .unwrap_or_else(|| "\"unknown\"".into());
    info.set("distro", distro);
    info.set("record_date", now_ctime());
}

/// Adds how the traced program ran to `info`.
pub fn describe_run(info: &mut Info, exe: &Path, status: std::process::ExitStatus, usage: &Usage) {
    use std::os::unix::process::ExitStatusExt;
    info.set("exit_raw", status.into_raw());
    if let Some(id) = shadowgraph::elf::build_id(exe) {
        info.set("build_id", id);
    }
    let r = &usage.rusage;
    let secs = |t: libc::timeval| format!("{:.6}", t.tv_sec as f64 + t.tv_usec as f64 / 1e6);
    info.set("systime", secs(r.ru_stime));
    info.set("usrtime", secs(r.ru_utime));
    info.set("ctxsw", format!("{} / {}", r.ru_nvcsw, r.ru_nivcsw));
    info.set("maxrss_kb", r.ru_maxrss);
    info.set("pagefault", format!("{} / {}", r.ru_majflt, r.ru_minflt));
    info.set("iops", format!("{} / {}", r.ru_inblock, r.ru_oublock));
    info.set("elapsed_ns", usage.elapsed_ns);
}

/// The local time as ctime(3) writes it, without the newline.
fn now_ctime() -> String {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: time(NULL) and ctime_r into a buffer of more than 26 bytes.
    unsafe {
        let t = libc::time(std::ptr::null_mut());
        if libc::ctime_r(&t, buf.as_mut_ptr()).is_null() {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_string_lossy()
            .trim_end()
            .to_string()
    }
}
