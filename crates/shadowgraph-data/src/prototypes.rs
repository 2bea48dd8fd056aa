//! The arguments and return values of well-known C library functions,
//! which `-a` records where a function has no debug information (as
//! uftrace's built-in prototypes): a library call's `open("/etc/passwd",
//! O_RDONLY) = 3`.
//!
//! Each line of [`TABLE`] is `NAME(ARG, …) -> RET` (no `->`: nothing
//! shown on return), each ARG or RET a format as `-A` takes it after the
//! `/`: `d32` `d16` `i32` `d64` `u` `x` `c` `s` `p` `e:ENUM`, `f32`/`f64`
//! for a floating-point argument (an `fparg`), `l` for a plain `argN` (a
//! `long`: signed, 64 bits). Lines from `#` are comments. The types are
//! those uftrace gives each function, so that both show a call alike:
//! `unsigned` is `u`, `pid_t` and `uid_t` are `i32`, a `char *` is `s`,
//! other pointers `p`, and a variadic function shows its fixed arguments.
//! [`ENUMS`] defines the enums the formats name, in C's syntax.

/// `NAME(ARG, …) -> RET` per function, as the module says.
pub const TABLE: &str = "\
# C++ operator new, new[], delete, delete[]
_Znwm(u) -> x
_Znam(u) -> x
_ZdlPv(x)
_ZdaPv(x)

# conversions, sorting, exit
atoi(s) -> d32
atol(s) -> l
atof(s) -> f64
strtol(s, p, d32) -> l
strtoul(s, p, d32) -> u
strtod(s, p) -> f64
strtof(s, p) -> f32
qsort(p, u, u, p)
qsort_r(p, u, u, p, p)
bsearch(p, p, u, u, p) -> p
exit(d32)

# memory
malloc(u) -> p
free(p)
calloc(u, u) -> p
realloc(p, u) -> p
mmap(p, u, e:mmap_prot, e:mmap_flag, d32, l) -> p
mmap64(p, u, e:mmap_prot, e:mmap_flag, d32, d64) -> p
munmap(p, u) -> d32
mprotect(p, u, e:mmap_prot) -> d32
madvise(p, u, e:madvise) -> d32
posix_madvise(p, u, e:posix_madvise) -> d32
posix_fadvise(d32, l, l, e:posix_fadvise) -> d32
brk(p) -> d32
sbrk(l) -> p
memalign(u, u) -> p
pvalloc(u) -> p
posix_memalign(p, u, u) -> d32
aligned_alloc(u, u) -> p
valloc(u) -> p

# strings
strcat(s, s) -> s
strncat(s, s, u) -> s
strcpy(p, s)
strncpy(p, s, u)
strlen(s) -> u
strnlen(s, u) -> u
strcmp(s, s) -> d32
strncmp(s, s, u) -> d32
strcasecmp(s, s) -> d32
strncasecmp(s, s, u) -> d32
strdup(s) -> s
strndup(s, u) -> s
strdupa(s) -> s
strndupa(s, u) -> s
strcoll(s, s) -> d32
strstr(s, s) -> s
strcasestr(s, s) -> s
strchr(s, c) -> s
strrchr(s, c) -> s
strchrnul(s, c) -> s
strtok(s, s) -> s
strtok_r(s, s, p) -> s
strpbrk(s, s) -> s
strspn(s, s) -> u
strcspn(s, s) -> u
strsep(p, s) -> s
memcpy(p, p, u)
memset(p, d32, u)
memcmp(p, p, u) -> d32
memmove(p, p, u)
memchr(p, d32, u) -> p
memrchr(p, d32, u) -> p
rawmemchr(p, d32) -> p

# standard I/O, environment
printf(s) -> d32
fprintf(p, s) -> d32
dprintf(d32, s) -> d32
sprintf(p, s) -> d32
snprintf(p, u, s) -> d32
fputc(c, p) -> d32
fputs(s, p) -> d32
putc(c, p) -> d32
putchar(c) -> d32
puts(s) -> d32
fgetc(p) -> c
fgets(p, d32, p) -> s
getc(p) -> c
getchar() -> c
ungetc(c, p) -> c
getenv(s) -> s
setenv(s, s, d32) -> d32
unsetenv(s) -> d32

