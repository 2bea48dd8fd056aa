//! Recordings over the network, as uftrace sends them: `record --host
//! HOST [--port P]` sends its data directory to a `recv`, which writes it
//! under its own directory; `recv --run-cmd CMD` runs CMD there once a
//! recording is whole. uftrace's messages, so that either end may be
//! uftrace's:
//!
//! ```text
//!   header    magic 0xface (u16) | type (u16) | len (u32), network order
//!   101 DIR_NAME    the directory's name (len bytes)
//!   102 DATA        tid (i32, network order), then records: TID.dat
//!   103 KERNEL_DATA cpu (i32), then bytes: kernel-cpuN.dat
//!   104 PERF_DATA   cpu (i32), then bytes: perf-cpuN.dat
//!   105 INFO        the 40-byte file header (its numbers in network
//!                   order), then the info text: info
//!   106 META_DATA   name length (i32), the name, then the file's bytes
//!   107 END         (len 0) the recording is whole
//! ```
//!
//! Each message's bytes are appended to its file. Our sender sends every
//! file of the directory once the recording is complete (uftrace's sends
//! as it records), and after END waits for the receiver to close the
//! connection: ours closes once its `--run-cmd` has run, so that `record`
//! returns after it.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};

const MAGIC: u16 = 0xface;
const DIR_NAME: u16 = 101;
const DATA: u16 = 102;
const KERNEL_DATA: u16 = 103;
const PERF_DATA: u16 = 104;
const INFO: u16 = 105;
const META_DATA: u16 = 106;
const END: u16 = 107;

/// The messages whose file is named by a number they carry (a thread's
/// id, a processor's): their type, the file's name around the number,
/// and the bytes a piece of it keeps whole (a record).
const NUMBERED: [(u16, &str, usize); 3] = [
    (DATA, "", 16),
    (PERF_DATA, "perf-cpu", 8),
    (KERNEL_DATA, "kernel-cpu", 8),
];

/// Bytes of uftrace's file header at the start of `info`.
const HEADER: usize = 40;
/// The most bytes a received message may carry (uftrace's sends a file
/// whole: a large program's symbols take tens of megabytes).
const MAX_MESSAGE: usize = 1 << 30;
/// The most bytes one message carries (a file is sent in pieces of this).
const PIECE: usize = 1 << 20;

