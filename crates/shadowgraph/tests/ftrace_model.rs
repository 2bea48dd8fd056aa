//! Model-based test of the ftrace core (design §3.5): random sequences of
//! register / unregister / filter and notrace changes / direct register,
//! modify and unregister over ops (two of them sharing one filter set, some
//! without trampolines). After every step each site's count, flags and
//! target equal a plain reference model, the bytes at every site call
//! exactly that target, and calls reach exactly the ops the model predicts.
//! With no ops left every site is a nop again and only sticky flags remain.

mod common;

use common::*;
use proptest::prelude::*;
use shadowgraph::ftrace::{self, site_flags, FilterEdit, FilterSet, Ops, Regs};
use shadowgraph::site::{encode_call, NOP5};
use shadowgraph_data::pattern::glob_match;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The fixture's functions but `outer_calls_inner`, whose calls reach a
/// second site and so do not match the model's one-call-one-hit rule.
const NAMES: &[&str] = common::probes::NAMES.split_at(12).0;
const POOL: [&str; 6] = [
    "sched_*",
    "*lock*",
    "*time*",
    "rcu_*",
    "plain_work",
    "lock_*",
];
const DIRECT_SET: [&str; 2] = ["plain_work", "sched_tick"];

struct Fixture {
    _lib: Lib,
    addrs: Vec<usize>,
    run_all: extern "C" fn(i32) -> i64,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let lib = load_into_core("model", "families.c");
        Fixture {
            addrs: NAMES
                .iter()
                .map(|n| ftrace::site_by_name(n).unwrap().addr)
                .collect(),
            run_all: lib.func("run_all"),
            _lib: lib,
        }
    })
}

/// Hits per (ops slot, function).
static HITS: [[AtomicU64; 12]; 5] = [const { [const { AtomicU64::new(0) }; 12] }; 5];
static DIRECT_HITS: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

extern "C" fn hit(ip: usize, _p: usize, ops: &Ops, _r: &mut Regs) {
    if let Some(i) = fixture().addrs.iter().position(|&a| a == ip) {
        HITS[ops.private][i].fetch_add(1, Ordering::Relaxed);
    }
}

static DA: AtomicU64 = AtomicU64::new(0);
static DB: AtomicU64 = AtomicU64::new(0);
std::arch::global_asm!(
    "model_direct_a:",
    "lock inc qword ptr [rip + {a}]",
    "ret",
    "model_direct_b:",
    "lock inc qword ptr [rip + {b}]",
    "ret",
    ".globl model_direct_a",
    ".globl model_direct_b",
    a = sym DA,
    b = sym DB,
);
extern "C" {
    fn model_direct_a();
    fn model_direct_b();
}

fn direct_targets() -> [usize; 2] {
    [
        model_direct_a as *const () as usize,
        model_direct_b as *const () as usize,
    ]
}

#[derive(Clone, Debug)]
enum Step {
    Register(usize),
    Unregister(usize),
    /// Filter of set `g` (0: shared by ops 0 and 1; 1..4: ops 2..4): None = reset (all).
    Filter(usize, Option<Vec<usize>>),
    Notrace(usize, Option<usize>),
    DirectRegister(usize),
    DirectModify(usize),
    DirectUnregister,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..5).prop_map(Step::Register),
        2 => (0usize..5).prop_map(Step::Unregister),
        2 => (0usize..4, proptest::option::of(proptest::collection::vec(0usize..6, 1..3)))
            .prop_map(|(g, p)| Step::Filter(g, p)),
        1 => (0usize..4, proptest::option::of(0usize..6)).prop_map(|(g, p)| Step::Notrace(g, p)),
        1 => (0usize..2).prop_map(Step::DirectRegister),
        1 => (0usize..2).prop_map(Step::DirectModify),
        1 => Just(Step::DirectUnregister),
    ]
}

/// The reference model: which ops are registered, and each filter set's
/// patterns, evaluated by name.
struct Model {
    sets: Vec<Arc<FilterSet>>,
    /// (filter patterns or None = all, notrace pattern)
    specs: Vec<(Option<Vec<usize>>, Option<usize>)>,
    ops: Vec<Arc<Ops>>,
    registered: [bool; 5],
    direct: Arc<Ops>,
    direct_on: Option<usize>,
}

/// Ops 0 and 1 share filter set 0; ops k ≥ 2 own set k - 1.
fn set_of(ops: usize) -> usize {
    ops.saturating_sub(1)
}

