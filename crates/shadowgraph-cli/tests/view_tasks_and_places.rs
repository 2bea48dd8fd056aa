//! More of the views' options, each compared with uftrace 0.13's output
//! on the same recording: tasks (`info --task`, `report --task`, `graph
//! --task`), graph columns, library calls left out, places (`-L`), sampled flame graphs,
//! and a forked child's inherited calls in `report`.

mod common;

use common::*;
use std::process::Command;

/// Views' `--no-libcall` leaves library calls out, their callees shown in
/// their place (a plain dump keeps the recorded depths), as uftrace's.
#[test]
fn no_libcall_views_as_uftrace() {
    let dir = workdir("nolib");
    let exe = build_fixture(&dir, "nolib", "abc.c");
    let data = dir.join("nolib.data");
    record_ok(&["--libcall"], &data, &exe);
    let all = view(&mut shadowgraph(), &data, &["replay"]);
    let some = view(&mut shadowgraph(), &data, &["replay", "--no-libcall"]);
    assert!(
        all.contains("getpid();") && !some.contains("getpid"),
        "{all}\n{some}"
    );
    // (uftrace's report takes a hidden call's time out of its caller's
    // self time, ours does not: the README says so. The rows are alike.)
    let report = view(&mut shadowgraph(), &data, &["report", "--no-libcall"]);
    let rows = report_rows(&report);
    assert!(
        rows.contains_key("main") && !rows.contains_key("getpid"),
        "{report}"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "--no-libcall"],
            &["dump", "--no-libcall"],
            &["graph", "--no-libcall"],
        ],
        0,
    );
    // A recording without library calls: nothing to leave out, no error;
    // record's `-a`, which uftrace's views take too, changes nothing.
    let plain = dir.join("plain.data");
    record_ok(&[], &plain, &exe);
    let args = ["replay", "--no-libcall", "-a"];
    assert_eq!(
        view(&mut shadowgraph(), &plain, &args),
        view(&mut shadowgraph(), &plain, &["replay"])
    );
    as_uftrace(&plain, &[&args], 0);
}

/// `report` counts the calls a forked child inherited and returns from
/// (its first records end them) as uftrace's does: `main` twice, its time
/// in the child from the child's first record.
#[test]
fn report_counts_calls_a_forked_child_returns_from() {
    let data = recording("fr", "fork_returns.c", &[]);
    let rows = report_rows(&view(&mut shadowgraph(), &data, &["report"]));
    assert_eq!(rows["main"].2, 2, "{rows:?}");
    assert_eq!(rows["work"].2, 2, "{rows:?}");
    as_uftrace(&data, &[&["report"], &["report", "-s", "call"]], 0);
    // With library calls the child's records begin with fork's exit: a
    // depth limit counts from where those inherited exits leave it (the
    // child's work and leaf within `-D 2`), as uftrace's budget does.
    let dir = workdir("fr-lib");
    let exe = build_fixture(&dir, "frlib", "fork_returns.c");
    let data = dir.join("frlib.data");
    record_ok(&["--libcall"], &data, &exe);
    let args = ["report", "-D", "2"];
    let calls = |tool: &mut Command| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = report_rows(&view(tool, &data, &args))
            .into_iter()
            .map(|(f, r)| (f, r.2))
            .collect();
        v.sort();
        v
    };
    let ours = calls(&mut shadowgraph());
    assert!(ours.contains(&("leaf".to_string(), 2)), "{ours:?}");
    as_uftrace(&data, &[&["report", "-D", "3"], &["replay", "-D", "2"]], 0);
    // (uftrace takes a left-out call's time from its caller's self time;
    // the README says so: the calls are compared.)
    assert_eq!(ours, calls(&mut Command::new("uftrace")));
}

/// `info --task`, `report --task` and `graph -f` (total, self, addr; `+`,
/// `none`) as uftrace's, on a recording of a process and its forked child.
#[test]
fn task_info_and_graph_fields_as_uftrace() {
    let data = recording("tg", "fork_returns.c", &[]);
    as_uftrace(
        &data,
        &[
            &["info", "--task"],
            &["report", "--task"],
            &["report", "--task", "-f", "tid,func"],
            &["graph", "-f", "total,self,addr", "main"],
            &["graph", "-f", "+self", "main"],
            &["graph", "-f", "none", "main"],
        ],
        0,
    );
}

