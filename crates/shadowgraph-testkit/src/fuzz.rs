//! What the fuzz tests of the readers share.

/// Cases per fuzz test: `SHADOWGRAPH_FUZZ_CASES`, else 400 (a bounded
/// time in CI; a longer run is one variable away).
pub fn cases() -> u32 {
    std::env::var("SHADOWGRAPH_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400)
}
