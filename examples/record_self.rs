//! Records this program's own calls of its C functions into a data
//! directory, then shows them as `shadowgraph replay` would: the library
//! embedded, with no agent and no CLI.
//!
//! `cargo run -p shadowgraph-examples --bin record_self [DIR]`

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use shadowgraph::config::{Config, Record, Tracer};
use shadowgraph::session::Session;
use shadowgraph_data::{dir::DataDir, replay};

extern "C" {
    fn work(n: i32) -> i64;
}

fn main() -> Result<(), String> {
    let dir = std::env::args_os().nth(1).map_or_else(
        || std::env::temp_dir().join(format!("record-self-{}.data", std::process::id())),
        Into::into,
    );
    // One recorder of every call, each thread writing its own records.
    let config = Config::record(Record::into_dir(&dir, vec![Tracer::default()]));
    let session = Session::start(config)?;
    // SAFETY: a C function of c/work.c, `long work(int)`.
    let result = unsafe { work(5) };
    // Tracing stops, and the data directory is complete (uftrace's format).
    session.finish();
    println!("# work(5) = {result}; recorded into {}", dir.display());
    let data = DataDir::open(&dir).map_err(|e| e.to_string())?;
    replay::replay(&data, &mut std::io::stdout().lock()).map_err(|e| e.to_string())
}