# files and directories
open(s, e:open_flag) -> d32
open64(s, e:open_flag) -> d32
openat(d32, s, e:open_flag) -> d32
open64at(d32, s, e:open_flag) -> d32
close(d32) -> d32
fcntl(d32, e:fcntl_cmd) -> d32
fcntl64(d32, e:fcntl_cmd) -> d32
lseek(d32, l, e:seek_whence) -> l
fallocate(d32, e:falloc_mode, l, l) -> d32
fsync(d32) -> d32
fdatasync(d32) -> d32
fopen(s, s) -> p
fopen64(s, s) -> p
fdopen(d32, s) -> p
freopen(s, s, p) -> p
fclose(p) -> d32
fseek(p, l, d32) -> d32
ftell(p) -> l
fflush(p) -> d32
read(d32, p, u) -> l
write(d32, p, u) -> l
fread(p, u, u, p) -> u
fwrite(p, u, u, p) -> u
feof(p) -> d32
ferror(p) -> d32
fileno(p) -> d32
access(s, e:access_flag) -> d32
unlink(s) -> d32
unlinkat(d32, s, d32) -> d32
mkdir(s) -> d32
rmdir(s) -> d32
chdir(s) -> d32
opendir(s) -> p
closedir(p) -> d32
getcwd(p, u) -> s
dirname(s) -> s
basename(s) -> s

# processes
fork() -> i32
vfork() -> i32
execl(s, s) -> d32
execlp(s, s) -> d32
execle(s, s) -> d32
execv(s) -> d32
execvp(s) -> d32
execve(s) -> d32
execvpe(s) -> d32
wait(p) -> i32
waitpid(i32, p, d32) -> i32
getpid() -> i32
getppid() -> i32
gettid() -> i32

# dynamic loading
dlopen(s, e:dlopen_flag) -> p
dlmopen(l, s, d32) -> p
dlsym(p, s) -> p
dlvsym(p, s, s) -> p
dlclose(p) -> d32
dlerror() -> s

# threads
pthread_create(p, p, p, p) -> d32
pthread_once(p, p) -> d32
pthread_join(l, p) -> d32
pthread_detach(l) -> d32
pthread_kill(l, d32) -> d32
pthread_cancel(l) -> d32
pthread_exit(p)
pthread_mutex_lock(p) -> d32
pthread_mutex_trylock(p) -> d32
pthread_mutex_unlock(p) -> d32
pthread_mutex_destroy(p) -> d32
pthread_mutex_init(p, p) -> d32
pthread_cond_wait(p, p) -> d32
pthread_cond_timedwait(p, p, p) -> d32
pthread_cond_signal(p) -> d32
pthread_cond_broadcast(p) -> d32

# sockets
socket(e:socket_domain, e:socket_type, d32) -> d32
connect(d32, p, l) -> d32
bind(d32, p, l) -> d32
accept(d32, p, p) -> d32
accept4(d32, p, p, e:socket_flag) -> d32
gethostbyname(s) -> p
gethostbyaddr(p, l, e:socket_domain) -> p
getaddrinfo(s, s, p, p) -> d32
freeaddrinfo(p)
inet_pton(e:socket_domain, s, p) -> d32
inet_ntop(e:socket_domain, p, s, l) -> s
inet_aton(s, p) -> d32
inet_ntoa(l) -> s
inet_addr(s) -> l
inet_network(s) -> l

# signals
kill(i32, e:signal) -> d32
raise(e:signal) -> d32
signal(e:signal, p) -> l
sigaction(e:signal, p, p) -> d32
sigemptyset(p) -> d32
sigfillset(p) -> d32
sigaddset(p, e:signal) -> d32
sigdelset(p, e:signal) -> d32
sigismember(p, e:signal) -> d32
sigprocmask(e:sigmask, p, p) -> d32
pthread_sigmask(e:sigmask, p, p) -> d32

