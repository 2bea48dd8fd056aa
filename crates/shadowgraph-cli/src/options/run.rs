//! How `record` runs the program and what it says of the run, as
//! uftrace's options do: `--time`, `--no-randomize-addr`, `--list-event`,
//! `--nop`, `--rt-prio`, `--num-thread`, and `--opt-file`, which every
//! command takes (its words are read before the command line is parsed:
//! [`expand_opt_file`]).

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::path::PathBuf;

/// `record`'s options for the program's run.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct RunOptions {
    /// Print how long the program ran when it ends, as time(1) (elapsed,
    /// system and user time), as uftrace's `--time`.
    #[arg(long)]
    pub(crate) time: bool,
    /// Run the program without address space layout randomization, so
    /// that its addresses are the same from run to run.
    #[arg(long)]
    pub(crate) no_randomize_addr: bool,
    /// Read more options from FILE, after the command line's (a later
    /// one wins), and the program and its arguments when the command line
    /// gives none: words split by white space, quoted with ' or ", a word
    /// that starts with # and the rest of its line left out.
    #[arg(long, value_name = "FILE")]
    pub(crate) opt_file: Option<PathBuf>,
    /// List the events the program offers (its and its libraries' user
    /// SDT markers, for -E) instead of recording it: the program's
    /// `main` does not run.
    #[arg(long)]
    pub(crate) list_event: bool,
    /// Run the program with the agent loaded but nothing traced or
    /// recorded, and no data directory made (uftrace's `--nop`): the
    /// agent's own cost, to compare with.
    #[arg(long)]
    pub(crate) nop: bool,
    /// Run the writer (the thread of `record` that drains the program's
    /// rings to disk) at real-time FIFO priority PRIO, 1–99 (as uftrace's
    /// recording threads).
    #[arg(long, value_name = "PRIO", value_parser = clap::value_parser!(i32).range(1..=99))]
    pub(crate) rt_prio: Option<i32>,
    /// Drain the program's rings with NUM writer threads (at most one per
    /// online processor; 1 by default), each the rings of its share of the
    /// program's threads: for programs of many busy threads.
    #[arg(long, value_name = "NUM", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) num_thread: Option<u32>,
    /// Have the program listen for `record -p PID` and `live -p PID`,
    /// which then switch its tracing (`--trace on|off`) instead of
    /// attaching recordings of their own (uftrace's agent).
    #[arg(short = 'g', long)]
    pub(crate) agent: bool,
    /// Taken for uftrace's sake, and changes nothing: one agent serves
    /// every program (uftrace's selects a library without thread support).
    #[arg(long)]
    pub(crate) libmcount_single: bool,
}

/// `--time`'s lines, as uftrace prints them: the program's elapsed time
/// and the system and user time of it and its children.
pub(crate) fn time_lines(elapsed_ns: u64, rusage: &libc::rusage) -> String {
    let tv = |t: &libc::timeval| format!("{:6}.{:06}000 sec", t.tv_sec, t.tv_usec);
    format!(
        "elapsed time: {:>20}\n system time: {}\n   user time: {}\n",
        format!(
            "{}.{:09} sec",
            elapsed_ns / 1_000_000_000,
            elapsed_ns % 1_000_000_000
        ),
        tv(&rusage.ru_stime),
        tv(&rusage.ru_utime)
    )
}

/// The words of an options file, as uftrace splits them.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '#' {
            while chars.next_if(|&c| c != '\n').is_some() {}
        } else if c == '\'' || c == '"' {
            chars.next();
            let mut w: String = std::iter::from_fn(|| chars.next_if(|&x| x != c)).collect();
            chars.next();
            w.extend(std::iter::from_fn(|| chars.next_if(|x| !x.is_whitespace())));
            out.push(w);
        } else {
            out.push(std::iter::from_fn(|| chars.next_if(|x| !x.is_whitespace())).collect());
        }
    }
    out
}