/// `record --host HOST --port PORT`: connected first, recorded into a
/// directory of our own, then sent whole under the name `data`.
pub(crate) fn record_and_send(
    data: &Path,
    opts: &crate::options::RecordOptions,
    attach: &crate::options::AttachOptions,
    program: &[String],
    (host, port): (&str, u16),
) -> Result<std::process::ExitCode, String> {
    if opts.keep_pid {
        return Err(
            "--keep-pid leaves the recording to be completed after record returns; \
                    --host sends it once it is complete: use one of them"
                .to_string(),
        );
    }
    let to = Sender::connect(host, port)?;
    let name = data.to_string_lossy().into_owned();
    let tmp = std::env::temp_dir().join(format!("shadowgraph-send-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let local = tmp.join("data");
    let code = crate::attach::record::record_or_attach(&local, opts, attach, program);
    let sent = code.and_then(|c| to.send(&local, &name).map(|()| c));
    let _ = std::fs::remove_dir_all(&tmp);
    sent
}

/// A connection to a receiver, made before the recording starts.
pub(crate) struct Sender {
    sock: TcpStream,
    to: String,
}

impl Sender {
    /// Connects to `host:port`, trying for three seconds while nobody
    /// listens there yet (a receiver just started).
    pub(crate) fn connect(host: &str, port: u16) -> Result<Sender, String> {
        let to = format!("{host}:{port}");
        let start = std::time::Instant::now();
        loop {
            // A local port nobody listens on yet may connect to itself
            // (the kernel picks it as the connection's own port): that
            // is no receiver, as a refusal.
            let made = TcpStream::connect((host, port)).and_then(|sock| {
                match (sock.local_addr(), sock.peer_addr()) {
                    (Ok(a), Ok(b)) if a == b => Err(std::io::ErrorKind::ConnectionRefused.into()),
                    _ => Ok(sock),
                }
            });
            match made {
                Ok(sock) => {
                    let _ = sock.set_nodelay(true);
                    return Ok(Sender { sock, to });
                }
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionRefused
                        && start.elapsed().as_millis() < 3000 =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(format!("--host {to}: cannot connect: {e}")),
            }
        }
    }

    /// Sends the recording in `dir` as `name` (the receiver's directory
    /// for it), then waits until the receiver is done with it.
    pub(crate) fn send(mut self, dir: &Path, name: &str) -> Result<(), String> {
        let to = self.to.clone();
        let err = |e: std::io::Error| format!("--host {to}: {e}");
        let mut files = Vec::new();
        list_files(dir, Path::new(""), &mut files)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        files.sort();
        message(&mut self.sock, DIR_NAME, &[name.as_bytes()]).map_err(err)?;
        for rel in &files {
            let bytes =
                std::fs::read(dir.join(rel)).map_err(|e| format!("{}: {e}", rel.display()))?;
            let file = rel.to_string_lossy();
            let numbered = NUMBERED.iter().find_map(|&(kind, prefix, unit)| {
                let n = file.strip_prefix(prefix)?.strip_suffix(".dat")?;
                let n = n.parse::<i32>().ok().filter(|_| !n.starts_with('+'))?;
                Some((kind, n, unit))
            });
            if let Some((kind, n, unit)) = numbered {
                for piece in pieces(&bytes, unit) {
                    message(&mut self.sock, kind, &[&n.to_be_bytes(), piece]).map_err(err)?;
                }
            } else if file == "info" && bytes.len() >= HEADER {
                let mut head: [u8; HEADER] = bytes[..HEADER].try_into().expect("40 bytes");
                swap_header(&mut head);
                message(&mut self.sock, INFO, &[&head, &bytes[HEADER..]]).map_err(err)?;
            } else {
                let name = file.as_bytes();
                let len = (name.len() as i32).to_be_bytes();
                // The name with each piece (each is appended to the
                // file), and once for an empty file.
                let mut sent = false;
                for piece in pieces(&bytes, 1) {
                    message(&mut self.sock, META_DATA, &[&len, name, piece]).map_err(err)?;
                    sent = true;
                }
                if !sent {
                    message(&mut self.sock, META_DATA, &[&len, name]).map_err(err)?;
                }
            }
        }
        message(&mut self.sock, END, &[]).map_err(err)?;
        // Until the receiver closes (ours after its --run-cmd).
        let mut sink = [0u8; 64];
        while matches!(self.sock.read(&mut sink), Ok(n) if n > 0) {}
        eprintln!("# sent to {to} as {name}");
        Ok(())
    }
}

/// `bytes` in pieces of at most PIECE bytes, each a multiple of `unit`
/// (records are not split); none for no bytes.
fn pieces(bytes: &[u8], unit: usize) -> impl Iterator<Item = &[u8]> {
    bytes.chunks(PIECE / unit * unit)
}

/// The files under `dir`, by their paths relative to it (`rel`).
fn list_files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir.join(rel))? {
        let e = e?;
        let r = rel.join(e.file_name());
        if e.file_type()?.is_dir() {
            list_files(dir, &r, out)?;
        } else {
            out.push(r);
        }
    }
    Ok(())
}

/// One message: the header, then `parts`.
fn message(sock: &mut TcpStream, kind: u16, parts: &[&[u8]]) -> std::io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = [0u8; 8];
    head[..2].copy_from_slice(&MAGIC.to_be_bytes());
    head[2..4].copy_from_slice(&kind.to_be_bytes());
    head[4..].copy_from_slice(&(len as u32).to_be_bytes());
    sock.write_all(&head)?;
    for p in parts {
        sock.write_all(p)?;
    }
    Ok(())
}

/// uftrace's file header between this machine's order and the
/// network's (either way: a swap of each number): version (u32 at 8),
/// header size (u16 at 12), feature and info masks (u64 at 16, 24), max
/// stack (u16 at 32).
fn swap_header(h: &mut [u8; HEADER]) {
    for (at, len) in [(8, 4), (12, 2), (16, 8), (24, 8), (32, 2)] {
        if cfg!(target_endian = "little") {
            h[at..at + len].reverse();
        }
    }
}