/// `graph --task`: the tree of who made whom (processes, threads), each
/// task's lifetime and that less its time off the processor, as uftrace's:
/// on uftrace's recording the same text, times included; on ours the same
/// tree.
#[test]
fn task_graph_as_uftrace() {
    let dir = workdir("taskgraph");
    let exe = build_fixture_with(&dir, "taskgraph", "fork_threads.c", &["-pthread"]);
    let data = dir.join("ours.data");
    record_ok(&[], &data, &exe);
    let args = ["graph", "--task"];
    // Each line's tree, the columns left of it aside.
    let tree = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| {
                l.split_once(" : ")
                    .map_or(l, |x| x.1)
                    .trim_end()
                    .to_string()
            })
            .collect()
    };
    let ours = view(&mut shadowgraph(), &data, &args);
    let want = [
        "========== TASK GRAPH ==========",
        "# TOTAL TIME   SELF TIME     TID     TASK NAME",
        "taskgraph",
        " +-taskgraph",
        " +-taskgraph",
        " |",
        " +----taskgraph",
        " |     +-taskgraph",
        " |     +-taskgraph",
        " |",
        " +----taskgraph",
        "",
    ];
    assert_eq!(tree(&ours), want, "{ours}");
    if uftrace_missing("the same view by uftrace") {
        return;
    }
    let theirs = dir.join("theirs.data");
    uftrace_record(&theirs, &["-P", "."], &exe);
    as_uftrace(&theirs, &[&args], 0);
    assert_eq!(
        tree(&view(&mut Command::new("uftrace"), &theirs, &args)),
        want
    );
}

/// `dump --flame-graph --sample-time T` weighs each path in samples of T
/// as uftrace's (a callee's time taken from its caller in whole samples):
/// the same paths and weights (uftrace lists them in tree order, we by
/// path).
#[test]
fn sampled_flame_graph_as_uftrace() {
    let data = recording("fs", "join_waits.c", &["-pthread"]);
    let args = ["dump", "--flame-graph", "--sample-time", "100us"];
    let sorted = |s: String| {
        let mut l: Vec<String> = s.lines().map(str::to_string).collect();
        l.sort();
        l
    };
    let ours = sorted(view(&mut shadowgraph(), &data, &args));
    assert!(ours.iter().any(|l| l.starts_with("worker ")), "{ours:?}");
    if uftrace_missing("the same dump by uftrace") {
        return;
    }
    assert_eq!(
        ours,
        sorted(view(&mut Command::new("uftrace"), &data, &args))
    );
}

/// `-L LOC` shows only the functions declared in matching files, the
/// others' callees in their place; `LOC@hide` hides those; as uftrace's,
/// on a recording made with `--srcline`.
#[test]
fn location_filters_as_uftrace() {
    let dir = workdir("loc");
    let exe = dir.join("loc");
    cc(
        &[&fixture("loc_main.c"), &fixture("loc_other.c")],
        // (uftrace finds a function's place by the address recorded: its
        // own, with fentry calls; a plain -pg program's stubs it cannot.)
        &["-O0", "-g", "-pg", "-mfentry", "-mrecord-mcount"],
        &exe,
    );
    let data = dir.join("loc.data");
    record_ok(&["--srcline"], &data, &exe);
    let shown = view(&mut shadowgraph(), &data, &["replay", "-L", "loc_other.c$"]);
    assert_eq!(
        replay_body(&shown)
            .iter()
            .map(|l| l.trim_end())
            .collect::<Vec<_>>(),
        ["second() {", "  third();", "} /* second */"],
        "{shown}"
    );
    as_uftrace(
        &data,
        &[
            &["replay", "-L", "loc_main.c$"],
            &["replay", "-L", "loc_main.c@hide"],
        ],
        0,
    );
    // (uftrace 0.13 shows the same after a line saying it failed to set
    // the filters.)
    let both = view(
        &mut shadowgraph(),
        &data,
        &["replay", "-L", "loc_other", "-F", "second", "-N", "third"],
    );
    assert_eq!(
        replay_body(&both)
            .iter()
            .map(|l| l.trim())
            .collect::<Vec<_>>(),
        ["second();"],
        "{both}"
    );
}

/// Programs started with an environment of the program's own (no
/// `LD_PRELOAD`, no session): by `posix_spawn`, `posix_spawnp` and
/// `execve` they are recorded all the same, in the parent's stream, each
/// call as uftrace records it (which puts its variables back the same
/// way).
#[test]
fn spawned_with_own_environment_as_uftrace() {
    let dir = workdir("spawn_env");
    let exe = build_fixture_with(&dir, "spawn", "spawn_env.c", &["-pg"]);
    let data = dir.join("s.data");
    let o = record_run(&[("SPAWN_EXECVE", "1")], &["-F", "main"], &data, &exe, &[]);
    assert!(o.status.success(), "{}", text(&o).1);
    let report = view(&mut shadowgraph(), &data, &["report"]);
    // Three started copies, each child_work once.
    assert_eq!(report_rows(&report)["child_work"].2, 3, "{report}");
    record_ok(&["--libcall", "-F", "main"], &data, &exe);
    let ours = shape(&view(&mut shadowgraph(), &data, &["replay"]));
    assert_eq!(
        ours.iter()
            .filter(|l| l.ends_with("child_work() {"))
            .count(),
        2,
        "{ours:#?}"
    );
    if require("uftrace", "uftrace's recording of the same program") {
        // (Where a started program's lines fall among the parent's depends
        // on the processors: the calls of each function, compared.)
        let theirs = dir.join("u.data");
        uftrace_record(&theirs, &["-F", "main"], &exe);
        let calls = |tool: &mut Command, d: &std::path::Path| {
            let rows = report_rows(&view(tool, d, &["report"]));
            let mut v: Vec<(String, u64)> = rows.into_iter().map(|(f, r)| (f, r.2)).collect();
            v.sort();
            v
        };
        assert_eq!(
            calls(&mut shadowgraph(), &data),
            calls(&mut Command::new("uftrace"), &theirs)
        );
    }
}