# the rest
prctl(e:prctl_op, u, l, u, l, u, l, u, l) -> d32
select(d32, p, p, p, p) -> d32
pselect(d32, p, p, p, p, p) -> d32
poll(p, l, d32) -> d32
ppoll(p, l, p, p) -> d32
epoll_create(d32) -> d32
epoll_create1(d32) -> d32
epoll_ctl(d32, e:epoll_op, d32, p) -> d32
epoll_wait(d32, p, d32, d32) -> d32
epoll_pwait(d32, p, d32, d32, p) -> d32
syscall(l) -> l
ioctl(d32, u, l) -> d32
textdomain(s)
bindtextdomain(s, s)
gettext(s) -> s
dgettext(s, s) -> s
dcgettext(s, s, d32) -> s
setlocale(e:locale, s) -> s
getopt(d32, p, s) -> d32
getopt_long(d32, p, s) -> d32
getopt_long_only(d32, p, s) -> d32
stat(s, p) -> d32
fstat(d32, p) -> d32
lstat(s, p) -> d32
chmod(s, e:mode) -> d32
fchmod(d32, e:mode) -> d32
umask(e:mode)
creat(s, e:mode) -> d32
creat64(s, e:mode) -> d32
isatty(d32) -> d32
getuid() -> i32
getgid() -> i32
geteuid() -> i32
getegid() -> i32
setuid(i32) -> d32
setgid(i32) -> d32
seteuid(i32) -> d32
setegid(i32) -> d32
setreuid(i32, i32) -> d32
setregid(i32, i32) -> d32
setresuid(i32, i32, i32) -> d32
setresgid(i32, i32, i32) -> d32
chown(s, i32, i32) -> d32
lchown(s, i32, i32) -> d32
fchown(d32, i32, i32) -> d32
dup(d32) -> d32
dup2(d32, d32) -> d32
sleep(u) -> u
usleep(u) -> d32
clock_getres(e:clockid_t, p) -> d32
clock_gettime(e:clockid_t, p) -> d32
clock_settime(e:clockid_t, p) -> d32
";

/// The enums of [`TABLE`]'s `e:` formats (`enum NAME { A = 1, B, … };`).
pub const ENUMS: &str = "\
enum mmap_prot { PROT_NONE = 0, PROT_READ = 1, PROT_WRITE = 2, PROT_EXEC = 4 };
enum mmap_flag { MAP_SHARED = 0x1, MAP_PRIVATE = 0x2, MAP_FIXED = 0x10, MAP_ANON = 0x20,
    MAP_GROWSDOWN = 0x100, MAP_DENYWRITE = 0x800, MAP_EXECUTABLE = 0x1000,
    MAP_LOCKED = 0x2000, MAP_NORESERVE = 0x4000, MAP_POPULATE = 0x8000,
    MAP_NONBLOCK = 0x10000, MAP_STACK = 0x20000, MAP_HUGETLB = 0x40000 };
enum madvise { MADV_NORMAL = 0, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_DONTNEED,
    MADV_FREE = 8, MADV_REMOVE, MADV_DONTFORK, MADV_DOFORK, MADV_MERGEABLE,
    MADV_UNMERGEABLE, MADV_HUGEPAGE, MADV_NOHUGEPAGE, MADV_DONTDUMP, MADV_DODUMP,
    MADV_HWPOISON = 100 };
enum posix_madvise { POSIX_MADV_NORMAL = 0, POSIX_MADV_RANDOM, POSIX_MADV_SEQUENTIAL,
    POSIX_MADV_WILLNEED, POSIX_MADV_DONTNEED };
enum posix_fadvise { POSIX_FADV_NORMAL = 0, POSIX_FADV_RANDOM, POSIX_FADV_SEQUENTIAL,
    POSIX_FADV_WILLNEED, POSIX_FADV_DONTNEED, POSIX_FADV_NOREUSE };
enum open_flag { O_RDONLY = 0, O_WRONLY = 01, O_RDWR = 02, O_CREAT = 0100, O_EXCL = 0200,
    O_NOCTTY = 0400, O_TRUNC = 01000, O_APPEND = 02000, O_NONBLOCK = 04000,
    O_DSYNC = 010000, O_ASYNC = 020000, O_DIRECT = 040000, O_LARGEFILE = 0100000,
    O_DIRECTORY = 0200000, O_NOFOLLOW = 0400000, O_NOATIME = 01000000,
    O_CLOEXEC = 02000000, O_SYNC = 04010000, O_PATH = 010000000 };
enum fcntl_cmd { F_DUPFD = 0, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, F_SETLK, F_SETLKW,
    F_SETOWN, F_GETOWN, F_SETSIG, F_GETSIG, F_GETLK64, F_SETLK64, F_SETLKW64,
    F_SETOWN_EX, F_GETOWN_EX };