impl Model {
    fn new() -> Model {
        let sets: Vec<Arc<FilterSet>> = (0..4).map(|_| FilterSet::all()).collect();
        let ops = (0..5)
            .map(|i| {
                // Ops 1 and 3 opt out of trampolines.
                let flags = if i == 1 || i == 3 {
                    ftrace::NO_TRAMP
                } else {
                    ftrace::OpsFlags::NONE
                };
                Ops::with_private(hit, flags, sets[set_of(i)].clone(), i)
            })
            .collect();
        Model {
            sets,
            specs: vec![(None, None); 4],
            ops,
            registered: [false; 5],
            direct: Ops::new_direct(FilterSet::with_patterns(&DIRECT_SET, &[]).unwrap()),
            direct_on: None,
        }
    }

    fn wants(&self, ops: usize, name: &str) -> bool {
        let (f, nt) = &self.specs[set_of(ops)];
        let m = |p: usize| glob_match(POOL[p].as_bytes(), name.as_bytes());
        f.as_ref().is_none_or(|ps| ps.iter().any(|&p| m(p))) && !nt.is_some_and(m)
    }

    fn apply(&mut self, s: &Step) {
        match s {
            Step::Register(i) => {
                let r = ftrace::register(&self.ops[*i]);
                assert_eq!(r.is_ok(), !self.registered[*i], "{s:?}: {r:?}");
                self.registered[*i] = true;
            }
            Step::Unregister(i) => {
                let r = ftrace::unregister(&self.ops[*i]);
                assert_eq!(r.is_ok(), self.registered[*i], "{s:?}: {r:?}");
                self.registered[*i] = false;
            }
            Step::Filter(g, p) => {
                let pats: Vec<&str> = p.iter().flatten().map(|&i| POOL[i]).collect();
                let edit = if p.is_some() {
                    FilterEdit::Set(&pats)
                } else {
                    FilterEdit::Reset
                };
                ftrace::set_filter(&self.sets[*g], edit).unwrap();
                self.specs[*g].0 = p.clone();
            }
            Step::Notrace(g, p) => {
                let pats: Vec<&str> = p.iter().map(|&i| POOL[i]).collect();
                let edit = if p.is_some() {
                    FilterEdit::Set(&pats)
                } else {
                    FilterEdit::Reset
                };
                ftrace::set_notrace(&self.sets[*g], edit).unwrap();
                self.specs[*g].1 = *p;
            }
            Step::DirectRegister(t) => {
                let r = ftrace::register_direct(&self.direct, direct_targets()[*t]);
                assert_eq!(r.is_ok(), self.direct_on.is_none(), "{s:?}: {r:?}");
                if r.is_ok() {
                    self.direct_on = Some(*t);
                }
            }
            Step::DirectModify(t) => {
                let r = ftrace::modify_direct(&self.direct, direct_targets()[*t]);
                assert_eq!(r.is_ok(), self.direct_on.is_some(), "{s:?}: {r:?}");
                if r.is_ok() {
                    self.direct_on = Some(*t);
                }
            }
            Step::DirectUnregister => {
                let r = ftrace::unregister(&self.direct);
                assert_eq!(r.is_ok(), self.direct_on.is_some(), "{s:?}: {r:?}");
                self.direct_on = None;
            }
        }
    }

