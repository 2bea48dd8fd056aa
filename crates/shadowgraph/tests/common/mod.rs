//! Helpers shared by the integration tests: build fixtures with gcc, load
//! them, look functions up.
#![allow(dead_code)]

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// A fresh directory under the target dir, unique per test.
pub fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("shadowgraph-tests-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Builds `src` as a shared library with `flags` (plus -O2 -fPIC -shared).
pub fn build_lib(dir: &Path, src: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(format!("lib{name}.so"));
    let mut all = vec!["-O2", "-fPIC", "-shared"];
    all.extend_from_slice(flags);
    shadowgraph::cc::compile(&[src], &all, &out).unwrap();
    out
}

/// A dlopen'ed library; never closed (its code may be on a trampoline's
/// path for the life of the test process).
pub struct Lib {
    pub path: PathBuf,
    handle: *mut libc::c_void,
}

impl Lib {
    pub fn open(path: &Path) -> Lib {
        let c = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: valid C string; RTLD_NOW resolves everything up front.
        let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen {} failed", path.display());
        Lib {
            path: path.to_owned(),
            handle,
        }
    }

    pub fn sym(&self, name: &str) -> usize {
        let c = CString::new(name).unwrap();
        // SAFETY: handle is open; name is a valid C string.
        let p = unsafe { libc::dlsym(self.handle, c.as_ptr()) };
        assert!(!p.is_null(), "no symbol {name}");
        p as usize
    }

    /// The function `name` with the given signature.
    pub fn func<F: Copy>(&self, name: &str) -> F {
        let p = self.sym(name);
        assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<usize>());
        // SAFETY: the caller names a function of signature F.
        unsafe { std::mem::transmute_copy(&p) }
    }

    /// The module view of this library in the running process.
    pub fn module(&self) -> shadowgraph::process::Module {
        let path = std::fs::canonicalize(&self.path).unwrap();
        let mut mods = shadowgraph::process::discover(|p| {
            std::fs::canonicalize(p).map(|c| c == path).unwrap_or(false)
        })
        .unwrap();
        assert_eq!(mods.len(), 1, "module {} not found", self.path.display());
        mods.pop().unwrap()
    }
}

unsafe impl Send for Lib {}
unsafe impl Sync for Lib {}

/// Builds the fixture `file` as `lib<name>.so` (sled flavour), loads it and
/// puts its sites under the ftrace core.
pub fn load_into_core(name: &str, file: &str) -> Lib {
    let dir = workdir(name);
    let lib = Lib::open(&build_lib(
        &dir,
        &fixture(file),
        name,
        shadowgraph::cc::flavour::PATCHABLE,
    ));
    shadowgraph::ftrace::add_modules(vec![lib.module()]).unwrap();
    lib
}