enum seek_whence { SEEK_SET = 0, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE };
enum falloc_mode { FALLOC_FL_KEEP_SIZE = 1, FALLOC_FL_PUNCH_HOLE = 2,
    FALLOC_FL_NO_HIDE_STALE = 4, FALLOC_FL_COLLAPSE_RANGE = 8, FALLOC_FL_ZERO_RANGE = 16,
    FALLOC_FL_INSERT_RANGE = 32, FALLOC_FL_UNSHARE_RANGE = 64 };
enum access_flag { F_OK = 0, X_OK = 1, W_OK = 2, R_OK = 4 };
enum dlopen_flag { RTLD_LOCAL = 0, RTLD_LAZY = 1, RTLD_NOW = 2, RTLD_NOLOAD = 4,
    RTLD_DEEPBIND = 8, RTLD_GLOBAL = 0x100, RTLD_NODELETE = 0x1000 };
enum socket_domain { AF_UNSPEC = 0, AF_UNIX, AF_INET, AF_AX25, AF_IPX, AF_APPLETALK,
    AF_NETROM, AF_BRIDGE, AF_ATMPVC, AF_X25, AF_INET6, AF_ROSE, AF_DECnet, AF_NETBEUI,
    AF_SECURITY, AF_KEY, AF_NETLINK, AF_PACKET, AF_ASH, AF_ECONET, AF_ATMSVC, AF_RDS,
    AF_SNA, AF_IRDA, AF_PPPOX, AF_WANPIPE, AF_LLC, AF_IB, AF_MPLS, AF_CAN, AF_TIPC,
    AF_BLUETOOTH, AF_IUCV, AF_RXRPC, AF_ISDN, AF_PHONET, AF_IEEE802154, AF_CAIF, AF_ALG,
    AF_NFC, AF_VSOCK, AF_KCM, AF_QIPCRTR, AF_SMC };
enum socket_type { SOCK_STREAM = 1, SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET,
    SOCK_DCCP, SOCK_PACKET = 10 };
enum socket_flag { SOCK_NONBLOCK = 04000, SOCK_CLOEXEC = 02000000 };
enum signal { SIGNULL = 0, SIGHUP, SIGINT, SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE,
    SIGKILL, SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGSTKFLT, SIGCHLD,
    SIGCONT, SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU, SIGURG, SIGXCPU, SIGXFSZ, SIGVTALRM,
    SIGPROF, SIGWINCH, SIGPOLL, SIGPWR, SIGSYS, SIGRTMIN = 32, SIGRTMAX = 64 };
enum sigmask { SIG_BLOCK = 0, SIG_UNBLOCK, SIG_SETMASK };
enum prctl_op { PR_SET_PDEATHSIG = 1, PR_GET_PDEATHSIG, PR_GET_DUMPABLE, PR_SET_DUMPABLE,
    PR_GET_UNALIGN, PR_SET_UNALIGN, PR_GET_KEEPCAPS, PR_SET_KEEPCAPS, PR_GET_FPEMU,
    PR_SET_FPEMU, PR_GET_FPEXC, PR_SET_FPEXC, PR_GET_TIMING, PR_SET_TIMING, PR_SET_NAME,
    PR_GET_NAME, PR_GET_ENDIAN = 19, PR_SET_ENDIAN, PR_GET_SECCOMP, PR_SET_SECCOMP,
    PR_CAPBSET_READ, PR_CAPBSET_DROP, PR_GET_TSC, PR_SET_TSC, PR_GET_SECUREBITS,
    PR_SET_SECUREBITS, PR_SET_TIMERSLACK, PR_GET_TIMERSLACK, PR_TASK_PERF_EVENTS_DISABLE,
    PR_TASK_PERF_EVENTS_ENABLE, PR_MCE_KILL, PR_MCE_KILL_GET, PR_SET_MM,
    PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS,
    PR_GET_NO_NEW_PRIVS, PR_GET_TID_ADDRESS, PR_SET_THP_DISABLE, PR_GET_THP_DISABLE,
    PR_MPX_ENABLE_MANAGEMENT, PR_MPX_DISABLE_MANAGEMENT, PR_SET_FP_MODE, PR_GET_FP_MODE,
    PR_CAP_AMBIENT };