    /// Compares every site with the model, and calls with the model's hits.
    fn check(&self, after: &Step) {
        let f = fixture();
        for (k, name) in NAMES.iter().enumerate() {
            let s = ftrace::site_by_name(name).unwrap();
            let m: Vec<usize> = (0..5)
                .filter(|&i| self.registered[i] && self.wants(i, name))
                .collect();
            let direct = self.direct_on.filter(|_| DIRECT_SET.contains(name));
            let count = m.len() + direct.is_some() as usize;
            assert_eq!(s.count as usize, count, "after {after:?}: {name} count");
            let (args, regs) = ftrace::shared_callers(s.arena).unwrap();
            // One ops with a trampoline beside the direct call: its
            // chained caller, then the target (a caller of its own).
            let own = |i: usize| self.ops[i].trampoline_in(s.arena);
            let chained = direct.is_some() && m.len() == 1 && own(m[0]).is_some();
            if chained {
                let pad = ftrace::direct_pad(s.arena, direct_targets()[direct.unwrap()]);
                assert!(
                    ![0, args, regs, own(m[0]).unwrap(), pad.unwrap()].contains(&s.target),
                    "after {after:?}: {name} chained caller"
                );
            }
            // Several ops that take trampolines: a caller of that set.
            let set = direct.is_none() && m.len() >= 2 && m.iter().all(|&i| i != 1 && i != 3);
            if set {
                let owns: Vec<usize> = m.iter().filter_map(|&i| own(i)).collect();
                assert!(
                    s.target != 0 && ![args, regs].contains(&s.target) && !owns.contains(&s.target),
                    "after {after:?}: {name} set caller"
                );
            }
            let want = if count == 0 {
                0
            } else if let (Some(t), true) = (direct, m.is_empty()) {
                ftrace::direct_pad(s.arena, direct_targets()[t]).unwrap()
            } else if chained || set {
                s.target
            } else if let (1, Some(t)) = (
                m.len(),
                direct
                    .is_none()
                    .then(|| self.ops[m[0]].trampoline_in(s.arena))
                    .flatten(),
            ) {
                t
            } else if direct.is_some() {
                regs
            } else {
                args
            };
            assert_eq!(
                s.target, want,
                "after {after:?}: {name} target (ops {m:?}, direct {direct:?})"
            );
            let tramp = s.target != 0
                && s.target != args
                && s.target != regs
                && (direct.is_none() || chained)
                && !set;
            assert_eq!(
                s.flags & site_flags::TRAMP != 0,
                tramp,
                "after {after:?}: {name} TRAMP"
            );
            assert_eq!(
                s.flags & site_flags::DIRECT != 0,
                direct.is_some(),
                "{name} DIRECT"
            );
            assert_eq!(
                s.flags & site_flags::REGS != 0,
                direct.is_some(),
                "{name} REGS"
            );
            assert_eq!(
                s.flags & site_flags::ENABLED != 0,
                count > 0,
                "{name} ENABLED"
            );
            // SAFETY: reading loaded text.
            let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
            let enc = if want == 0 {
                NOP5
            } else {
                encode_call(s.addr, want).unwrap()
            };
            assert_eq!(bytes, enc, "after {after:?}: {name} bytes");
            let _ = k;
        }
        ftrace::check_invariants().unwrap();
        // Calls reach exactly the ops the model predicts.
        for h in HITS.iter().flatten() {
            h.store(0, Ordering::Relaxed);
        }
        DA.store(0, Ordering::Relaxed);
        DB.store(0, Ordering::Relaxed);
        (f.run_all)(1);
        for (i, row) in HITS.iter().enumerate() {
            for (k, name) in NAMES.iter().enumerate() {
                let want = (self.registered[i] && self.wants(i, name)) as u64;
                assert_eq!(
                    row[k].load(Ordering::Relaxed),
                    want,
                    "after {after:?}: ops {i} on {name}"
                );
            }
        }
        let d = [DA.load(Ordering::Relaxed), DB.load(Ordering::Relaxed)];
        let mut want = [0u64; 2];
        if let Some(t) = self.direct_on {
            want[t] = DIRECT_SET.len() as u64;
        }
        assert_eq!(d, want, "after {after:?}: direct hits");
        let _ = &DIRECT_HITS;
    }

    fn clear(&mut self) {
        for i in 0..5 {
            if self.registered[i] {
                let _ = ftrace::unregister(&self.ops[i]);
                self.registered[i] = false;
            }
        }
        if self.direct_on.take().is_some() {
            let _ = ftrace::unregister(&self.direct);
        }
    }
}

/// Leaves the core empty even when a case fails (so shrinking works).
struct Cleanup(Model);

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.0.clear();
    }
}

fn all_clean() {
    for s in ftrace::sites() {
        assert_eq!(s.count, 0, "{}", s.function);
        assert_eq!(s.target, 0, "{}", s.function);
        assert_eq!(
            s.flags & !site_flags::STICKY,
            0,
            "{}: only sticky flags remain",
            s.function
        );
        // SAFETY: reading loaded text.
        let bytes = unsafe { std::slice::from_raw_parts(s.addr as *const u8, 5) };
        assert_eq!(bytes, NOP5);
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn core_matches_reference_model(steps in proptest::collection::vec(step(), 1..24)) {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        fixture();
        all_clean();
        let mut m = Cleanup(Model::new());
        for s in &steps {
            m.0.apply(s);
            m.0.check(s);
        }
        m.0.clear();
        all_clean();
    }
}