/// Where the program begins among a subcommand's `args` (its options
/// before it), if it has one: the first word that is neither an option
/// nor the value of one, or the word after `--`.
fn program_start(cmd: &clap::Command, args: &[String]) -> Option<usize> {
    let takes_value = |a: Option<&clap::Arg>| a.is_some_and(|a| a.get_action().takes_values());
    let mut i = 0;
    while i < args.len() {
        let w = args[i].as_str();
        if w == "--" {
            return (i + 1 < args.len()).then_some(i + 1);
        }
        if let Some(long) = w.strip_prefix("--") {
            // (`--opt-file` takes its file in every command, declared or
            // not, and the global `--logfile` its file.)
            let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long));
            let value = matches!(long, "opt-file" | "logfile") || takes_value(arg);
            i += 1 + usize::from(!long.contains('=') && value);
        } else if let Some(short) = w.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next();
            let arg = cmd.get_arguments().find(|a| a.get_short() == c);
            i += 1 + usize::from(short.chars().count() == 1 && takes_value(arg));
        } else {
            return Some(i);
        }
    }
    None
}

/// The command line with `--opt-file FILE`'s words in its place: its
/// options after the command line's, and its program (with its arguments)
/// if the command line names none. A line without it is returned as it
/// is; a file that cannot be read ends the command with its error.
pub(crate) fn expand_opt_file(cli: &clap::Command, args: Vec<OsString>) -> Vec<OsString> {
    expand(cli, args).unwrap_or_else(|e| {
        eprintln!("shadowgraph: {e}");
        std::process::exit(1)
    })
}

fn expand(cli: &clap::Command, args: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(sub) = args.get(1).and_then(|s| s.to_str()) else {
        return Ok(args);
    };
    let Some(cmd) = cli.find_subcommand(sub) else {
        return Ok(args);
    };
    // (Words that are not text are the program's, after its options.)
    let rest: Vec<String> = args[2..]
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let start = program_start(cmd, &rest).unwrap_or(rest.len());
    let (mut options, mut file) = (Vec::new(), None);
    let mut i = 0;
    while i < start {
        let w = &rest[i];
        if let Some(f) = w.strip_prefix("--opt-file=") {
            file = Some(f.to_string());
        } else if w == "--opt-file" && i + 1 < start {
            file = Some(rest[i + 1].clone());
            i += 1;
        } else if w != "--" {
            options.push(args[2 + i].clone());
        }
        i += 1;
    }
    let Some(file) = file else {
        return Ok(args);
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("--opt-file {file}: cannot read it: {e}"))?;
    let mut words = words(&text);
    // A command first is this one's (another's is left out, as uftrace
    // does).
    if words
        .first()
        .is_some_and(|w| !w.starts_with('-') && cli.find_subcommand(w).is_some())
    {
        if words[0] != sub {
            eprintln!(
                "shadowgraph: --opt-file {file}: `{}` left out: the command is {sub}",
                words[0]
            );
        }
        words.remove(0);
    }
    let file_start = program_start(cmd, &words).unwrap_or(words.len());
    let mut out = args[..2].to_vec();
    out.extend(options);
    let file_options = words[..file_start].iter().filter(|w| *w != "--");
    out.extend(file_options.map(OsString::from));
    // The program after `--`: none of its words is taken for an option.
    let program: Vec<OsString> = if start < rest.len() {
        args[2 + start..].to_vec()
    } else {
        words[file_start..].iter().map(OsString::from).collect()
    };
    if !program.is_empty() {
        out.push("--".into());
        out.extend(program);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{expand, words};

    /// The global `--logfile FILE` is an option with its value, not the
    /// program: the options file's program is the one run.
    #[test]
    fn logfile_is_no_program() {
        let dir = std::env::temp_dir().join(format!("sg-optfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("opts");
        std::fs::write(&file, "-F main\nprog a\n").unwrap();
        let cli = clap::Command::new("shadowgraph").subcommand(
            clap::Command::new("record").arg(clap::Arg::new("F").short('F').num_args(1)),
        );
        let args: Vec<std::ffi::OsString> = ["shadowgraph", "record", "--logfile", "L"]
            .iter()
            .map(Into::into)
            .chain(["--opt-file".into(), file.clone().into_os_string()])
            .collect();
        let want = [
            "shadowgraph",
            "record",
            "--logfile",
            "L",
            "-F",
            "main",
            "--",
            "prog",
            "a",
        ];
        assert_eq!(
            expand(&cli, args).unwrap(),
            want.map(std::ffi::OsString::from)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn words_split_as_uftrace_splits_them() {
        let text = "-F main  # a comment\n-A 'f@arg1' \"two words\" -D3\n#x\nprog a";
        assert_eq!(
            words(text),
            [
                "-F",
                "main",
                "-A",
                "f@arg1",
                "two words",
                "-D3",
                "prog",
                "a"
            ]
        );
    }
}