enum epoll_op { EPOLL_CTL_ADD = 1, EPOLL_CTL_DEL, EPOLL_CTL_MOD };
enum locale { LC_CTYPE = 0, LC_NUMERIC, LC_TIME, LC_COLLATE, LC_MONETARY, LC_MESSAGES,
    LC_ALL, LC_PAPER, LC_NAME, LC_ADDRESS, LC_TELEPHONE, LC_MEASUREMENT,
    LC_IDENTIFICATION };
enum mode { mod_777 = 0777, mod_755 = 0755, mod_666 = 0666, mod_644 = 0644, mod_400 = 0400,
    mod_600 = 0600, mod_660 = 0660, mod_640 = 0640, mod_444 = 0444, mod_022 = 0022,
    mod_440 = 0440, mod_222 = 0222, mod_111 = 0111, mod_011 = 0011, mod_033 = 0033,
    mod_077 = 0077 };
enum clockid_t { CLOCK_REALTIME = 0, CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID,
    CLOCK_THREAD_CPUTIME_ID, CLOCK_MONOTONIC_RAW, CLOCK_REALTIME_COARSE,
    CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME, CLOCK_REALTIME_ALARM, CLOCK_BOOTTIME_ALARM,
    CLOCK_TAI = 11 };
";

/// The table as uftrace's lists: `NAME@arg1/FMT,…;…` for the arguments
/// and `NAME@retval/FMT;…` for the return values (its `argauto` and
/// `retauto`), functions in the table's order.
pub fn lists() -> (String, String) {
    let (mut args, mut rets) = (String::new(), String::new());
    for line in TABLE.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = line.split_once('(').expect("NAME(");
        let (params, ret) = rest.split_once(')').expect("NAME(…)");
        let (mut int, mut float) = (0, 0);
        let mut specs = Vec::new();
        for p in params.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            specs.push(match p.strip_prefix('f') {
                Some(size) => {
                    float += 1;
                    format!("fparg{float}/{size}")
                }
                None => {
                    int += 1;
                    spec(&format!("arg{int}"), p)
                }
            });
        }
        if !specs.is_empty() {
            args.push_str(&format!("{name}@{};", specs.join(",")));
        }
        if let Some(r) = ret.trim().strip_prefix("->") {
            rets.push_str(&format!("{name}@{};", spec("retval", r.trim())));
        }
    }
    (args, rets)
}

/// `what` in format `fmt` of the table (`l`: no format).
fn spec(what: &str, fmt: &str) -> String {
    match fmt {
        "l" => what.to_string(),
        f => format!("{what}/{f}"),
    }
}

/// [`ENUMS`] on one line (uftrace's `enumauto`).
pub fn enums_line() -> String {
    ENUMS.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{ArgSpec, Enums, Fmt, Specs};

    #[test]
    fn every_line_reads_and_names_a_defined_enum() {
        let (args, rets) = lists();
        let mut specs = Specs::default();
        specs.add_list(&args, false).unwrap();
        specs.add_list(&rets, false).unwrap();
        let mut enums = Enums::default();
        enums.add(&enums_line());
        let entries = args.split(';').chain(rets.split(';'));
        for e in entries.filter(|e| !e.is_empty()) {
            for s in e.split_once('@').unwrap().1.split(',') {
                if let Fmt::Enum(name) = ArgSpec::parse(s).unwrap().fmt {
                    assert!(enums.show(&name, 0).is_some(), "{e}: enum {name}");
                }
            }
        }
        assert_eq!(
            (args.matches(";").count(), rets.matches(";").count()),
            (224, 219)
        );
        assert!(args.contains("open@arg1/s,arg2/e:open_flag;"));
        assert!(args.contains("strtod@arg1/s,arg2/p;"));
        assert!(
            args.contains("mmap@arg1/p,arg2/u,arg3/e:mmap_prot,arg4/e:mmap_flag,arg5/d32,arg6;")
        );
        assert!(rets.contains("fork@retval/i32;") && rets.contains("atof@retval/f64;"));
        assert!(!rets.contains("free@"));
        assert_eq!(
            enums.show("open_flag", 0o1101).as_deref(),
            Some("O_TRUNC|O_CREAT|O_WRONLY")
        );
    }
}