/// `record -E linux:task-name`: each new name a thread takes is recorded
/// (a perf event), shown where it happened (`/* linux:task-name
/// (comm="first") */`), named in the task column from there on (hidden
/// events too), and as metadata in the Chrome dump; as uftrace's, on its
/// recording and on ours.
#[test]
fn task_names_as_uftrace() {
    let dir = workdir("task_names");
    let exe = build_fixture_with(&dir, "tn", "task_names.c", &["-pg", "-pthread"]);
    let data = dir.join("tn.data");
    let opts = ["--libcall", "--no-event", "-E", "linux:task-name"];
    record_ok(&opts, &data, &exe);
    let replay = view(&mut shadowgraph(), &data, &["replay", "-f", "task"]);
    for shown in [
        "           first |       /* linux:task-name (comm=\"first\") */",
        "          worker |       /* linux:task-name (comm=\"worker\") */",
        "          second | } /* main */",
    ] {
        assert!(replay.contains(shown), "{shown} in\n{replay}");
    }
    let views: [&[&str]; 4] = [
        &["replay", "-f", "task,tid"],
        &["replay", "--no-event", "-f", "task,tid"],
        &["replay", "-F", "main", "-f", "task,tid"],
        &["dump", "--chrome"],
    ];
    // (Thread ids, and the Chrome dump's times, differ between
    // recordings: left out; so are the dump's first metadata events, each
    // thread's, which uftrace gives as a process of its own. Where one
    // thread's lines fall among another's depends on the processors: each
    // thread's lines in order, the threads in the order they first show,
    // each call whose exit follows its entry in its thread on one line.)
    let shape_of = |text: String| -> Vec<String> {
        let chrome = text.starts_with("{\"traceEvents\"");
        let field = |l: &str, k: &str| {
            let v = l.split(k).nth(1).and_then(|r| r.split('"').nth(1));
            let v = v.unwrap_or("");
            v.split_once("] ").map_or(v, |x| x.1).to_string()
        };
        let thread = |l: &str| -> String {
            // (A Chrome event without a thread is its process's first
            // thread's, whose id is the process's.)
            let tid = match chrome {
                true => (l.split("\"tid\":").nth(1)).or(l.split("\"pid\":").nth(1)),
                false => l.split_once('[').map(|x| x.1),
            };
            tid.and_then(|t| t.split([',', '}', ']']).next())
                .unwrap_or("")
                .to_string()
        };
        let line = |l: &str| match l.split_once('[').zip(l.split_once(']')) {
            Some(((a, _), (_, b))) => format!("{a}{b}"),
            None => l.to_string(),
        };
        let mut threads: Vec<(String, Vec<String>)> = Vec::new();
        for l in (text.lines())
            .filter(|l| !chrome || l.starts_with("{\"ts\""))
            .skip_while(|l| chrome && l.contains("\"ph\":\"M\""))
        {
            let shown = match chrome {
                true => ["\"ph\":", "\"name\":", "\"args\":{\"name\":"]
                    .iter()
                    .map(|k| field(l, k))
                    .collect::<Vec<_>>()
                    .join(" "),
                false => line(l),
            };
            let t = thread(l);
            match threads.iter_mut().find(|x| x.0 == t) {
                Some(x) => x.1.push(shown),
                None => threads.push((t, vec![shown])),
            }
        }
        // (Whether a call shows as a leaf depends on whether another
        // thread's line fell between its entry and exit: leaves merged.)
        let body = |l: &str| {
            l.split_once('|')
                .map_or(l, |x| x.1)
                .trim_start()
                .to_string()
        };
        let merge = |lines: Vec<String>| {
            let mut out: Vec<String> = Vec::new();
            for l in lines {
                let closes = (body(&l).strip_prefix("} /* "))
                    .and_then(|r| r.strip_suffix(" */"))
                    .map(str::to_string);
                if let (Some(name), Some(prev)) = (closes, out.last_mut()) {
                    if !chrome && body(prev) == format!("{name}() {{") {
                        *prev = prev.replace("() {", "();");
                        continue;
                    }
                }
                out.push(l);
            }
            out
        };
        threads.into_iter().flat_map(|x| merge(x.1)).collect()
    };
    if !require("uftrace", "uftrace's recording of the same program") {
        return;
    }
    as_uftrace(&data, &views[..3], 0);
    let theirs = dir.join("u.data");
    uftrace_record(&theirs, &opts[1..], &exe);
    for args in views {
        assert_eq!(
            shape_of(view(&mut shadowgraph(), &data, args)),
            shape_of(view(&mut Command::new("uftrace"), &theirs, args)),
            "{args:?}"
        );
    }
}