/// `recv`: receives recordings on `port` into `dir` (made if missing;
/// uftrace's default name means the current directory), each under the
/// name its sender gave, until killed. After each, `run_cmd` runs (by the
/// shell) in `dir`.
pub(crate) fn recv(
    dir: &Path,
    default: bool,
    port: u16,
    run_cmd: Option<&str>,
) -> Result<(), String> {
    if !default {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        std::env::set_current_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| format!("recv: cannot listen on port {port}: {e}"))?;
    for conn in listener.incoming() {
        let Ok(sock) = conn else { continue };
        let peer = sock
            .peer_addr()
            .map_or_else(|_| "a client".to_string(), |a| a.to_string());
        let run_cmd = run_cmd.map(str::to_string);
        std::thread::spawn(move || match receive(sock) {
            Ok(Some((sock, name))) => {
                eprintln!("shadowgraph: received {name} from {peer}");
                if let Some(cmd) = run_cmd {
                    let mut sh = std::process::Command::new("sh");
                    crate::logfile::program_stderr(&mut sh);
                    let st = sh.args(["-c", &cmd]).status();
                    if let Err(e) = st {
                        eprintln!("shadowgraph: --run-cmd {cmd}: {e}");
                    }
                }
                drop(sock);
            }
            Ok(None) => {}
            Err(e) => eprintln!("shadowgraph: recv from {peer}: {e}"),
        });
    }
    Ok(())
}

/// One sender's messages until END (the connection, kept open until the
/// caller is done, and the directory's name) or its end without one
/// (None).
fn receive(mut sock: TcpStream) -> Result<Option<(TcpStream, String)>, String> {
    let mut dir: Option<String> = None;
    loop {
        let mut head = [0u8; 8];
        match sock.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.to_string()),
        }
        let magic = u16::from_be_bytes([head[0], head[1]]);
        let kind = u16::from_be_bytes([head[2], head[3]]);
        let len = u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if magic != MAGIC {
            return Err(format!("not a recording (magic {magic:#x})"));
        }
        if kind == END {
            return Ok(dir.map(|d| (sock, d)));
        }
        if len > MAX_MESSAGE {
            return Err(format!(
                "a message of {len} bytes (at most {MAX_MESSAGE} taken)"
            ));
        }
        let mut body = vec![0u8; len];
        sock.read_exact(&mut body).map_err(|e| e.to_string())?;
        if kind == DIR_NAME {
            let name = String::from_utf8(body).map_err(|_| "a directory name not in UTF-8")?;
            let path = relative(&name)?;
            if path.exists() {
                let old = PathBuf::from(format!("{name}.old"));
                let _ = std::fs::remove_dir_all(&old);
                std::fs::rename(&path, &old).map_err(|e| format!("{name}: {e}"))?;
            }
            std::fs::create_dir_all(&path).map_err(|e| format!("{name}: {e}"))?;
            dir = Some(name);
            continue;
        }
        let d = dir.as_deref().ok_or("data before the directory's name")?;
        let number = |b: &[u8]| -> Result<i32, String> {
            let n: [u8; 4] = b
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .ok_or("a message too short")?;
            Ok(i32::from_be_bytes(n))
        };
        let numbered = NUMBERED.iter().find(|n| n.0 == kind);
        let (file, bytes): (String, Vec<u8>) = match kind {
            _ if numbered.is_some() => {
                let prefix = numbered.map_or("", |n| n.1);
                (
                    format!("{prefix}{}.dat", number(&body)?),
                    body[4..].to_vec(),
                )
            }
            INFO if body.len() >= HEADER => {
                let mut h: [u8; HEADER] = body[..HEADER].try_into().expect("40 bytes");
                swap_header(&mut h);
                body[..HEADER].copy_from_slice(&h);
                ("info".to_string(), body)
            }
            META_DATA => {
                let n = number(&body)?;
                let name = usize::try_from(n)
                    .ok()
                    .and_then(|n| body.get(4..4 + n))
                    .ok_or("a file name longer than its message")?;
                let name =
                    String::from_utf8(name.to_vec()).map_err(|_| "a file name not in UTF-8")?;
                let rest = body[4 + name.len()..].to_vec();
                (name, rest)
            }
            _ => return Err(format!("unknown message {kind}")),
        };
        let path = Path::new(d).join(relative(&file)?);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&bytes))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
}

/// `name` as a path below the current directory: relative, without `..`.
fn relative(name: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(name);
    let ok = !name.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then_some(p)
        .ok_or_else(|| format!("{name:?}: not a name below the receiving directory"))
}
